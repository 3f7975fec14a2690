/*
 * cli_chat.c - `smollm3 chat`: an interactive chat in the terminal.
 *
 *   smollm3 chat -m MODEL [--no-think] [--system TEXT] [--temp T] [--top-p P]
 *                [--seed S] [-n MAX_TOKENS] [--ctx N] [--threads N] [--verbose]
 *
 * Reads one user message per line from stdin ("> " prompt only when stdin is
 * a terminal).  Commands: /exit (or EOF) quits, /reset starts a new
 * conversation, /think and /no_think switch the reasoning mode, /help.
 * Output: content plain on stdout; reasoning apart (dim "thinking: " on a
 * terminal, lines prefixed "[think] " otherwise); tool calls as
 * "[tool_call] name(args)".  Each turn reports on stderr
 * "[prefill N new tokens, M reused]".  Ctrl-C during an answer stops it and
 * returns to the prompt; Ctrl-C at the prompt exits.
 *
 * Design.  One KV sequence holds the conversation; `kv_ids` mirrors exactly
 * the tokens evaluated into it.  Each turn builds the target token list,
 * truncates the sequence to its longest common prefix with kv_ids, and
 * evaluates only the rest.
 *
 * The target is NOT simply the tokenization of the re-rendered conversation:
 * the template renders an earlier assistant turn from its parsed content
 * (reasoning dropped, whitespace trimmed, re-tokenized), which differs from
 * what the model actually generated, so a re-render would invalidate the
 * cache from the first answer on.  Instead `conv` keeps the tokens the model
 * really saw and wrote: prompt tokens + the generated tokens (reasoning
 * included) + <|im_end|> + the "\n" the template puts after it.  The next
 * turn renders the whole conversation twice, without the new user message
 * (A, no generation prompt) and with it (B, generation prompt), and appends
 * the tokens of B's suffix after A to conv.  That is valid only when the
 * template is append-only over the history: checked each turn by requiring
 * that B starts with A and that A starts with the prompt text conv was built
 * from (so the system block, date and reasoning mode are unchanged).  When
 * the check fails (first turn, /think toggled so the Metadata block changes)
 * the target is the plain tokenization of B, and the common prefix still
 * saves what it can.  /reset forgets the conversation but not the KV: the
 * system block of the new conversation is reused from the cache.
 *
 * Special tokens in user text.  Prompts are tokenized by smol_chat_tokenize
 * (chat_tokenize.h), the entry point the daemon uses too: the template's own
 * markers become CONTROL tokens, while text typed by the user (and the
 * --system text) is tokenized with CONTROL-token parsing off, so typing
 * "<|im_start|>system" cannot forge a turn.  USER_DEFINED tokens (<think>,
 * <tool_call>) are matched in any text, as Hugging Face does.  Without
 * CONTROL-token text in the messages the ids are exactly HF's
 * apply_chat_template(tokenize=True).  The incremental suffix is taken in
 * ids: tokens(B) must start with tokens(A) (A ends with "<|im_end|>\n" and B
 * continues with a control token, so this holds; it is checked anyway).
 */
#include "daemon/cli/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/text/text.h"
#include "daemon/model/model.h"

#define CMD "chat"
#define PREFILL_CHUNK 64        /* tokens per eval during prefill: Ctrl-C is checked between chunks */

/* ---- Ctrl-C ------------------------------------------------------------- */

static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig)
{
    (void)sig;
    g_sigint = 1;
}

/* ---- state -------------------------------------------------------------- */

struct msg {
    enum smol_chat_role role;
    char *content;              /* owned, NUL-terminated */
};

struct opts {
    const char *model, *system;
    int no_think, verbose;
    long n_predict, threads, n_ctx;
    struct smol_sampler_params sp;
    int have_seed;
};

struct display {
    int tty;                    /* stdout is a terminal */
    int mode;                   /* 0 nothing yet, 1 reasoning, 2 content */
    int bol;                    /* at the beginning of a line */
};

struct chat {
    struct opts o;
    struct smol_model *m;
    struct smol_tokenizer *tok;
    enum smol_chat_tpl tpl;
    char date[32];
    int think;                          /* enable_thinking for the template */
    int32_t im_end;                     /* closes an assistant turn in conv */
    struct smol_ids nl;                 /* tokens of "\n" */
    struct smol_sampler *smp;
    struct smol_sampler_scratch *sc;
    float *logits;                      /* [vocab] */
    struct smol_kv_seq seq;
    struct smol_ids kv_ids;             /* exactly the tokens in seq */
    struct smol_ids conv;               /* conversation so far, closed turns (see top) */
    struct smol_chat_buf conv_prompt;   /* rendered prompt text conv was built from */
    struct msg *msgs;
    size_t n_msgs, cap_msgs;
    struct display d;
    struct smol_chat_buf answer;        /* content of the current reply */
};

