/*
 * cli_model.c - `smollm3 logits`, `smollm3 generate`, `smollm3 bench`.
 *
 *   logits   -m MODEL --ids 1,2,3 [--all] -o OUT [--threads N] [--kv-type f16|q8_0|f32] [--kv-f32]
 *            float32 little-endian logits, [n_ids][n_vocab] with --all,
 *            else [1][n_vocab] for the last position.
 *            --kv-type: the KV cache's element type (default f16; --kv-f32 is
 *            an alias of --kv-type f32); also taken by generate and bench.
 *   generate -m MODEL (--ids 1,2,3 | --prompt TEXT) -n N [--temp T] [--seed S]
 *            [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--threads N] [--json]
 *            [--json-schema FILE | --grammar FILE]
 *            [--speculative K | --no-speculative] [--stats] [--spec-costs R1,R2,..]
 *            greedy at --temp 0; stops early at an end-of-generation token.
 *            --json-schema / --grammar (GBNF): the output is constrained to
 *            the schema or grammar, and ends (eos) once it is complete.
 *            --json prints {"ids":[...]} with the generated ids only; otherwise
 *            the generated text is streamed to stdout.  Speculative decoding
 *            by prompt lookup (daemon/text/spec.h) is on, drafts of up to K
 *            tokens (default and most 7; 0 or --no-speculative: off): the
 *            same tokens at --temp 0, the same distribution otherwise.
 *            --stats: one line on stderr, "generate: N tokens in S steps
 *            (drafted D, accepted A), T s, X tokens/s" (decode only), and
 *            "generate: steps by draft length 0..7: S0 S1 ... S7".
 *            --spec-costs R1,R2,..: the verify costs the draft length is
 *            chosen by (a step of k + 1 positions relative to a 1-token
 *            step; missing ones extrapolated), instead of measuring them
 *            on this model: a small model drafting as a large one would.
 *            --force-output FILE: teacher forcing: the tokens of FILE's text
 *            (special-token text parsed) are the output, taken at each row
 *            instead of a sample, up to -n; every step's forward pass runs
 *            as usual.  Speculative decoding's acceptance and speed on a
 *            known answer (a model that gives it), e.g. a random-weight
 *            model of the full size.
 *   bench    -m MODEL -p 512 -n 128 [-d DEPTH] [-b BATCH] [-t THREADS] [--json]
 *            prompt processing and generation tokens/s; generation follows
 *            DEPTH tokens of context (0: an empty one, as llama-bench's tg;
 *            the line reads "tg128 @ d4096:"); with --json the last line is
 *            {"pp_tps": ..., "tg_tps": ...}.  -b B > 1 adds generation by B
 *            sequences at once, a token of each per step with B rows of
 *            logits (the daemon's continuous batching): "tg128 x b4: T
 *            tokens/s in all" and "tg_batch_tps" in the JSON.
 *            --verify K: also the cost of a step of k + 1 positions of one
 *            sequence (a speculative verify step: the last token and a
 *            draft of k, every row's logits, then the k drafts rolled back)
 *            for k = 1..K, relative to a 1-token step: "verify k+1: M
 *            ms/step, R x a 1-token step" and "verify_cost": [R1, ...] in
 *            the JSON; -n steps of each size, interleaved, M their median.
 *            The line "backend: NAME, threads: N" (with the CUDA knobs in
 *            effect on cuda) and "backend" / "cuda" in the JSON say what ran.
 *
 *   All three take the compute backend:
 *            --backend cpu|cuda|cuda-emu|auto (default cpu; cuda fails without a
 *            usable device, auto falls back to the CPU with a line on stderr;
 *            cuda-emu runs the CUDA backend's own source on the host emulator,
 *            tests/cuda_emu: slow, for tests and for counting launches),
 *            --cuda-device N, and the CUDA backend's knobs, each a newer path
 *            off by default until verified on a device (kernels/cuda/NOTES.md):
 *            --cuda-matvec f32|q8|q8k, --cuda-fuse on|off|layer, --cuda-graphs on|off|bucket,
 *            --cuda-gemm tiled|mma|imma|lt, --cuda-attn paged|tiled|prefill, --cuda-persistent on|off,
 *            --cuda-gemm-fuse on|off (SMOL_CUDA_MATVEC / SMOL_CUDA_FUSE / SMOL_CUDA_GRAPHS /
 *            SMOL_CUDA_GEMM / SMOL_CUDA_GEMM_FUSE / SMOL_CUDA_ATTN / SMOL_CUDA_PERSISTENT override them).
 */
#include "daemon/cli/cli.h"
#include "daemon/model/model.h"
#include "daemon/text/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct opts {
    const char *model, *ids, *out, *prompt;
    const char *schema_file;    /* generate: --json-schema / --grammar FILE */
    const char *force_file;     /* generate: --force-output FILE */
    int gbnf;                   /* schema_file is GBNF */
    int all, json, kv_f32, yarn, n_ctx;
    const char *kv_type;        /* --kv-type; NULL = f16 (f32 with --kv-f32) */
    long n, threads, p, d, b;
    struct smol_sampler_params sp;
    int have_temp;
    int spec_k, stats;          /* generate: largest draft (0: off), --stats */
    float spec_cost[SMOL_SPEC_MAX_DRAFT + 1]; /* generate: --spec-costs (cost[0] = 0: measure) */
    long verify;                /* bench: --verify K */
    const char *backend;        /* --backend cpu | cuda | auto; NULL = cpu */
    int cuda_device;            /* --cuda-device N */
    struct smol_cuda_opts cuda; /* --cuda-matvec / --cuda-fuse / --cuda-graphs / --cuda-gemm / --cuda-attn */
};

