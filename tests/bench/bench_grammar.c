/*
 * bench_grammar.c - token-mask time on SmolLM3's 128256-token vocabulary for
 * the real-world schemas in tests/grammar/schemas/: each schema's instance is
 * tokenized and walked token by token; every step's fill_mask is timed
 * (median, p99, max, thread CPU time), plus compile time (schema -> grammar)
 * and index time (grammar x vocabulary, the cacheable part).
 *   build/bench/bench_grammar [GGUF] [SCHEMA_DIR] [reps]
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/model/gguf.h"
#include "daemon/grammar/grammar.h"
#include "daemon/text/grammar_vocab.h"
#include "daemon/text/tokenizer.h"

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(n + 1);
    if (p && fread(p, 1, n, f) != (size_t)n) { free(p); p = NULL; }
    if (p) p[n] = 0;
    fclose(f);
    return p;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *gguf = argc > 1 ? argv[1] : "tests/fixtures/models/fixture-t.Q8_0.gguf";
    const char *dir = argc > 2 ? argv[2] : "tests/grammar/schemas";
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    char err[SMOL_ERRLEN] = "";
    struct smol_gguf *g = NULL;
    struct smol_tokenizer *tok = NULL;
    struct smol_grammar_vocab *v = NULL;
    if (smol_gguf_open(&g, gguf, err) || smol_tokenizer_new(&tok, g, err)) { fprintf(stderr, "%s: %s\n", gguf, err); return 1; }
    smol_gguf_close(&g);
    double t0 = now_us();
    if (smol_grammar_vocab_new(&v, tok, err)) { fprintf(stderr, "%s\n", err); return 1; }
    printf("vocabulary: %d tokens, trie built in %.1f ms\n", smol_grammar_vocab_size(v), (now_us() - t0) / 1e3);
    printf("%-12s %7s %9s %9s %8s %6s %9s %9s %9s %9s %9s %7s %7s\n", "schema", "states", "compile", "index", "idx MiB",
           "tokens", "median", "p99", "max", "logits", "advance", "shared", "partial");
    printf("  (median/p99/max: fill_mask per token; logits: mask_logits on the vocabulary, median;\n"
           "   advance: accept_token, median; shared: states whose token class is their twin's;\n"
           "   partial: states walked for the tokens too long to take the twin's verdict)\n");
    DIR *d = opendir(dir);
    if (!d) { perror(dir); return 1; }
    struct dirent *e;
    char *names[64];
    int nn = 0;
    while ((e = readdir(d)) && nn < 64) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json") && !strstr(e->d_name, ".instance.")) names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, (int (*)(const void *, const void *))strcmp);
    uint32_t *mask = malloc(((smol_grammar_vocab_size(v) + 31) / 32) * sizeof *mask);
    for (int i = 0; i < nn; i++) {
        char path[1024], name[256];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(names[i]) - 5), names[i]);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *sch = slurp(path);
        snprintf(path, sizeof path, "%s/%s.instance.json", dir, name);
        char *inst = slurp(path);
        if (!sch || !inst) { fprintf(stderr, "%s: missing schema or instance\n", name); return 1; }
        struct smol_grammar *gr = NULL;
        struct smol_grammar_index *ix = NULL;
        struct smol_grammar_matcher *m = NULL;
        double c0 = now_us();
        if (smol_grammar_compile_json_schema(sch, strlen(sch), NULL, &gr, err)) { fprintf(stderr, "%s: %s\n", name, err); return 1; }
        double c1 = now_us();
        if (smol_grammar_index_new(&ix, gr, v, 0, err)) { fprintf(stderr, "%s: %s\n", name, err); return 1; }
        double c2 = now_us();
        if (smol_grammar_matcher_new(&m, gr, ix, err)) { fprintf(stderr, "%s\n", err); return 1; }
        struct smol_ids ids = {0};
        smol_tokenizer_encode(tok, inst, strlen(inst), 0, &ids, err);
        size_t ns = (ids.n + 1) * (size_t)reps, k = 0, ka = 0;
        double *t = malloc(ns * sizeof *t), *ta = malloc(ns * sizeof *ta), *tc = malloc(ns * sizeof *tc);
        int32_t nv = smol_grammar_vocab_size(v);
        float *logits = malloc(nv * sizeof *logits);
        for (int r = 0; r < reps; r++) {
            smol_grammar_matcher_reset(m);
            for (size_t j = 0; j <= ids.n; j++) {
                double a = now_us();
                smol_grammar_matcher_fill_mask(m, mask);
                t[k++] = now_us() - a;
                for (int32_t q = 0; q < nv; q++) logits[q] = (float)(q & 255);
                a = now_us();
                smol_grammar_mask_logits(mask, nv, logits, nv);
                tc[ka] = now_us() - a;
                a = now_us();
                if (j < ids.n && smol_grammar_matcher_accept_token(m, ids.v[j])) {
                    fprintf(stderr, "%s: token %zu rejected\n", name, j);
                    return 1;
                }
                ta[ka++] = now_us() - a;
            }
        }
        qsort(t, k, sizeof *t, cmpd);
        qsort(ta, ka, sizeof *ta, cmpd);
        qsort(tc, ka, sizeof *tc, cmpd);
        printf("%-12s %7u %7.2fms %7.1fms %8.1f %6zu %7.1fus %7.1fus %7.1fus %7.1fus %7.1fus %7u %7u\n", name,
               smol_grammar_n_states(gr), (c1 - c0) / 1e3, (c2 - c1) / 1e3, smol_grammar_index_bytes(ix) / 1048576.0,
               ids.n, t[k / 2], t[(size_t)(k * 0.99)], t[k - 1], tc[ka / 2], ta[ka / 2], smol_grammar_index_shared(ix),
               smol_grammar_index_partial(ix));
        free(t);
        free(ta);
        free(tc);
        free(logits);
        smol_ids_free(&ids);
        smol_grammar_matcher_free(&m);
        smol_grammar_index_free(&ix);
        smol_grammar_free(&gr);
        free(sch);
        free(inst);
        free(names[i]);
    }
    free(mask);
    smol_grammar_vocab_free(&v);
    smol_tokenizer_free(&tok);
    return 0;
}