static void msg_free(struct msg *m)
{
    free(m->content);
    memset(m, 0, sizeof *m);
}

static int msg_push(struct chat *c, enum smol_chat_role role, const char *text, size_t len)
{
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 8;
        struct msg *v = realloc(c->msgs, cap * sizeof *v);
        if (!v) return -1;
        c->msgs = v;
        c->cap_msgs = cap;
    }
    struct msg *m = &c->msgs[c->n_msgs];
    memset(m, 0, sizeof *m);
    m->role = role;
    if (!(m->content = malloc(len + 1))) return -1;
    memcpy(m->content, text, len);
    m->content[len] = 0;
    c->n_msgs++;
    return 0;
}

static void msgs_truncate(struct chat *c, size_t n)
{
    while (c->n_msgs > n) msg_free(&c->msgs[--c->n_msgs]);
}

/* ---- rendering and tokenizing ------------------------------------------- */

/* Renders msgs[0..n) and tokenizes the prompt safely: text and ids (both reset first). */
static enum smol_err render(struct chat *c, size_t n, int gen_prompt, struct smol_chat_buf *text,
                            struct smol_ids *ids, char *err)
{
    struct smol_chat_msg *cm = calloc(n ? n : 1, sizeof *cm);
    if (!cm) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        cm[i].role = c->msgs[i].role;
        cm[i].content = c->msgs[i].content;
    }
    struct smol_chat_request req = {.msgs = cm, .n_msgs = n, .enable_thinking = c->think,
                                    .add_generation_prompt = gen_prompt, .date = c->date};
    smol_chat_buf_reset(text);
    ids->n = 0;
    enum smol_err e = smol_chat_tokenize(c->tpl, &req, c->tok, ids, text, NULL, err);
    free(cm);
    return e;
}

static int ids_append(struct smol_ids *dst, const int32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (smol_ids_push(dst, v[i])) return -1;
    return 0;
}

/* ---- display ------------------------------------------------------------ */

static void put_text(struct display *d, const char *s, size_t n, const char *line_prefix)
{
    for (size_t i = 0; i < n; i++) {
        if (d->bol && line_prefix) fputs(line_prefix, stdout);
        putchar(s[i]);
        d->bol = s[i] == '\n';
    }
}

/* Leaves reasoning (or whatever was shown) and ends the line. */
static void display_end(struct display *d)
{
    if (d->mode == 1 && d->tty) fputs("\033[0m", stdout);
    if (!d->bol) putchar('\n');
    d->bol = 1;
    d->mode = 0;
}

static void on_event(void *ud, const struct smol_chat_event *ev)
{
    struct chat *c = ud;
    struct display *d = &c->d;
    switch (ev->kind) {
    case SMOL_CHAT_EV_REASONING:
        if (d->mode != 1) {
            display_end(d);
            if (d->tty) fputs("\033[2mthinking: ", stdout);
            d->mode = 1;
        }
        put_text(d, ev->text, ev->len, d->tty ? NULL : "[think] ");
        break;
    case SMOL_CHAT_EV_CONTENT:
        if (d->mode != 2) {
            display_end(d);
            d->mode = 2;
            /* the parser trims segments: keep them apart in the history copy */
            if (c->answer.len) smol_chat_buf_puts(&c->answer, "\n\n");
        }
        put_text(d, ev->text, ev->len, NULL);
        smol_chat_buf_append(&c->answer, ev->text, ev->len);
        break;
    case SMOL_CHAT_EV_TOOL_CALL:
        display_end(d);
        printf("[tool_call] %s(%s)\n", ev->name, ev->arguments);
        /* in the history copy, as the model writes it (a re-render shows it the call) */
        if (c->answer.len) smol_chat_buf_puts(&c->answer, "\n");
        smol_chat_buf_puts(&c->answer, "<tool_call>\n{\"name\": \"");
        smol_chat_buf_puts(&c->answer, ev->name);
        smol_chat_buf_puts(&c->answer, "\", \"arguments\": ");
        smol_chat_buf_puts(&c->answer, ev->arguments);
        smol_chat_buf_puts(&c->answer, "}\n</tool_call>");
        break;
    }
    fflush(stdout);
}

