/*
 * grammar_vocab.c - smol_grammar_vocab_new: a tokenizer's tokens as the grammar engine's kinds.
 */
#include "daemon/text/grammar_vocab.h"

#include <stdlib.h>

enum smol_err smol_grammar_vocab_new(struct smol_grammar_vocab **out, const struct smol_tokenizer *tok, char *err)
{
    *out = NULL;
    const int32_t n = smol_tokenizer_n_vocab(tok);
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    struct smol_grammar_token *t = calloc(n > 0 ? (size_t)n : 1, sizeof *t);
    if (!t) return smol_errf(err, SMOL_ENOMEM, "grammar vocabulary: out of memory");
    for (int32_t i = 0; i < n; i++) {
        if (smol_tokenizer_is_eog(tok, i)) t[i].kind = SMOL_GT_END;
        else if (i == sp->tool_call) t[i].kind = SMOL_GT_TOOL_CALL;
        else if (i == sp->tool_call_end) t[i].kind = SMOL_GT_TOOL_CALL_END;
        else if (smol_tokenizer_is_special(tok, i)) t[i].kind = SMOL_GT_SKIP;
        else {
            t[i].piece = smol_tokenizer_piece(tok, i, &t[i].len);
            t[i].kind = SMOL_GT_TEXT;
        }
    }
    enum smol_err e = smol_grammar_vocab_build(out, n, t, err);
    free(t);
    return e;
}
