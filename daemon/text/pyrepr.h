/*
 * pyrepr.h - Python's repr() and json.dumps() of JSON values, byte for byte
 * as the chat templates' Jinja renders print them (see pyrepr.c).
 */
#ifndef SMOL_PYREPR_H
#define SMOL_PYREPR_H

#include <jansson.h>

struct smol_chat_buf;

/* Python's repr() of a JSON value (dicts keep insertion order, True/False/None,
 * str repr quoting and escaping, float repr).  -1 when out of memory or
 * nested deeper than 512 levels (smol_chat_render refuses tools deeper than
 * 256 with SMOL_EINVAL first). */
int smol_chat_pyrepr(struct smol_chat_buf *b, const json_t *v);
/* JSON text as Python's json.dumps(v, ensure_ascii=False) writes it
 * (", " and ": " separators, shortest round-trip floats).  -1 as above. */
int smol_chat_json_dump(struct smol_chat_buf *b, const json_t *v);
/* Shortest round-trip decimal of a finite double in Python's repr form
 * ("0.1", "1e-05", "1e+16", "100.0"); out has room for 32 bytes. */
void smol_chat_fmt_double(double v, char out[32]);
#endif