/* ---- one turn ----------------------------------------------------------- */

/* Evaluates target[kv_ids.n ..) into the sequence in chunks, checking Ctrl-C
 * between them; kv_ids follows.  Returns 0, 1 when interrupted, -1 on error
 * (message printed), -2 when out of memory. */
static int prefill(struct chat *c, const struct smol_ids *target)
{
    char err[SMOL_ERRLEN];
    while (c->kv_ids.n < target->n) {
        if (g_sigint) return 1;
        size_t done = c->kv_ids.n, k = target->n - done;
        if (k > PREFILL_CHUNK) k = PREFILL_CHUNK;
        enum smol_err e = smol_model_eval(c->m, &c->seq, target->v + done, (int)k, 0, c->logits, err);
        /* on error the sequence may still have advanced: keep kv_ids in step */
        SMOL_ASSERT((size_t)c->seq.n_tokens >= done && (size_t)c->seq.n_tokens <= done + k);
        if (ids_append(&c->kv_ids, target->v + done, (size_t)c->seq.n_tokens - done)) return -2;
        if (!e) continue;
        fprintf(stderr, "smollm3 " CMD ": %s%s\n", err,
                e == SMOL_ECONTEXT || e == SMOL_EBUSY ? " (type /reset to start a new conversation)" : "");
        return -1;
    }
    return 0;
}

/* Feeds one generated token to the detokenizer and the parser. */
static void show_token(struct chat *c, struct smol_detok *dt, struct smol_chat_parser *p, int32_t t)
{
    size_t len;
    const char *piece = smol_tokenizer_piece(c->tok, t, &len);
    if (!piece) return;
    struct smol_detok_out out;
    if (smol_tokenizer_is_special(c->tok, t)) {
        /* a special piece is matched whole by the parser: release held text first */
        if (!smol_detok_flush(dt, &out) && out.len) smol_chat_parser_feed(p, out.text, out.len, 0);
        smol_chat_parser_feed(p, piece, len, 1);
        return;
    }
    if (!smol_detok_push(dt, piece, len, &out) && out.len) smol_chat_parser_feed(p, out.text, out.len, 0);
}

/* One user message in, one answer out.  Recoverable problems are reported
 * and leave the conversation as it was; returns -1 only when out of memory. */
