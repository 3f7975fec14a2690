/*
 * chat_buf.h - the growable byte buffer the chat renderers write into, and the UTF-8 decoder
 * they share (chat_template.c, pyrepr.c, chat_parse.c): a module of its own so that pyrepr
 * (called by the template renderer) does not reach back into the renderer.
 */
#ifndef SMOL_CHAT_BUF_H
#define SMOL_CHAT_BUF_H

#include <stddef.h>
#include <stdint.h>

struct smol_chat_buf {
    char *data;                 /* NUL-terminated after every append; NULL while empty */
    size_t len;                 /* bytes, excluding the NUL */
    size_t cap;                 /* bytes allocated */
};

void smol_chat_buf_init(struct smol_chat_buf *b);
void smol_chat_buf_deinit(struct smol_chat_buf *b);   /* frees; b is reusable after */
void smol_chat_buf_reset(struct smol_chat_buf *b);    /* len = 0, keeps memory */
/* 0 on success, -1 when out of memory (the buffer is unchanged). */
int smol_chat_buf_append(struct smol_chat_buf *b, const char *s, size_t n);
int smol_chat_buf_puts(struct smol_chat_buf *b, const char *s);

/* UTF-8 validity: smol_utf8_valid (daemon/model/rules.h). */
/* Decodes the code point at s (valid UTF-8 assumed); returns its length. */
size_t smol_chat_utf8_decode(const unsigned char *s, uint32_t *cp);

#endif
