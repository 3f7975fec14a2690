/*
 * bench_tokenizer.c - encode throughput of the BPE tokenizer.
 *
 *   build/bench/bench_tokenizer [MODEL.gguf [TEXTFILE]]
 *
 * Default model: the SmolLM3 vocabulary of tests/fixtures/models/fixture-t.Q8_0.gguf.
 * Default text: every string of tests/fixtures/tokenizer/hf_smollm3_vectors.json
 * (code, prose, numbers, whitespace runs, CJK, emoji, special-token text)
 * concatenated and repeated to ~8 MB.  Prints the best of 3 runs, one thread,
 * as "encode: X MB/s (N tokens, B bytes/token)", plus single-thread rates for
 * plain English prose and for a pathological 1 MB run of spaces (one
 * pre-token: the O(n log n) BPE worst case).
 */
#include "daemon/model/gguf.h"
#include "daemon/text/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void run(const struct smol_tokenizer *t, const char *what, const char *text, size_t len, int reps)
{
    double best = 1e30;
    size_t n = 0;
    char err[SMOL_ERRLEN];
    for (int r = 0; r < reps; r++) {
        struct smol_ids ids = {0};
        double t0 = now();
        if (smol_tokenizer_encode(t, text, len, 1, &ids, err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err);
            exit(1);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
        n = ids.n;
        smol_ids_free(&ids);
    }
    printf("%s: %.1f MB/s (%zu tokens, %.2f bytes/token, %.1f MB)\n", what, len / 1e6 / best, n,
           n ? (double)len / n : 0.0, len / 1e6);
}

static char *repeat_to(const char *s, size_t n, size_t target, size_t *len)
{
    size_t k = n ? (target + n - 1) / n : 0;
    char *buf = malloc(k * n + 1);
    for (size_t i = 0; i < k; i++) memcpy(buf + i * n, s, n);
    *len = k * n;
    return buf;
}

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "tests/fixtures/models/fixture-t.Q8_0.gguf";
    char err[SMOL_ERRLEN];
    struct smol_gguf *g = NULL;
    struct smol_tokenizer *t = NULL;
    double t0 = now();
    if (smol_gguf_open(&g, model, err) || smol_tokenizer_new(&t, g, err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        return 1;
    }
    smol_gguf_close(&g);
    printf("load: %.0f ms (%s, %d tokens)\n", (now() - t0) * 1e3, smol_tokenizer_pre_name(t), smol_tokenizer_n_vocab(t));

    char *corpus = NULL;
    size_t clen = 0;
    if (argc > 2) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) { perror(argv[2]); return 1; }
        fseek(f, 0, SEEK_END);
        clen = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        corpus = malloc(clen + 1);
        if (fread(corpus, 1, clen, f) != clen) { perror(argv[2]); return 1; }
        fclose(f);
    } else {
        json_error_t je;
        json_t *root = json_load_file("tests/fixtures/tokenizer/hf_smollm3_vectors.json", JSON_ALLOW_NUL, &je);
        if (!root) { fprintf(stderr, "bench_tokenizer: %s\n", je.text); return 1; }
        size_t cap = 1 << 20, i;
        char *buf = malloc(cap);
        json_t *c;
        json_array_foreach(json_object_get(root, "cases"), i, c) {
            json_t *s = json_object_get(c, "text");
            size_t n = json_string_length(s);
            if (clen + n > cap) buf = realloc(buf, cap = (clen + n) * 2);
            memcpy(buf + clen, json_string_value(s), n);
            clen += n;
        }
        json_decref(root);
        corpus = repeat_to(buf, clen, 8u << 20, &clen);
        free(buf);
    }
    run(t, "encode", corpus, clen, 3);

    static const char prose[] =
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
        "it was the season of Darkness, it was the spring of hope, it was the winter of despair.\n";
    size_t plen;
    char *p = repeat_to(prose, sizeof prose - 1, 8u << 20, &plen);
    run(t, "encode prose", p, plen, 3);
    free(p);
    p = malloc(1u << 20);
    memset(p, ' ', 1u << 20);
    run(t, "encode 1 MB of spaces", p, 1u << 20, 1);
    free(p);
    free(corpus);
    smol_tokenizer_free(&t);
    return 0;
}
