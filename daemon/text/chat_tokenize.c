/*
 * chat_tokenize.c - render a chat request with its untrusted spans and
 * tokenize it so that caller text never yields CONTROL tokens.
 */
#include "daemon/text/chat_tokenize.h"

enum smol_err smol_chat_tokenize(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                                 const struct smol_tokenizer *tok, struct smol_ids *out_ids,
                                 struct smol_chat_buf *out_text, int *thinking, char *err)
{
    if (!tok || !out_ids) return smol_errf(err, SMOL_EINVAL, "chat_tokenize: NULL tokenizer or id list");
    struct smol_chat_buf local;
    struct smol_chat_buf *text = out_text ? out_text : &local;
    struct smol_chat_spans spans;
    smol_chat_buf_init(&local);
    smol_chat_spans_init(&spans);
    size_t len0 = text->len, n0 = out_ids->n;
    int th = 0;
    enum smol_err e = smol_chat_render_spans(tpl, req, text, &spans, &th, err);
    if (e) goto out;
    for (size_t i = 0; i < spans.n; i++) spans.v[i].off -= len0;    /* relative to the new text */
    e = smol_tokenizer_encode_spans(tok, text->data ? text->data + len0 : "", text->len - len0, 1, spans.v, spans.n,
                                    out_ids, err);
    if (e) {
        out_ids->n = n0;
        text->len = len0;
        if (text->data) text->data[len0] = '\0';
        goto out;
    }
    if (thinking) *thinking = th;
out:
    smol_chat_spans_deinit(&spans);
    smol_chat_buf_deinit(&local);
    return e;
}