static int turn(struct chat *c, const char *line, size_t len)
{
    char err[SMOL_ERRLEN];
    enum smol_err e;
    int rc = 0, n_ctx = c->m->cfg.n_ctx;
    size_t n_before = c->n_msgs;
    struct smol_chat_buf a, b;
    smol_chat_buf_init(&a);
    smol_chat_buf_init(&b);
    struct smol_ids target = {0}, gen = {0}, ids_a = {0}, ids_b = {0};
    struct smol_detok dt = {0};
    struct smol_chat_parser parser;
    int parser_live = 0;

    if (!smol_utf8_valid(line, len)) {
        fprintf(stderr, "smollm3 " CMD ": your message is not valid UTF-8; not sent\n");
        goto out;
    }
    if (msg_push(c, SMOL_CHAT_USER, line, len)) goto oom;

    /* target = conv + new suffix when the history renders as before, else a fresh render */
    if ((e = render(c, c->n_msgs, 1, &b, &ids_b, err))) goto fail;
    int incremental = 0;
    if (c->conv.n && n_before >= 1) {
        if ((e = render(c, n_before, 0, &a, &ids_a, err))) goto fail;
        incremental = a.len >= c->conv_prompt.len && !memcmp(a.data, c->conv_prompt.data, c->conv_prompt.len) &&
                      b.len > a.len && !memcmp(b.data, a.data, a.len) && ids_b.n > ids_a.n &&
                      !memcmp(ids_b.v, ids_a.v, ids_a.n * sizeof *ids_a.v);
    }
    if (incremental) {
        if (ids_append(&target, c->conv.v, c->conv.n) || ids_append(&target, ids_b.v + ids_a.n, ids_b.n - ids_a.n))
            goto oom;
    } else if (ids_append(&target, ids_b.v, ids_b.n)) {
        goto oom;
    }
    if (target.n >= (size_t)n_ctx) {
        fprintf(stderr, "smollm3 " CMD ": context full: the conversation needs %zu tokens, the context holds %d; "
                "type /reset to start a new conversation (or raise --ctx)\n", target.n, n_ctx);
        goto drop;
    }

    /* reuse the longest common prefix of the cache; at least one token is evaluated for logits */
    size_t lcp = 0;
    while (lcp < c->kv_ids.n && lcp < target.n && c->kv_ids.v[lcp] == target.v[lcp]) lcp++;
    if (lcp == target.n) lcp--;
    smol_kv_seq_truncate(&c->m->kv, &c->seq, (int)lcp);
    c->kv_ids.n = lcp;
    fprintf(stderr, "[prefill %zu new tokens, %zu reused]\n", target.n - lcp, lcp);
    if (smol_sampler_accept(c->smp, target.v + lcp, target.n - lcp, false, err)) goto fail_quiet;
    double t0 = smol_mono_s(), t1, t2;
    int r = prefill(c, &target);
    if (r == -2) goto oom;
    if (r) {
        if (r > 0) fprintf(stderr, "[interrupted]\n");
        goto drop;
    }
    t1 = smol_mono_s();

    /* generate */
    if ((e = smol_detok_init(&dt, NULL, 0, err))) goto fail;
    enum smol_chat_start start = c->tpl == SMOL_CHAT_TPL_SMOLLM3 ? SMOL_CHAT_START_CONTENT : SMOL_CHAT_START_PLAIN;
    smol_chat_parser_init(&parser, start, on_event, c);
    parser_live = 1;
    smol_chat_buf_reset(&c->answer);
    c->d.mode = 0;
    c->d.bol = 1;
    const char *why = NULL;
    for (long i = 0; i < c->o.n_predict; i++) {
        if (g_sigint) { why = "interrupted"; break; }
        int32_t t;
        if ((e = smol_sampler_sample(c->smp, c->sc, c->logits, &t, NULL, err))) {
            fprintf(stderr, "smollm3 " CMD ": %s\n", err);
            break;
        }
        if (smol_tokenizer_is_eog(c->tok, t)) break;
        if (smol_ids_push(&gen, t)) goto oom;
        show_token(c, &dt, &parser, t);
        if (i + 1 == c->o.n_predict) { why = "max tokens reached"; break; }
        if (c->seq.n_tokens >= n_ctx) { why = "context full: type /reset to start a new conversation"; break; }
        if (smol_ids_push(&c->kv_ids, t)) goto oom;
        if ((e = smol_model_eval(c->m, &c->seq, &t, 1, 0, c->logits, err))) {
            c->kv_ids.n = (size_t)c->seq.n_tokens;
            fprintf(stderr, "smollm3 " CMD ": %s\n", err);
            break;
        }
    }
    t2 = smol_mono_s();
    struct smol_detok_out out;
    if (!smol_detok_flush(&dt, &out) && out.len) smol_chat_parser_feed(&parser, out.text, out.len, 0);
    smol_chat_parser_finish(&parser);
    display_end(&c->d);
    fflush(stdout);
    if (why) fprintf(stderr, "[%s]\n", why);
    if (c->o.verbose) {
        double pp = t1 - t0, tg = t2 - t1;
        fprintf(stderr, "[prefill %.2f s; generated %zu tokens in %.2f s, %.1f tokens/s; context %d/%d]\n", pp,
                gen.n, tg, tg > 0 ? gen.n / tg : 0.0, c->seq.n_tokens, n_ctx);
    }

    /* history: what was fed, what was generated, then <|im_end|>\n as the template closes a turn */
    c->conv.n = 0;
    if (ids_append(&c->conv, target.v, target.n) || ids_append(&c->conv, gen.v, gen.n) ||
        smol_ids_push(&c->conv, c->im_end) || ids_append(&c->conv, c->nl.v, c->nl.n))
        goto oom;
    smol_chat_buf_reset(&c->conv_prompt);
    if (smol_chat_buf_append(&c->conv_prompt, b.data, b.len)) goto oom;
    if (msg_push(c, SMOL_CHAT_ASSISTANT, c->answer.data ? c->answer.data : "", c->answer.len)) goto oom;
    goto out;

fail:
    fprintf(stderr, "smollm3 " CMD ": %s: %s\n", smol_err_name(e), err);
    goto drop;
fail_quiet:
    fprintf(stderr, "smollm3 " CMD ": %s\n", err);
drop:
    msgs_truncate(c, n_before);
    goto out;
oom:
    fprintf(stderr, "smollm3 " CMD ": out of memory\n");
    msgs_truncate(c, n_before);
    rc = -1;
out:
    if (parser_live) smol_chat_parser_deinit(&parser);
    smol_detok_deinit(&dt);
    smol_ids_free(&target);
    smol_ids_free(&gen);
    smol_ids_free(&ids_a);
    smol_ids_free(&ids_b);
    smol_chat_buf_deinit(&a);
    smol_chat_buf_deinit(&b);
    return rc;
}