/* Common flag parser; returns 0, or 2 for a usage error (message printed). */
static int parse(const char *cmd, int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->n = -1;
    o->p = -1;
    o->sp = smol_sampler_defaults();
    o->sp.seed = 0;
    o->spec_k = SMOL_SPEC_MAX_DRAFT;
    smol_cuda_opts_default(&o->cuda);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long lv;
        double dv;
#define NEED() do { if (!v) { fprintf(stderr, "smollm3 %s: %s needs a value\n", cmd, a); return 2; } i++; } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); o->model = v; }
        else if (!strcmp(a, "--ids")) { NEED(); o->ids = v; }
        else if (!strcmp(a, "--prompt")) { NEED(); o->prompt = v; }
        else if (!strcmp(a, "--json-schema")) { NEED(); o->schema_file = v; o->gbnf = 0; }
        else if (!strcmp(a, "--grammar")) { NEED(); o->schema_file = v; o->gbnf = 1; }
        else if (!strcmp(a, "--force-output")) { NEED(); o->force_file = v; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { NEED(); o->out = v; }
        else if (!strcmp(a, "--all")) o->all = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--kv-f32")) o->kv_f32 = 1;
        else if (!strcmp(a, "--kv-type")) {
            NEED();
            uint32_t t;
            char why[SMOL_ERRLEN];
            if (smol_kv_type_parse(v, &t, why)) { fprintf(stderr, "smollm3 %s: --kv-type: %s\n", cmd, why); return 2; }
            o->kv_type = v;
        }
        else if (!strcmp(a, "--backend")) {
            NEED();
            if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto") && strcmp(v, "cuda-emu")) {
                fprintf(stderr, "smollm3 %s: --backend must be cpu, cuda, cuda-emu or auto (got '%s')\n", cmd, v);
                return 2;
            }
            o->backend = v;
        }
        else if (!strcmp(a, "--cuda-device")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 0, 64, &lv)) return 2; o->cuda_device = (int)lv;
        }
        else if (!strcmp(a, "--cuda-matvec") || !strcmp(a, "--cuda-fuse") || !strcmp(a, "--cuda-graphs") ||
                 !strcmp(a, "--cuda-gemm") || !strcmp(a, "--cuda-attn") || !strcmp(a, "--cuda-persistent") ||
                 !strcmp(a, "--cuda-gemm-fuse")) {
            NEED();
            const char *key = !strcmp(a, "--cuda-matvec") ? "cuda_matvec" : !strcmp(a, "--cuda-fuse") ? "cuda_fuse"
                              : !strcmp(a, "--cuda-gemm") ? "cuda_gemm" : !strcmp(a, "--cuda-attn") ? "cuda_attn"
                              : !strcmp(a, "--cuda-persistent") ? "cuda_persistent"
                              : !strcmp(a, "--cuda-gemm-fuse") ? "cuda_gemm_fuse" : "cuda_graphs";
            char why[SMOL_ERRLEN];
            if (smol_cuda_opts_set(&o->cuda, key, v, why)) { fprintf(stderr, "smollm3 %s: %s: %s\n", cmd, a, why); return 2; }
        }
        else if (!strcmp(a, "--yarn")) o->yarn = 1;
        else if (!strcmp(a, "--no-speculative")) o->spec_k = 0;
        else if (!strcmp(a, "--stats")) o->stats = 1;
        else if (!strcmp(a, "--speculative")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 0, SMOL_SPEC_MAX_DRAFT, &lv)) return 2; o->spec_k = (int)lv;
        }
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 1, 256, &o->threads)) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 0, 1 << 20, &o->n)) return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 1, 64, &o->b)) return 2;
        } else if (!strcmp(a, "--spec-costs")) {
            NEED();
            /* R1,R2,...: a step of k + 1 positions relative to a 1-token step, k = 1.. */
            o->spec_cost[0] = 1.0f;
            const char *q = v;
            for (int k = 1; k <= SMOL_SPEC_MAX_DRAFT; k++) {
                char *end;
                errno = 0;
                double c = strtod(q, &end);
                if (end == q || errno || !(c >= 1.0 && c <= 1000.0) || (*end && *end != ',')) {
                    fprintf(stderr, "smollm3 %s: --spec-costs expects up to %d numbers >= 1, comma-separated\n", cmd,
                            SMOL_SPEC_MAX_DRAFT);
                    return 2;
                }
                o->spec_cost[k] = (float)c;
                if (!*end) {
                    for (int j = k + 1; j <= SMOL_SPEC_MAX_DRAFT; j++) o->spec_cost[j] = o->spec_cost[k] * (j + 1) / (k + 1);
                    break;
                }
                q = end + 1;
            }
        } else if (!strcmp(a, "--verify")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 1, SMOL_SPEC_MAX_DRAFT, &o->verify)) return 2;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 0, 1 << 20, &o->d)) return 2;
        } else if (!strcmp(a, "-p")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 1, 1 << 20, &o->p)) return 2;
        } else if (!strcmp(a, "--ctx")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 1, 1 << 24, &lv)) return 2; o->n_ctx = (int)lv;
        } else if (!strcmp(a, "--temp")) {
            NEED(); if (smol_cli_parse_float(cmd, a, v, 0, 100, &dv)) return 2; o->sp.temperature = (float)dv; o->have_temp = 1;
        } else if (!strcmp(a, "--top-k")) {
            NEED(); if (smol_cli_parse_int(cmd, a, v, 0, 1 << 20, &lv)) return 2; o->sp.top_k = (int32_t)lv;
        } else if (!strcmp(a, "--top-p")) {
            NEED(); if (smol_cli_parse_float(cmd, a, v, 1e-6, 1, &dv)) return 2; o->sp.top_p = (float)dv;
        } else if (!strcmp(a, "--min-p")) {
            NEED(); if (smol_cli_parse_float(cmd, a, v, 0, 1, &dv)) return 2; o->sp.min_p = (float)dv;
        } else if (!strcmp(a, "--repeat-penalty")) {
            NEED(); if (smol_cli_parse_float(cmd, a, v, 0.01, 100, &dv)) return 2; o->sp.repetition_penalty = (float)dv;
        } else if (!strcmp(a, "--seed")) {
            NEED();
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-') { fprintf(stderr, "smollm3 %s: --seed expects a non-negative integer\n", cmd); return 2; }
            o->sp.seed = s;
        } else {
            fprintf(stderr, "smollm3 %s: unknown argument '%s'\n", cmd, a);
            return 2;
        }
