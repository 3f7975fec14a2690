/*
 * chat_buf.c - the chat renderers' growable buffer and UTF-8 decoder (chat_buf.h).
 */
#include "daemon/text/chat_buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void smol_chat_buf_init(struct smol_chat_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void smol_chat_buf_deinit(struct smol_chat_buf *b)
{
    if (!b) return;
    free(b->data);
    smol_chat_buf_init(b);
}

void smol_chat_buf_reset(struct smol_chat_buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

int smol_chat_buf_append(struct smol_chat_buf *b, const char *s, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len - 1) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int smol_chat_buf_puts(struct smol_chat_buf *b, const char *s)
{
    return smol_chat_buf_append(b, s, strlen(s));
}

size_t smol_chat_utf8_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if ((s[0] & 0xE0) == 0xC0) { *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if ((s[0] & 0xF0) == 0xE0) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}
