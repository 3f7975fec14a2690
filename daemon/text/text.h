/*
 * text.h - the public face of the text layer: everything between bytes and
 * token ids, on top of the model layer's GGUF (daemon/model/model.h).
 *
 *   tokenizer      byte-level BPE from the GGUF, special tokens by string
 *   chat_template  native renders of the SmolLM3 / ChatML templates (+ pyrepr)
 *   chat_tokenize  render + tokenize with caller text kept out of control tokens
 *   chat_parse     reasoning / content / tool-call split of generated text
 *   detok          streaming detokenizer with stop strings
 *   grammar        constrained decoding: JSON Schema / GBNF / regex -> token masks
 *   sampler        penalties, temperature, top-k/p, min-p, seeded draws
 *   spec           speculative decoding: prompt-lookup drafts, draft length, verification
 *
 * The server and the command-line tool include this header, never the
 * pieces: tests/check_layers.sh enforces it.
 */
#ifndef SMOL_TEXT_H
#define SMOL_TEXT_H

#include "daemon/text/chat_parse.h"
#include "daemon/text/chat_template.h"
#include "daemon/text/chat_tokenize.h"
#include "daemon/text/detok.h"
#include "daemon/grammar/grammar.h"
#include "daemon/text/grammar_vocab.h"
#include "daemon/text/sampler.h"
#include "daemon/text/spec.h"
#include "daemon/text/tokenizer.h"

#endif