#undef NEED
    }
    if (!o->model) {
        fprintf(stderr, "smollm3 %s: -m MODEL is required\n", cmd);
        return 2;
    }
    if (o->kv_f32 && o->kv_type && strcmp(o->kv_type, "f32")) {
        fprintf(stderr, "smollm3 %s: --kv-f32 is --kv-type f32: it conflicts with --kv-type %s\n", cmd, o->kv_type);
        return 2;
    }
    return 0;
}

static struct smol_model *open_model(const char *cmd, const struct opts *o, int n_ctx)
{
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.n_threads = (int)o->threads;
    set.kv_f32 = o->kv_f32;
    set.kv_type = o->kv_type;
    set.yarn = o->yarn;
    set.n_ctx = n_ctx;
    set.backend = o->backend;
    set.cuda_device = o->cuda_device;
    set.cuda = o->cuda;
    set.quiet = 1;
    char err[SMOL_ERRLEN];
    struct smol_model *m;
    if (smol_model_open(&m, o->model, &set, err)) {
        fprintf(stderr, "smollm3 %s: %s\n", cmd, err);
        return NULL;
    }
    return m;
}

/* Context needed: prompt + generation, capped by the model's (the model
 * then reports a prompt that does not fit). */
static int ctx_for(long need) { return need > (1 << 24) ? 1 << 24 : (int)(need < 1 ? 1 : need); }

int smol_cli_logits(int argc, char **argv)
{
    struct opts o;
    int rc = parse("logits", argc, argv, &o);
    if (rc) return rc;
    if (!o.ids || !o.out) {
        fprintf(stderr, "smollm3 logits: --ids and -o OUT are required\n");
        return 2;
    }
    int *ids, n;
    if (smol_cli_parse_ids("logits", o.ids, &ids, &n)) return 2;
    struct smol_model *m = open_model("logits", &o, 0);
    if (!m) { free(ids); return 1; }
    rc = 1;
    char err[SMOL_ERRLEN];
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    size_t rows = o.all ? (size_t)n : 1;
    float *logits = malloc(rows * m->cfg.vocab * sizeof *logits);
    FILE *f = NULL;
    if (!logits) { fprintf(stderr, "smollm3 logits: out of memory\n"); goto out; }
    if (smol_model_eval(m, &seq, (const int32_t *)ids, n, o.all, logits, err)) {
        fprintf(stderr, "smollm3 logits: %s\n", err);
        goto out;
    }
    if (!(f = fopen(o.out, "wb"))) {
        fprintf(stderr, "smollm3 logits: cannot write '%s': %s\n", o.out, strerror(errno));
        goto out;
    }
    if (fwrite(logits, sizeof *logits * m->cfg.vocab, rows, f) != rows || fclose(f)) {
        f = NULL;
        fprintf(stderr, "smollm3 logits: write to '%s' failed\n", o.out);
        goto out;
    }
    f = NULL;
    rc = 0;
out:
    if (f) fclose(f);
    free(logits);
    free(ids);
    smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
    return rc;
}

/* generate's constraint: the grammar of --json-schema / --grammar FILE,
 * its token index and a matcher.  0, or 1 with a message printed. */
struct constraint {
    struct smol_grammar *g;
    struct smol_grammar_vocab *v;
    struct smol_grammar_index *ix;
    struct smol_grammar_matcher *m;
    uint32_t *mask;
    int32_t n_mask, n_logits;       /* the grammar's vocabulary, the model's */
};

