/*
 * grammar_vocab.h - the grammar engine's vocabulary from a tokenizer (daemon/grammar knows
 * token kinds and bytes only; this is where a tokenizer's special ids become them).
 */
#ifndef SMOL_TEXT_GRAMMAR_VOCAB_H
#define SMOL_TEXT_GRAMMAR_VOCAB_H

#include "daemon/grammar/grammar.h"
#include "daemon/text/tokenizer.h"

/* The vocabulary trie of tok (~10 MB for 128K tokens): end-of-generation tokens end, <tool_call>
 * and </tool_call> are the grammar's pseudo bytes, other special tokens and pieces the grammar
 * cannot emit are left out.  tok must outlive it. */
enum smol_err smol_grammar_vocab_new(struct smol_grammar_vocab **out, const struct smol_tokenizer *tok, char *err);

#endif
