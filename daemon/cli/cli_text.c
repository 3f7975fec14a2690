/*
 * cli_text.c - `smollm3 tokenize` and `smollm3 detokenize`.
 *
 *   smollm3 tokenize -m MODEL [--special] [--json] TEXT|-
 *       TEXT (or, for "-", all of stdin as raw bytes) -> token ids.  Plain
 *       output: the ids in decimal, separated by single spaces, on one line
 *       ended by "\n" (an empty line for empty text); --json prints
 *       {"ids":[...]} and "\n".  --special also matches CONTROL tokens
 *       (<|im_start|>, ...) written in the text; USER_DEFINED ones (<think>,
 *       ...) always are.  No BOS is added.  "--" ends the flags, so a TEXT
 *       that starts with '-' can follow it.
 *   smollm3 detokenize -m MODEL ID...
 *       writes the exact bytes of the concatenated pieces and nothing else
 *       (no newline).  IDs are separate arguments (commas also separate).
 *
 * Exit status: 0 ok, 1 runtime error (model, id out of range, I/O), 2 usage.
 */
#include "daemon/cli/cli.h"
#include "daemon/model/model.h"
#include "daemon/text/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct smol_tokenizer *open_tokenizer(const char *cmd, const char *path)
{
    char err[SMOL_ERRLEN];
    struct smol_gguf *g = NULL;
    struct smol_tokenizer *t = NULL;
    if (smol_gguf_open(&g, path, err) || smol_tokenizer_new(&t, g, err)) {
        fprintf(stderr, "smollm3 %s: %s\n", cmd, err);
        smol_gguf_close(&g);
        return NULL;
    }
    smol_gguf_close(&g);
    return t;
}

int smol_cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    int special = 0, json = 0, rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) { fprintf(stderr, "smollm3 tokenize: %s needs a value\n", a); return 2; }
            model = argv[i];
        } else if (!strcmp(a, "--special")) {
            special = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--") && i + 1 < argc && !text) {
            text = argv[++i];
        } else if (a[0] == '-' && a[1] != 0) {
            fprintf(stderr, "smollm3 tokenize: unknown flag '%s'\n", a);
            return 2;
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "smollm3 tokenize: more than one TEXT (quote it, or use - for stdin)\n");
            return 2;
        }
    }
    if (!model || !text) {
        fprintf(stderr, "usage: smollm3 tokenize -m MODEL [--special] [--json] TEXT|-\n");
        return 2;
    }
    char *buf = NULL, err[SMOL_ERRLEN];
    size_t len = strlen(text);
    if (!strcmp(text, "-")) {
        if (!(buf = smol_cli_read_all(stdin, &len))) {
            fprintf(stderr, "smollm3 tokenize: cannot read stdin: %s\n", strerror(errno));
            return 1;
        }
        text = buf;
    }
    struct smol_tokenizer *t = open_tokenizer("tokenize", model);
    struct smol_ids ids = {0};
    if (!t) goto done;
    if (smol_tokenizer_encode(t, text, len, special, &ids, err)) {
        fprintf(stderr, "smollm3 tokenize: %s\n", err);
        goto done;
    }
    fputs(json ? "{\"ids\":[" : "", stdout);
    for (size_t i = 0; i < ids.n; i++) printf(i ? (json ? ",%d" : " %d") : "%d", ids.v[i]);
    fputs(json ? "]}\n" : "\n", stdout);
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "smollm3 tokenize: write error: %s\n", strerror(errno));
        goto done;
    }
    rc = 0;
done:
    smol_ids_free(&ids);
    smol_tokenizer_free(&t);
    free(buf);
    return rc;
}

int smol_cli_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    struct smol_ids ids = {0};
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) { fprintf(stderr, "smollm3 detokenize: %s needs a value\n", a); goto done; }
            model = argv[i];
            continue;
        }
        if (a[0] == '-') {
            fprintf(stderr, "smollm3 detokenize: unknown flag '%s' (ids are non-negative integers)\n", a);
            goto done;
        }
        for (const char *p = a; *p;) {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',') || p[0] == '+' ||
                p[0] == ' ') {
                fprintf(stderr, "smollm3 detokenize: bad token id '%s'\n", a);
                goto done;
            }
            if (smol_ids_push(&ids, (int32_t)v)) { fprintf(stderr, "smollm3 detokenize: out of memory\n"); goto done; }
            p = *end ? end + 1 : end;
        }
    }
    if (!model || ids.n == 0) {
        fprintf(stderr, "usage: smollm3 detokenize -m MODEL ID...\n");
        goto done;
    }
    rc = 1;
    struct smol_tokenizer *t = open_tokenizer("detokenize", model);
    if (!t) goto done;
    for (size_t i = 0; i < ids.n; i++) {
        if (!smol_tokenizer_piece(t, ids.v[i], NULL)) {
            fprintf(stderr, "smollm3 detokenize: token id %d outside the vocabulary (0..%d)\n", ids.v[i],
                    smol_tokenizer_n_vocab(t) - 1);
            smol_tokenizer_free(&t);
            goto done;
        }
    }
    for (size_t i = 0; i < ids.n; i++) {
        size_t n;
        const char *p = smol_tokenizer_piece(t, ids.v[i], &n);
        fwrite(p, 1, n, stdout);
    }
    smol_tokenizer_free(&t);
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "smollm3 detokenize: write error: %s\n", strerror(errno));
        goto done;
    }
    rc = 0;
done:
    smol_ids_free(&ids);
    return rc;
}