static int constraint_open(struct constraint *c, const struct opts *o, const struct smol_tokenizer *tok)
{
    char err[SMOL_ERRLEN];
    memset(c, 0, sizeof *c);
    if (!o->schema_file) return 0;
    const char *flag = o->gbnf ? "--grammar" : "--json-schema";
    if (!tok) { fprintf(stderr, "smollm3 generate: %s needs a model with a tokenizer\n", flag); return 1; }
    FILE *f = fopen(o->schema_file, "rb");
    if (!f) { fprintf(stderr, "smollm3 generate: %s %s: %s\n", flag, o->schema_file, strerror(errno)); return 1; }
    size_t n = 0;
    char *text = smol_cli_read_all(f, &n);
    if (!text) { fclose(f); fprintf(stderr, "smollm3 generate: %s %s: read error or out of memory\n", flag, o->schema_file); return 1; }
    fclose(f);
    struct smol_grammar_opts go = {0};
    enum smol_err e = o->gbnf ? smol_grammar_compile_gbnf(text, n, &go, &c->g, err)
                              : smol_grammar_compile_json_schema(text, n, &go, &c->g, err);
    free(text);
    if (!e) e = smol_grammar_vocab_new(&c->v, tok, err);
    if (!e) e = smol_grammar_index_new(&c->ix, c->g, c->v, 0, err);
    if (!e) e = smol_grammar_matcher_new(&c->m, c->g, c->ix, err);
    if (!e && !(c->mask = malloc(((size_t)smol_tokenizer_n_vocab(tok) + 31) / 32 * sizeof *c->mask)))
        e = smol_errf(err, SMOL_ENOMEM, "out of memory");
    if (e) { fprintf(stderr, "smollm3 generate: %s %s: %s\n", flag, o->schema_file, err); return 1; }
    return 0;
}

/* A row of a verification sampled as plain decoding samples: the
 * constraint's mask, the draw, the constraint advanced (smol_spec_sample_fn). */
struct gen_row {
    struct smol_sampler *smp;
    struct smol_sampler_scratch *sc;
    struct constraint *con;
    long budget;                    /* tokens -n still allows at row 0 of the step */
    const int32_t *force;           /* --force-output: the tokens to take from row 0 of the step on */
};

static enum smol_err gen_sample(void *ctx, int i, float *row, int32_t *tok, char *err)
{
    struct gen_row *g = ctx;
    struct constraint *c = g->con;
    if (g->force) { /* teacher forcing: the row is computed, the answer's token taken */
        *tok = g->force[i];
        return SMOL_OK;
    }
    if (c->m) {
        smol_grammar_matcher_fill_mask(c->m, c->mask);
        smol_grammar_mask_logits(c->mask, c->n_mask, row, c->n_logits);
    }
    enum smol_err rc = smol_sampler_sample(g->smp, g->sc, row, tok, NULL, err);
    /* within -n: a token after which the grammar could not end in time is
     * drawn again among those that begin its shortest completion */
    if (!rc && c->m && !smol_grammar_matcher_is_done(c->m) &&
        !smol_grammar_matcher_fits(c->m, *tok, (size_t)(g->budget - i))) {
        smol_grammar_matcher_mask_shortest(c->m, c->mask, (size_t)(g->budget - i));
        smol_grammar_mask_logits(c->mask, c->n_mask, row, c->n_logits);
        rc = smol_sampler_sample(g->smp, g->sc, row, tok, NULL, err);
    }
    if (!rc && c->m && smol_grammar_matcher_accept_token(c->m, *tok))
        rc = smol_errf(err, SMOL_EINTERNAL, "internal error: token %d outside the grammar", *tok);
    return rc;
}

static void constraint_close(struct constraint *c)
{
    smol_grammar_matcher_free(&c->m);
    smol_grammar_index_free(&c->ix);
    smol_grammar_vocab_free(&c->v);
    smol_grammar_free(&c->g);
    free(c->mask);
}

