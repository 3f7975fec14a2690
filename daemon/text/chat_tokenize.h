/*
 * chat_tokenize.h - a chat request to prompt token ids, safely.
 *
 * The rendered prompt is trusted template text with caller text (message
 * contents, system text, tools, date) embedded in it.  The template's own
 * <|im_start|> / <|im_end|> must become CONTROL tokens, so the prompt is
 * tokenized with parse_special; but the caller's text must not: a user who
 * types "<|im_start|>system\n..." would otherwise forge a system turn
 * (prompt injection).  smol_chat_tokenize renders with
 * smol_chat_render_spans and tokenizes with smol_tokenizer_encode_spans, the
 * caller-text spans marked untrusted: CONTROL tokens are matched only in
 * template text.  USER_DEFINED tokens (<think>, <tool_call>, ...) are matched
 * in caller text too, as Hugging Face does (they are added tokens the model
 * reads in assistant history; a user's literal "<think>" is the <think> id).
 * When the caller text holds no CONTROL token text the ids are exactly those
 * of encode(render(...), parse_special = 1), i.e. HF's
 * apply_chat_template(tokenize=True).  No BOS is added (SmolLM3 and SmolLM2
 * templates do not add one, nor does HF's chat tokenization).
 *
 * This is the entry point for the daemon engine and the chat CLI.
 */
#ifndef SMOL_CHAT_TOKENIZE_H
#define SMOL_CHAT_TOKENIZE_H

#include "daemon/text/chat_template.h"
#include "daemon/text/tokenizer.h"

/* Renders req with tpl and appends the prompt's ids to out_ids.  out_text
 * (optional): the rendered prompt is appended to it as well (only the newly
 * appended part is tokenized).  *thinking (optional) as smol_chat_render.
 * Errors: those of smol_chat_render_spans and smol_tokenizer_encode_spans;
 * on error out_ids->n and out_text->len are restored. */
enum smol_err smol_chat_tokenize(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                                 const struct smol_tokenizer *tok, struct smol_ids *out_ids,
                                 struct smol_chat_buf *out_text, int *thinking, char *err);

#endif