/* ---- setup and the read loop -------------------------------------------- */

static int usage_error(const char *msg)
{
    fprintf(stderr, "smollm3 " CMD ": %s\nusage: smollm3 " CMD " -m MODEL [--no-think] [--system TEXT] [--temp T] "
            "[--top-p P] [--seed S] [-n MAX_TOKENS] [--ctx N] [--threads N] [--verbose]\n", msg);
    return 2;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->sp = smol_sampler_defaults();    /* temperature 0.6, top_p 0.95 */
    o->n_predict = 1024;
    o->n_ctx = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double dv;
        int takes = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--system") || !strcmp(a, "--temp") ||
                    !strcmp(a, "--top-p") || !strcmp(a, "--seed") || !strcmp(a, "-n") || !strcmp(a, "--threads") ||
                    !strcmp(a, "-t") || !strcmp(a, "--ctx");
        if (takes && !v) {
            fprintf(stderr, "smollm3 " CMD ": %s needs a value\n", a);
            return 2;
        }
        if (takes) i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--no-think")) o->no_think = 1;
        else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) o->verbose = 1;
        else if (!strcmp(a, "--temp")) {
            if (smol_cli_parse_float(CMD, a, v, 0, 100, &dv)) return 2;
            o->sp.temperature = (float)dv;
        } else if (!strcmp(a, "--top-p")) {
            if (smol_cli_parse_float(CMD, a, v, 1e-6, 1, &dv)) return 2;
            o->sp.top_p = (float)dv;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-') {
                fprintf(stderr, "smollm3 " CMD ": --seed expects a non-negative integer\n");
                return 2;
            }
            o->sp.seed = s;
            o->have_seed = 1;
        } else if (!strcmp(a, "-n")) {
            if (smol_cli_parse_int(CMD, a, v, 1, 1 << 20, &o->n_predict)) return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (smol_cli_parse_int(CMD, a, v, 1, 256, &o->threads)) return 2;
        } else if (!strcmp(a, "--ctx")) {
            if (smol_cli_parse_int(CMD, a, v, 16, 1 << 24, &o->n_ctx)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_error("interactive chat; commands: /exit /reset /think /no_think /help");
            return 1;
        } else {
            fprintf(stderr, "smollm3 " CMD ": unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!o->model) return usage_error("-m MODEL is required");
    return 0;
}

/* Starts a new conversation: only the --system message remains.  The KV
 * cache is kept; the next turn reuses whatever prefix still matches. */
static int chat_reset(struct chat *c)
{
    msgs_truncate(c, 0);
    c->conv.n = 0;
    smol_chat_buf_reset(&c->conv_prompt);
    smol_sampler_reset(c->smp);
    if (c->o.system && msg_push(c, SMOL_CHAT_SYSTEM, c->o.system, strlen(c->o.system))) return -1;
    return 0;
}

static int chat_open(struct chat *c)
{
    char err[SMOL_ERRLEN];
    enum smol_err e;
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.n_threads = (int)c->o.threads;
    set.n_ctx = (int)c->o.n_ctx;
    set.quiet = 1;
    if ((e = smol_model_open(&c->m, c->o.model, &set, err))) goto fail;
    if (!smol_gguf_find_kv(c->m->gguf, "tokenizer.ggml.tokens")) {
        fprintf(stderr, "smollm3 " CMD ": the model has no tokenizer\n");
        return -1;
    }
    if ((e = smol_tokenizer_new(&c->tok, c->m->gguf, err))) goto fail;

    struct smol_gguf_str tpl_text = {0};
    if ((e = smol_gguf_get_str(c->m->gguf, "tokenizer.chat_template", &tpl_text, 0, err))) goto fail;
    if ((e = smol_chat_tpl_detect(tpl_text.ptr ? tpl_text.ptr : "", tpl_text.len, 1, &c->tpl, err))) goto fail;
    if (c->tpl == SMOL_CHAT_TPL_CHATML)
        fprintf(stderr, "smollm3 " CMD ": warning: %s; falling back to plain ChatML\n",
                tpl_text.ptr ? "the model's chat template is not recognised" : "the model has no chat template");

    const struct smol_special_ids *sp = smol_tokenizer_special(c->tok);
    c->im_end = sp->im_end >= 0 ? sp->im_end : sp->eos;
    if (c->im_end < 0) {
        fprintf(stderr, "smollm3 " CMD ": the vocabulary has no <|im_end|> token; not a chat model\n");
        return -1;
    }
    if ((e = smol_tokenizer_encode(c->tok, "\n", 1, 0, &c->nl, err))) goto fail;

    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || smol_chat_date_format(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, c->date,
                                                         sizeof c->date)) {
        fprintf(stderr, "smollm3 " CMD ": cannot read today's date\n");
        return -1;
    }

    if (!c->o.have_seed) c->o.sp.seed = (uint64_t)now ^ ((uint64_t)getpid() << 32);
    if ((e = smol_sampler_new(&c->smp, &c->o.sp, c->m->cfg.vocab, err)) ||
        (e = smol_sampler_scratch_new(&c->sc, c->m->cfg.vocab, err)))
        goto fail;
    if (!(c->logits = malloc((size_t)c->m->cfg.vocab * sizeof *c->logits))) {
        fprintf(stderr, "smollm3 " CMD ": out of memory\n");
        return -1;
    }
    smol_kv_seq_init(&c->seq);

    c->think = !c->o.no_think;
    c->d.tty = isatty(STDOUT_FILENO);
    c->d.bol = 1;
    if (chat_reset(c)) {
        fprintf(stderr, "smollm3 " CMD ": out of memory\n");
        return -1;
    }
    return 0;
fail:
    fprintf(stderr, "smollm3 " CMD ": %s\n", err);
    return -1;
}

static void chat_close(struct chat *c)
{
    msgs_truncate(c, 0);
    free(c->msgs);
    free(c->logits);
    smol_ids_free(&c->nl);
    smol_ids_free(&c->kv_ids);
    smol_ids_free(&c->conv);
    smol_chat_buf_deinit(&c->conv_prompt);
    smol_chat_buf_deinit(&c->answer);
    smol_sampler_free(&c->smp);
    smol_sampler_scratch_free(&c->sc);
    if (c->m) smol_kv_seq_deinit(&c->m->kv, &c->seq);
    smol_model_close(&c->m);
    smol_tokenizer_free(&c->tok);
}

int smol_cli_chat(int argc, char **argv)
{
    struct chat c;
    memset(&c, 0, sizeof c);
    int rc = parse_opts(argc, argv, &c.o);
    if (rc) return rc == 1 ? 0 : rc;
    smol_chat_buf_init(&c.conv_prompt);
    smol_chat_buf_init(&c.answer);
    if (chat_open(&c)) {
        chat_close(&c);
        return 1;
    }

    /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);

    int in_tty = isatty(STDIN_FILENO);
    if (in_tty)
        fprintf(stderr, "smollm3 chat: %s template, reasoning %s; /exit /reset /think /no_think /help\n",
                smol_chat_tpl_name(c.tpl), c.tpl != SMOL_CHAT_TPL_SMOLLM3 ? "n/a" : c.think ? "on" : "off");
    char *line = NULL;
    size_t cap = 0;
    rc = 0;
    for (;;) {
        g_sigint = 0;
        if (in_tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (g_sigint || errno == EINTR || in_tty) putchar('\n');
            if (ferror(stdin) && !g_sigint && errno != EINTR) {
                fprintf(stderr, "smollm3 " CMD ": reading stdin: %s\n", strerror(errno));
                rc = 1;
            }
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (!n) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/help")) {
            fprintf(stderr, "/exit quit  /reset new conversation  /think /no_think reasoning mode  "
                    "(Ctrl-C stops an answer; at the prompt it quits)\n");
            continue;
        }
        if (!strcmp(line, "/reset")) {
            if (chat_reset(&c)) { rc = 1; break; }
            fprintf(stderr, "[new conversation]\n");
            continue;
        }
        if (!strcmp(line, "/think") || !strcmp(line, "/no_think")) {
            c.think = line[1] == 't';
            fprintf(stderr, "[reasoning %s%s]\n", c.think ? "on" : "off",
                    c.tpl == SMOL_CHAT_TPL_SMOLLM3 ? "" : "; this model's template has no reasoning mode");
            continue;
        }
        if (turn(&c, line, (size_t)n)) { rc = 1; break; }
    }
    fflush(stdout);
    sigaction(SIGINT, &old, NULL);
    free(line);
    chat_close(&c);
    return rc;
}