int smol_cli_generate(int argc, char **argv)
{
    struct opts o;
    int rc = parse("generate", argc, argv, &o);
    if (rc) return rc;
    if (!o.ids == !o.prompt || o.n < 0) {
        fprintf(stderr, "smollm3 generate: exactly one of --ids / --prompt, and -n N, are required\n");
        return 2;
    }
    if (!o.have_temp) o.sp.temperature = 0.6f;
    struct smol_model *m = NULL;
    struct smol_tokenizer *tok = NULL;
    struct smol_sampler *smp = NULL;
    struct smol_sampler_scratch *sc = NULL;
    struct smol_lookup *lk = NULL;
    struct smol_ids prompt = {0}, forced = {0};
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    float *logits = NULL;
    int32_t *out_ids = NULL;
    char err[SMOL_ERRLEN];
    struct constraint con = {0};
    rc = 1;

    /* the tokenizer is read from the GGUF before the weights are bound */
    struct smol_gguf *g = NULL;
    if (smol_gguf_open(&g, o.model, err)) { fprintf(stderr, "smollm3 generate: %s\n", err); return 1; }
    int have_vocab = smol_gguf_find_kv(g, "tokenizer.ggml.tokens") != NULL;
    if (have_vocab && smol_tokenizer_new(&tok, g, err)) {
        fprintf(stderr, "smollm3 generate: %s\n", err);
        smol_gguf_close(&g);
        return 1;
    }
    if (o.prompt) {
        if (!tok) { fprintf(stderr, "smollm3 generate: the model has no tokenizer; use --ids\n"); goto out; }
        /* like llama.cpp's CLI, special-token text in --prompt is parsed */
        if (smol_tokenizer_encode(tok, o.prompt, strlen(o.prompt), 1, &prompt, err)) {
            fprintf(stderr, "smollm3 generate: %s\n", err);
            goto out;
        }
        if (!prompt.n) { fprintf(stderr, "smollm3 generate: the prompt is empty\n"); goto out; }
    } else {
        int *ids, n;
        if (smol_cli_parse_ids("generate", o.ids, &ids, &n)) { rc = 2; goto out; }
        for (int i = 0; i < n; i++) smol_ids_push(&prompt, ids[i]);
        free(ids);
    }
    if (constraint_open(&con, &o, tok)) goto out;
    if (o.force_file) {
        if (!tok || o.schema_file) {
            fprintf(stderr, "smollm3 generate: --force-output needs a model with a tokenizer, and no constraint\n");
            goto out;
        }
        FILE *f = fopen(o.force_file, "rb");
        if (!f) { fprintf(stderr, "smollm3 generate: --force-output %s: %s\n", o.force_file, strerror(errno)); goto out; }
        size_t len = 0;
        char *text = smol_cli_read_all(f, &len);
        fclose(f);
        if (!text) { fprintf(stderr, "smollm3 generate: --force-output %s: read error or out of memory\n", o.force_file); goto out; }
        enum smol_err e = smol_tokenizer_encode(tok, text, len, 1, &forced, err);
        free(text);
        if (e) { fprintf(stderr, "smollm3 generate: --force-output %s: %s\n", o.force_file, err); goto out; }
        if ((long)forced.n < o.n) o.n = (long)forced.n;
    }
    con.n_mask = tok ? smol_tokenizer_n_vocab(tok) : 0;
    if (!(m = open_model("generate", &o, ctx_for((long)prompt.n + o.n < 80 ? 80 : (long)prompt.n + o.n)))) goto out;
    if ((long)prompt.n + o.n > m->cfg.n_ctx) {
        fprintf(stderr, "smollm3 generate: prompt (%zu tokens) + %ld new tokens exceed the context of %d\n", prompt.n,
                o.n, m->cfg.n_ctx);
        goto out;
    }
    const int V = m->cfg.vocab, R = SMOL_SPEC_MAX_DRAFT + 1;
    con.n_logits = V;
    /* what a verify step of k + 1 positions costs on this model and machine
     * (a context too small for the measurement keeps the default costs) */
    float cost[SMOL_SPEC_MAX_DRAFT + 1];
    int have_cost = o.spec_cost[0] > 0;
    if (have_cost) memcpy(cost, o.spec_cost, sizeof cost);
    else have_cost = o.spec_k > 0 && o.n > 1 && smol_spec_calibrate(m, o.spec_k, 3, cost, err) == SMOL_OK;
    logits = malloc((size_t)R * V * sizeof *logits);
    out_ids = malloc(((size_t)o.n + R) * sizeof *out_ids);
    if (!logits || !out_ids) { fprintf(stderr, "smollm3 generate: out of memory\n"); goto out; }
    if (smol_sampler_new(&smp, &o.sp, V, err) || smol_sampler_scratch_new(&sc, V, err) ||
        smol_sampler_accept(smp, prompt.v, prompt.n, false, err) || smol_lookup_new(&lk, V, err) ||
        smol_lookup_append(lk, prompt.v, (int)prompt.n, err) ||
        (prompt.n > 1 && o.n > 0 && smol_model_eval(m, &seq, prompt.v, (int)prompt.n - 1, 0, NULL, err))) {
        fprintf(stderr, "smollm3 generate: %s\n", err);
        goto out;
    }
    struct gen_row grow = {smp, sc, &con, 0, NULL};
    struct smol_spec_ctl ctl;
    smol_spec_ctl_init(&ctl, o.spec_k, have_cost ? cost : NULL);
    int n_gen = 0, n_steps = 0, drafted = 0, accepted = 0, eog = 0, by_k[SMOL_SPEC_MAX_DRAFT + 1] = {0};
    int32_t last = prompt.v[prompt.n - 1];
    double t0 = smol_mono_s();
    /* each step: the last token and a draft of k, verified in one forward
     * pass of k + 1 positions; the rejected positions' KV is dropped */
    while (n_gen < o.n && !eog) {
        int32_t btok[SMOL_SPEC_MAX_DRAFT + 1], bpos[SMOL_SPEC_MAX_DRAFT + 1], idx[SMOL_SPEC_MAX_DRAFT + 1], got[SMOL_SPEC_MAX_DRAFT + 1];
        struct smol_kv_seq *bseq[SMOL_SPEC_MAX_DRAFT + 1];
        struct smol_spec_grammar sg = {.m = con.m};
        int match = 0, n_draft = smol_lookup_draft_edit(lk, SMOL_SPEC_MAX_DRAFT, btok + 1, &match,
                                                   con.m ? smol_spec_grammar_filter : NULL, &sg);
        if (con.m) smol_spec_grammar_undo(&sg);
        int32_t predicted = n_draft ? btok[1] : -1;
        int k = smol_spec_ctl_k(&ctl, match);
        if (k > n_draft) k = n_draft;
        if (k > o.n - n_gen - 1) k = (int)(o.n - n_gen - 1);
        const int pos = seq.n_tokens;
        btok[0] = last;
        for (int i = 0; i <= k; i++) { bpos[i] = pos + i; bseq[i] = &seq; idx[i] = i; }
        const struct smol_batch b = {.n_tokens = k + 1, .tokens = btok, .pos = bpos, .seq = bseq, .n_out = k + 1, .out_idx = idx};
        int n_got, n_acc;
        grow.budget = o.n - n_gen;
        grow.force = o.force_file ? forced.v + n_gen : NULL;
        if (smol_kv_seq_reserve(&m->kv, &seq, pos, pos + k + 1, err) || smol_model_forward(m, &b, logits, err) ||
            smol_spec_verify(logits, V, btok + 1, k, gen_sample, &grow, got, &n_got, &n_acc, err)) {
            fprintf(stderr, "smollm3 generate: %s\n", err);
            goto out;
        }
        n_steps++;
        by_k[k]++;
        if (k) { drafted += k; accepted += n_acc; smol_spec_ctl_update(&ctl, match, k, n_acc); }
        else if (n_draft) smol_spec_ctl_shadow(&ctl, match, predicted, got[0]);
        smol_kv_seq_truncate(&m->kv, &seq, pos + n_acc + 1);  /* rollback of the rejected drafts */
        for (int i = 0; i < n_got && n_gen < o.n && !eog; i++) {
            int32_t t = got[i];
            out_ids[n_gen++] = t;
            eog = tok && smol_tokenizer_is_eog(tok, t);
            if (!o.json && tok && !eog) {
                size_t len;
                const char *piece = smol_tokenizer_piece(tok, t, &len);
                if (piece) fwrite(piece, 1, len, stdout);
            }
        }
        if (!o.json && tok) fflush(stdout);
        last = got[n_got - 1];
        if (smol_lookup_append(lk, got, n_got, err)) { fprintf(stderr, "smollm3 generate: %s\n", err); goto out; }
    }
    if (o.stats) {
        double dt = smol_mono_s() - t0;
        fprintf(stderr, "generate: %d tokens in %d steps (drafted %d, accepted %d), %.3f s, %.2f tokens/s\n", n_gen,
                n_steps, drafted, accepted, dt, dt > 0 ? n_gen / dt : 0.0);
        fprintf(stderr, "generate: steps by draft length 0..%d:", SMOL_SPEC_MAX_DRAFT);
        for (int k = 0; k <= SMOL_SPEC_MAX_DRAFT; k++) fprintf(stderr, " %d", by_k[k]);
        fprintf(stderr, "\n");
    }
    if (o.json) {
        printf("{\"ids\":[");
        for (int i = 0; i < n_gen; i++) printf(i ? ",%d" : "%d", out_ids[i]);
        printf("]}\n");
    } else if (!tok) {
        for (int i = 0; i < n_gen; i++) printf(i ? " %d" : "%d", out_ids[i]);
        printf("\n");
    } else {
        printf("\n");
    }
    rc = 0;
out:
    free(logits);
    free(out_ids);
    smol_ids_free(&prompt);
    smol_ids_free(&forced);
    smol_sampler_free(&smp);
    smol_sampler_scratch_free(&sc);
    smol_lookup_free(&lk);
    if (m) smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
    constraint_close(&con);
    smol_tokenizer_free(&tok);
    smol_gguf_close(&g);
    return rc;
}

