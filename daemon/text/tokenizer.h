/*
 * tokenizer.h - byte-level BPE tokenizer built from GGUF metadata.
 *
 * Supports tokenizer.ggml.model = "gpt2" with the pre-tokenizers
 *   "smaug-bpe", "llama-bpe"  Llama-3 split regex (SmolLM3),
 *   "smollm"                  each \p{N} isolated, then the GPT-2 regex (SmolLM2),
 *   "gpt2", "default"         the GPT-2 regex.
 * Semantics are Hugging Face `tokenizers`: for the Llama-3 family
 * ignore_merges is on (a pre-token that is itself a vocabulary entry maps to
 * that id directly; llama.cpp's "smaug-bpe" does not do this and differs on
 * ~588 tokens such as " Việt"), merges are applied lowest rank first, ties
 * leftmost.  Special tokens: USER_DEFINED tokens (type 4: <think>,
 * <tool_call>, ...) are always matched in the text; CONTROL tokens (type 3:
 * <|im_start|>, ...) only when parse_special is set.  Matching is leftmost-
 * longest.  No BOS/EOS is ever added by encode: that is the caller's (chat
 * template's) business; special->add_bos reports the GGUF flag.
 *
 * Invalid UTF-8: never an error.  Bytes that do not form valid UTF-8 are cut
 * out of the regex split as their own pre-tokens and byte-level encoded like
 * any other bytes, so concatenating the pieces of the result always
 * reproduces the input bytes exactly.  (HF cannot take such input at all;
 * Python callers would first replace it with U+FFFD.)  The one exception is a
 * vocabulary lacking some byte-level tokens (SmolLM2 lacks 21, e.g. 0x04,
 * 0xff): such bytes are dropped, exactly as HF does (no unk token).  SmolLM3
 * has all 256.
 *
 * Thread safety: after smol_tokenizer_new the object is immutable; every
 * function takes it const and keeps its scratch per call, so any number of
 * threads may encode concurrently.
 */
#ifndef SMOL_TOKENIZER_H
#define SMOL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"

struct smol_gguf;
struct smol_tokenizer;

/* A growable array of token ids (caller's storage: zero-initialize it). */
struct smol_ids {
    int32_t *v;     /* [cap] */
    size_t n, cap;  /* used, allocated (elements) */
};

/* Appends id; SMOL_ENOMEM on allocation failure (v unchanged). */
enum smol_err smol_ids_push(struct smol_ids *ids, int32_t id);
/* Frees the storage and zeroes the struct; accepts NULL. */
void smol_ids_free(struct smol_ids *ids);
/* Length of the common prefix of a[0, na) and b[0, nb) (how much of a
 * cached KV sequence a prompt can reuse). */
int smol_lcp(const int32_t *a, int na, const int32_t *b, int nb);

/* Ids of named tokens, looked up by text at load; -1 when the vocab has none. */
struct smol_special_ids {
    int32_t bos;            /* tokenizer.ggml.bos_token_id (or -1) */
    int32_t eos;            /* tokenizer.ggml.eos_token_id (or -1) */
    int32_t pad;            /* tokenizer.ggml.padding_token_id (or -1) */
    int32_t im_start;       /* <|im_start|> */
    int32_t im_end;         /* <|im_end|> */
    int32_t eot;            /* <|eot_id|> */
    int32_t eom;            /* <|eom_id|> */
    int32_t end_of_text;    /* <|end_of_text|> or <|endoftext|> */
    int32_t think;          /* <think> */
    int32_t think_end;      /* </think> */
    int32_t tool_call;      /* <tool_call> */
    int32_t tool_call_end;  /* </tool_call> */
    int32_t tool_response;  /* <tool_response> */
    int32_t tool_response_end; /* </tool_response> */
    int add_bos;            /* tokenizer.ggml.add_bos_token (0 when absent) */
};