/* per step between two count snapshots: [0] kernels (-1: not counted), [1] graph replays,
 * [2] host->device copies, [3] device->host copies, [4] host waits */
static void step_counts(const struct smol_cuda_counts *a, const struct smol_cuda_counts *b, long steps, double out[5])
{
    out[0] = a->kernels < 0 ? -1 : (double)(b->kernels - a->kernels) / steps;
    out[1] = (double)(b->graph_launches - a->graph_launches) / steps;
    out[2] = (double)(b->copies_h2d - a->copies_h2d) / steps;
    out[3] = (double)(b->copies_d2h - a->copies_d2h) / steps;
    out[4] = (double)(b->syncs - a->syncs) / steps;
}

/* -b: o->b sequences, each after o->d tokens of context, generate o->n
 * tokens together, one batch per step with every row's logits. */
static int bench_batch(struct smol_model *m, const struct opts *o, const int32_t *ids, double *tps, double per_step[5],
                       char *err)
{
    const int B = (int)o->b;
    struct smol_kv_seq seqs[64];
    struct smol_kv_seq *sp[64];
    int32_t tok[64], pos[64], idx[64];
    float *logits = malloc((size_t)B * m->cfg.vocab * sizeof *logits);
    int rc = -1;
    for (int i = 0; i < B; i++) {
        smol_kv_seq_init(&seqs[i]);
        sp[i] = &seqs[i];
        idx[i] = i;
    }
    if (!logits) { smol_errf(err, SMOL_ENOMEM, "bench: out of memory"); goto out; }
    for (int i = 0; i < B && o->d > 0; i++)
        for (long k = 0; k < o->d; k += o->p)
            if (smol_model_eval(m, &seqs[i], ids + k, (int)(o->d - k < o->p ? o->d - k : o->p), 0, NULL, err)) goto out;
    struct smol_cuda_counts c0, c1;
    const int counted = !smol_backend_cuda_counts(m->be, &c0);
    double t0 = smol_mono_s();
    for (long s = 0; s < o->n; s++) {
        for (int i = 0; i < B; i++) {
            pos[i] = seqs[i].n_tokens;
            tok[i] = ids[(s * B + i) % (o->p + 1)];
            if (smol_kv_seq_reserve(&m->kv, &seqs[i], pos[i], pos[i] + 1, err)) goto out;
        }
        const struct smol_batch b = {.n_tokens = B, .tokens = tok, .pos = pos, .seq = sp, .n_out = B, .out_idx = idx};
        if (smol_model_forward(m, &b, logits, err)) goto out;
    }
    *tps = (double)o->n * B / (smol_mono_s() - t0);
    if (counted && !smol_backend_cuda_counts(m->be, &c1)) step_counts(&c0, &c1, o->n, per_step);
    rc = 0;
out:
    for (int i = 0; i < B; i++) smol_kv_seq_deinit(&m->kv, &seqs[i]);
    free(logits);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --verify: steps of k + 1 positions of seq (after its context), o->n of
 * each size, interleaved so that drifts of the machine hit every size alike;
 * ms[k] = median milliseconds of a step of k + 1 positions (a shared
 * machine's stalls hit single steps: the mean follows them, the median
 * does not). */
static int bench_verify(struct smol_model *m, const struct opts *o, struct smol_kv_seq *seq, const int32_t *ids,
                        long n_ids, double *ms, char *err)
{
    const int K = (int)o->verify;
    float *logits = malloc((size_t)(K + 1) * m->cfg.vocab * sizeof *logits);
    double *t = malloc((size_t)(K + 1) * o->n * sizeof *t);  /* [k][round] */
    int32_t pos[SMOL_SPEC_MAX_DRAFT + 1], idx[SMOL_SPEC_MAX_DRAFT + 1];
    struct smol_kv_seq *sp[SMOL_SPEC_MAX_DRAFT + 1];
    if (!logits || !t) {
        free(logits);
        free(t);
        smol_errf(err, SMOL_ENOMEM, "bench: out of memory");
        return -1;
    }
    const int base = seq->n_tokens;
    for (long s = 0; s < o->n; s++)
        for (int k = 0; k <= K; k++) {
            for (int i = 0; i <= k; i++) { pos[i] = base + i; sp[i] = seq; idx[i] = i; }
            const struct smol_batch b = {.n_tokens = k + 1, .tokens = ids + (s * 7 + k) % (n_ids - K), .pos = pos,
                                         .seq = sp, .n_out = k + 1, .out_idx = idx};
            double t0 = smol_mono_s();
            if (smol_kv_seq_reserve(&m->kv, seq, base, base + k + 1, err) || smol_model_forward(m, &b, logits, err)) {
                free(logits);
                free(t);
                return -1;
            }
            t[k * o->n + s] = smol_mono_s() - t0;
            smol_kv_seq_truncate(&m->kv, seq, base);
        }
    for (int k = 0; k <= K; k++) {
        double *tk = t + k * o->n;
        qsort(tk, o->n, sizeof *tk, cmp_double);
        ms[k] = (o->n % 2 ? tk[o->n / 2] : 0.5 * (tk[o->n / 2 - 1] + tk[o->n / 2])) * 1e3;
    }
    free(logits);
    free(t);
    return 0;
}

int smol_cli_bench(int argc, char **argv)
{
    struct opts o;
    int rc = parse("bench", argc, argv, &o);
    if (rc) return rc;
    if (o.p < 0) o.p = 512;
    if (o.n < 0) o.n = 128;
    if (o.n < 1) { fprintf(stderr, "smollm3 bench: -n must be >= 1\n"); return 2; }
    if (o.b < 1) o.b = 1;
    /* the KV pool holds one full context: with -b, room for the B sequences too */
    const long per_seq = (o.p > o.d ? o.p : o.d) + o.n + 1 + o.verify;
    struct smol_model *m = open_model("bench", &o, ctx_for(o.b > 1 ? (o.b + 1) * (per_seq + SMOL_KV_PAGE) : per_seq));
    if (!m) return 1;
    rc = 1;
    char err[SMOL_ERRLEN];
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    const long n_ids = (o.p > o.d ? o.p : o.d) + 1 + SMOL_SPEC_MAX_DRAFT;
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    float *logits = malloc((size_t)m->cfg.vocab * sizeof *logits);
    if (!ids || !logits) goto out;
    if (o.p + o.n > m->cfg.n_ctx || o.d + o.n > m->cfg.n_ctx) {
        fprintf(stderr, "smollm3 bench: -p + -n or -d + -n (%ld) exceed the model context (%d)\n",
                (o.p > o.d ? o.p : o.d) + o.n, m->cfg.n_ctx);
        goto out;
    }
    /* deterministic pseudo-random ids: benchmark numbers must not depend on text */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < n_ids; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)m->cfg.vocab);
    }
    /* warm-up: page in the weights, spin up the threads */
    if (smol_model_eval(m, &seq, ids, 1, 0, logits, err)) goto fail;
    smol_kv_seq_truncate(&m->kv, &seq, 0);

    double t0 = smol_mono_s();
    if (smol_model_eval(m, &seq, ids, (int)o.p, 0, logits, err)) goto fail;
    double t_pp = smol_mono_s() - t0;
    smol_kv_seq_truncate(&m->kv, &seq, 0);
    /* generation after -d tokens of context (untimed, in prompt-sized
     * steps), by default at an empty one as llama-bench's tg */
    for (long i = 0; i < o.d; i += o.p)
        if (smol_model_eval(m, &seq, ids + i, (int)(o.d - i < o.p ? o.d - i : o.p), 0, logits, err)) goto fail;
    struct smol_cuda_counts c0, c1;
    double per_tok[5] = {-1, -1, -1, -1, -1}, per_step[5] = {-1, -1, -1, -1, -1};
    const int counted = !smol_backend_cuda_counts(m->be, &c0);
    t0 = smol_mono_s();
    for (long i = 0; i < o.n; i++) {
        int32_t t = ids[i % n_ids];
        if (smol_model_eval(m, &seq, &t, 1, 0, logits, err)) goto fail;
    }
    double t_tg = smol_mono_s() - t0;
    if (counted && !smol_backend_cuda_counts(m->be, &c1)) step_counts(&c0, &c1, o.n, per_tok);
    double pp = o.p / t_pp, tg = o.n / t_tg, tgb = 0, vms[SMOL_SPEC_MAX_DRAFT + 1];
    if (o.b > 1 && bench_batch(m, &o, ids, &tgb, per_step, err)) goto fail;
    if (o.verify && bench_verify(m, &o, &seq, ids, n_ids, vms, err)) goto fail;
    printf("model: %s (%s, %d layers, dim %d, vocab %d)\n", o.model, m->cfg.arch_name, m->cfg.n_layers, m->cfg.dim,
           m->cfg.vocab);
    const int on_cuda = !strncmp(m->be->name, "cuda", 4);
    char knobs[128] = "";
    if (on_cuda) smol_cuda_opts_describe(&m->cuda, knobs, sizeof knobs);
    printf("backend: %s, threads: %d%s%s\n", m->be->name, m->be->n_threads, on_cuda ? ", " : "", knobs);
    printf("pp%ld: %.2f tokens/s (%.3f s)\n", o.p, pp, t_pp);
    if (o.d) printf("tg%ld @ d%ld: %.2f tokens/s (%.3f s)\n", o.n, o.d, tg, t_tg);
    else printf("tg%ld: %.2f tokens/s (%.3f s)\n", o.n, tg, t_tg);
    if (o.b > 1) printf("tg%ld x b%ld: %.2f tokens/s in all (%.2f per sequence)\n", o.n, o.b, tgb, tgb / o.b);
    for (int k = 1; k <= o.verify; k++)
        printf("verify %d: %.2f ms/step, %.3f x a 1-token step (%.2f ms)\n", k + 1, vms[k], vms[k] / vms[0], vms[0]);
    /* what a decode step launched (CUDA backends; kernels are counted by the emulator only) */
    for (int r = 0; r < 2; r++) {
        const double *pc = r ? per_step : per_tok;
        if (pc[1] < 0) continue;
        char kern[32];
        if (pc[0] < 0) snprintf(kern, sizeof kern, "n/a (counted on cuda-emu)");
        else snprintf(kern, sizeof kern, "%.1f", pc[0]);
        printf("%s: kernels %s, graph replays %.2f, copies to device %.2f / to host %.2f, host waits %.2f\n",
               r ? "per batched step" : "per decoded token", kern, pc[1], pc[2], pc[3], pc[4]);
    }
    if (o.json) {
        printf("{\"pp_tps\": %.3f, \"tg_tps\": %.3f", pp, tg);
        if (o.b > 1) printf(", \"tg_batch_tps\": %.3f", tgb);
        /* -b B: per batched step of B rows; otherwise per decoded token (-1: not counted) */
        const double *pc = o.b > 1 ? per_step : per_tok;
        if (pc[1] >= 0)
            printf(", \"kernels_per_token\": %.2f, \"graph_replays_per_step\": %.2f, \"copies_per_step\": [%.2f, %.2f]",
                   pc[0], pc[1], pc[2], pc[3]);
        if (o.verify) {
            printf(", \"verify_cost\": [");
            for (int k = 1; k <= o.verify; k++) printf(k > 1 ? ", %.4f" : "%.4f", vms[k] / vms[0]);
            printf("]");
        }
        printf(", \"backend\": \"%s\", \"cuda\": ", m->be->name);
        if (on_cuda)
            printf("{\"matvec\": \"%s\", \"fuse\": %s, \"graphs\": %s, \"gemm\": \"%s\", \"attn\": \"%s\"}",
                   m->cuda.matvec == SMOL_CUDA_MATVEC_Q8K ? "q8k" : m->cuda.matvec == SMOL_CUDA_MATVEC_Q8 ? "q8" : "f32",
                   m->cuda.fuse == SMOL_CUDA_FUSE_LAYER ? "\"layer\"" : m->cuda.fuse ? "true" : "false",
                   m->cuda.graphs == SMOL_CUDA_GRAPHS_BUCKET ? "\"bucket\"" : m->cuda.graphs ? "true" : "false", m->cuda.gemm == SMOL_CUDA_GEMM_LT ? "lt" : m->cuda.gemm == SMOL_CUDA_GEMM_IMMA ? "imma" : m->cuda.gemm == SMOL_CUDA_GEMM_MMA ? "mma" : "tiled",
                   m->cuda.attn == SMOL_CUDA_ATTN_TILED ? "tiled" : "paged");
        else
            printf("null");
        printf("}\n");
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "smollm3 bench: %s\n", err);
out:
    free(ids);
    free(logits);
    smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
    return rc;
}