/* Builds the tokenizer from g's tokenizer.ggml.* keys.  The tokenizer copies
 * what it needs; g may be closed afterwards.  Errors: SMOL_EFORMAT (missing or
 * inconsistent keys, naming the key), SMOL_EUNSUPPORTED (tokenizer model or
 * pre-tokenizer we do not implement, naming it), SMOL_ENOMEM. */
enum smol_err smol_tokenizer_new(struct smol_tokenizer **out, const struct smol_gguf *g, char *err);
/* Frees; accepts NULL and *t == NULL; sets *t = NULL. */
void smol_tokenizer_free(struct smol_tokenizer **t);

/* Tokenizes text[0..len) (raw bytes, need not be NUL-terminated or valid
 * UTF-8) and appends the ids to out.  parse_special: also match CONTROL
 * tokens written literally in the text (trusted input such as a rendered chat
 * template; never user content: for a trusted string with untrusted parts
 * use smol_tokenizer_encode_spans).  Errors: SMOL_ENOMEM, SMOL_EINTERNAL (regex
 * engine failure, with the PCRE2 message); on error out->n may have grown. */
enum smol_err smol_tokenizer_encode(const struct smol_tokenizer *t, const char *text, size_t len,
                                    int parse_special, struct smol_ids *out, char *err);

/* A byte range [off, off + len) of a text. */
struct smol_span {
    size_t off, len;
};

/* Like smol_tokenizer_encode, but the bytes inside the untrusted spans
 * (caller-provided text embedded in a trusted string, e.g. the message
 * contents of a rendered chat prompt) can never become part of a CONTROL
 * token, even with parse_special: a CONTROL token is matched only when none
 * of its bytes lies in an untrusted span.  So "<|im_start|>" typed by a user
 * encodes as ordinary text while the template's own markers stay control
 * tokens.  USER_DEFINED tokens (<think>, <tool_call>, ...) keep their
 * always-matched semantics everywhere, as Hugging Face `tokenizers` does for
 * added tokens that are not special: a user's literal "<think>" is the
 * <think> id.  Nothing else changes: the text between the matched special
 * tokens is pre-tokenized and BPE'd exactly as by encode (span edges are
 * not pre-token boundaries), so when no untrusted span overlaps a CONTROL
 * token's text the ids equal those of encode(parse_special).  Spans may come
 * in any order, overlap or be empty; each must lie within [0, len)
 * (SMOL_EINVAL otherwise).  Without parse_special the spans change nothing.
 * Errors as encode, plus SMOL_EINVAL. */
enum smol_err smol_tokenizer_encode_spans(const struct smol_tokenizer *t, const char *text, size_t len,
                                          int parse_special, const struct smol_span *untrusted, size_t n_untrusted,
                                          struct smol_ids *out, char *err);

/* Exact bytes of token id (byte-level decoded; special tokens give their
 * text), *len set; NULL for an id out of range.  Pieces of a multi-byte
 * character may be partial UTF-8.  Valid as long as t. */
const char *smol_tokenizer_piece(const struct smol_tokenizer *t, int32_t id, size_t *len);

/* Id of the token whose text (the bytes piece() returns) is token_text
 * (NUL-terminated); special tokens take precedence; -1 when absent. */
int32_t smol_tokenizer_find(const struct smol_tokenizer *t, const char *token_text);

/* 1 if id ends generation: eos, <|im_end|>, <|eot_id|>, <|end_of_text|>,
 * <|endoftext|>, <|eom_id|> (those present). */
int smol_tokenizer_is_eog(const struct smol_tokenizer *t, int32_t id);
/* 1 if id is a CONTROL or USER_DEFINED token. */
int smol_tokenizer_is_special(const struct smol_tokenizer *t, int32_t id);

int32_t smol_tokenizer_n_vocab(const struct smol_tokenizer *t);
const struct smol_special_ids *smol_tokenizer_special(const struct smol_tokenizer *t);
/* The tokenizer.ggml.pre name in use ("smaug-bpe", ...). */
const char *smol_tokenizer_pre_name(const struct smol_tokenizer *t);

#endif
