/*
 * test_config.c - the daemon's option table, INI file and flag parsing, and
 * deploy/smollm3d.conf kept in step with the table (generate-and-check);
 * the CUDA backend's knobs parsed from text and the environment
 * (daemon/model/backend_cuda_loader.h), which the cuda_* options feed.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/model/backend_cuda_loader.h"
#include "daemon/server/config.h"
#include "daemon/server/log.h"
#include "tests/testutil.h"

static enum smol_err parse(struct smol_daemon_config *c, enum smol_config_action *a, char *err, ...)
{
    char *argv[32] = {"smollm3d"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *s; (s = va_arg(ap, char *)) != NULL && argc < 31;) argv[argc++] = s;
    va_end(ap);
    return smol_config_parse_args(c, argc, argv, a, err);
}

START_TEST(defaults_match_table)
{
    struct smol_daemon_config c;
    smol_config_defaults(&c);
    ck_assert_int_eq(c.kv_budget_mb, -1);      /* auto: per backend (config.h) */
    ck_assert_int_eq(c.max_running, -1);
    ck_assert_int_eq(c.step_tokens, -1);
    ck_assert_int_eq(c.max_request_bytes, 4 << 20);
    ck_assert_int_eq(c.socket_mode, 0660);
    ck_assert_int_eq(c.log_level, SMOL_LOG_INFO);
    ck_assert_int_eq(c.kv_f32, 0);
    ck_assert_str_eq(c.model, "");
    size_t n;
    const struct smol_option *o = smol_config_options(&n);
    ck_assert_uint_ge(n, 20);
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_nonnull(o[i].help);
        ck_assert(strchr(o[i].name, '-') == NULL);
        for (size_t j = 0; j < i; j++) ck_assert_str_ne(o[i].name, o[j].name);
    }
}
END_TEST

START_TEST(flags_both_spellings_and_forms)
{
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    ck_assert_int_eq(parse(&c, &a, err, "--model", "/m.gguf", "--listen=ipc:///tmp/x.sock", "--kv-budget-mb", "77",
                           "--threads=3", "--kv-f32", "--max_running", "5", "--log-level", "debug", NULL), SMOL_OK);
    ck_assert_int_eq(a, SMOL_CONFIG_RUN);
    ck_assert_str_eq(c.model, "/m.gguf");
    ck_assert_str_eq(c.listen, "ipc:///tmp/x.sock");
    ck_assert_int_eq(c.kv_budget_mb, 77);
    ck_assert_int_eq(c.threads, 3);
    ck_assert_int_eq(c.kv_f32, 1);
    ck_assert_int_eq(c.max_running, 5);
    ck_assert_int_eq(c.log_level, SMOL_LOG_DEBUG);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-f32=off", NULL), SMOL_OK);
    ck_assert_int_eq(c.kv_f32, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-f32", "--no-kv-f32", NULL), SMOL_OK);
    ck_assert_int_eq(c.kv_f32, 0);
    /* auto sizes: "auto" or a number in range, written back as given */
    /* the per-key session cap (issue 38): default 256, on the command line in both spellings, 0 = none */
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", NULL), SMOL_OK);
    ck_assert_int_eq(c.max_sessions_per_key, 256);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--max-sessions-per-key", "3", NULL), SMOL_OK);
    ck_assert_int_eq(c.max_sessions_per_key, 3);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--max_sessions_per_key=0", NULL), SMOL_OK);
    ck_assert_int_eq(c.max_sessions_per_key, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--max-sessions-per-key", "-1", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--max-running", "auto", "--step-tokens=auto", NULL), SMOL_OK);
    ck_assert_int_eq(c.max_running, -1);
    ck_assert_int_eq(c.step_tokens, -1);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--max-running", "0", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "max_running") && strstr(err, "out of range"), "%s", err);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--step-tokens", "lots", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "step_tokens") && strstr(err, "auto or an integer"), "%s", err);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nkv_budget_mb = 0\nmax_running = 300\n", err), SMOL_OK);
    ck_assert_int_eq(c.kv_budget_mb, 0);
    ck_assert_int_eq(c.max_running, 300);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    c.step_tokens = -1;
    smol_config_write(f, &c);
    fclose(f);
    ck_assert_msg(strstr(text, "\nstep_tokens = auto\n") && strstr(text, "\nmax_running = 300\n") &&
                  strstr(text, "\nkv_budget_mb = 0\n"), "%s", text);
    free(text);
}
END_TEST

START_TEST(flags_bad)
{
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--bogus", "1", NULL), SMOL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "bogus"));
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--threads", "x", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--threads", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--max-running", "0", NULL), SMOL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-f32=maybe", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--socket-mode", "0999", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--log-level", "loud", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "stray", NULL), SMOL_EINVAL);
    ck_assert_int_eq(parse(&c, &a, err, "--threads", "2", NULL), SMOL_EINVAL);     /* no model */
    ck_assert_ptr_nonnull(strstr(err, "model"));
    ck_assert_int_eq(parse(&c, &a, err, "--help", NULL), SMOL_OK);
    ck_assert_int_eq(a, SMOL_CONFIG_HELP);
    ck_assert_int_eq(parse(&c, &a, err, "--print-default-config", NULL), SMOL_OK);
    ck_assert_int_eq(a, SMOL_CONFIG_PRINT_DEFAULT);
}
END_TEST

/* kv_type: f32 | f16 | q8_0, checked when set; kv_f32 stays an alias of f32 */
/* kv_spill_shared: off by default, a boolean, and only with kv_spill_dir */
START_TEST(kv_spill_shared_option)
{
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    smol_config_defaults(&c);
    ck_assert_int_eq(c.kv_spill_shared, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-spill-dir", "/srv/s", "--kv-spill-shared", NULL), SMOL_OK);
    ck_assert_int_eq(c.kv_spill_shared, 1);
    ck_assert_str_eq(c.kv_spill_dir, "/srv/s");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-spill-shared", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "kv_spill_shared") && strstr(err, "kv_spill_dir"), "%s", err);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-spill-dir", "/srv/s", "--kv-spill-shared=maybe", NULL),
                     SMOL_EINVAL);
    smol_config_defaults(&c);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nkv_spill_dir = /srv/s\nkv_spill_shared = true\n", err),
                     SMOL_OK);
    ck_assert_int_eq(c.kv_spill_shared, 1);
    /* kv_spill_ttl: 0 (= session_ttl) by default, seconds, a flag too */
    smol_config_defaults(&c);
    ck_assert_int_eq(c.kv_spill_ttl, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-spill-ttl", "7200", NULL), SMOL_OK);
    ck_assert_int_eq(c.kv_spill_ttl, 7200);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-spill-ttl", "-1", NULL), SMOL_EINVAL);
    /* stored Responses: 64 MiB per tenant and 30 days by default, flags too */
    smol_config_defaults(&c);
    ck_assert_int_eq(c.responses_store_mb, 64);
    ck_assert_int_eq(c.responses_ttl, 30 * 86400);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--responses-store-mb", "1", "--responses-ttl", "2", NULL),
                     SMOL_OK);
    ck_assert(c.responses_store_mb == 1 && c.responses_ttl == 2);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--responses-ttl", "-1", NULL), SMOL_EINVAL);
}
END_TEST

START_TEST(kv_type_option)
{
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    smol_config_defaults(&c);
    ck_assert_str_eq(c.kv_type, "f16");
    ck_assert_str_eq(smol_config_kv_type(&c), "f16");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-type", "q8_0", NULL), SMOL_OK);
    ck_assert_str_eq(smol_config_kv_type(&c), "q8_0");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-type=f32", NULL), SMOL_OK);
    ck_assert_str_eq(smol_config_kv_type(&c), "f32");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-f32", NULL), SMOL_OK);     /* the alias */
    ck_assert_str_eq(smol_config_kv_type(&c), "f32");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-f32", "--kv-type", "f32", NULL), SMOL_OK);
    ck_assert_str_eq(smol_config_kv_type(&c), "f32");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-f32", "--kv-type", "q8_0", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "conflicts"), "%s", err);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-type", "q4_0", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "kv_type") && strstr(err, "f32, f16 or q8_0"), "%s", err);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--kv-type", NULL), SMOL_EINVAL);
    smol_config_defaults(&c);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nkv_type = q8_0\n", err), SMOL_OK);
    ck_assert_str_eq(smol_config_kv_type(&c), "q8_0");
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nkv_type = Q8\n", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, ":2:") && strstr(err, "kv_type"), "%s", err);
    ck_assert_str_eq(c.kv_type, "q8_0"); /* unchanged by the refused value */
}
END_TEST

/* the CUDA knobs: text in, the struct out, one description back */
START_TEST(cuda_opts_set_and_describe)
{
    struct smol_cuda_opts o;
    char err[SMOL_ERRLEN] = "", buf[128];
    smol_cuda_opts_default(&o);
    ck_assert_int_eq(o.matvec, SMOL_CUDA_MATVEC_Q8);    /* the paths device run 1 verified (NOTES.md) */
    ck_assert_int_eq(o.fuse, 1);
    ck_assert_int_eq(o.graphs, 1);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_MMA);       /* device run 3 (NOTES.md) */
    ck_assert_int_eq(o.attn, SMOL_CUDA_ATTN_PREFILL);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=q8 fuse=on graphs=on gemm=mma attn=prefill");
    o.gemm = SMOL_CUDA_GEMM_TILED;                      /* the older paths for what follows */
    o.attn = SMOL_CUDA_ATTN_PAGED;
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=q8 fuse=on graphs=on gemm=tiled attn=paged");
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_matvec", "f32", err), SMOL_OK);
    ck_assert_int_eq(o.matvec, SMOL_CUDA_MATVEC_F32);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_fuse", "off", err), SMOL_OK);
    ck_assert_int_eq(o.fuse, 0);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_graphs", "off", err), SMOL_OK);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=f32 fuse=off graphs=off gemm=tiled attn=paged");
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_matvec", "q8", err), SMOL_OK);
    ck_assert_int_eq(o.matvec, SMOL_CUDA_MATVEC_Q8);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_fuse", "on", err), SMOL_OK);
    ck_assert_int_eq(o.fuse, 1);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=q8 fuse=on graphs=off gemm=tiled attn=paged");
    const char *on[] = {"on", "1", "true"}, *off[] = {"off", "0", "false"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_graphs", on[i], err), SMOL_OK);
        ck_assert_int_eq(o.graphs, 1);
        ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_graphs", off[i], err), SMOL_OK);
        ck_assert_int_eq(o.graphs, 0);
    }
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_matvec", "f32", err), SMOL_OK);
    ck_assert_int_eq(o.matvec, SMOL_CUDA_MATVEC_F32);
    /* refused values leave the knob as it was, and the message names the option */
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_matvec", "q4", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_matvec") && strstr(err, "f32, q8 or q8k"), "%s", err);
    ck_assert_int_eq(o.matvec, SMOL_CUDA_MATVEC_F32);
    /* the values not yet run on a device: q8k, fuse layer, graphs bucket, persistent */
    {
        struct smol_cuda_opts n = o;
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_matvec", "q8k", err), SMOL_OK);
        ck_assert_int_eq(n.matvec, SMOL_CUDA_MATVEC_Q8K);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_fuse", "layer", err), SMOL_OK);
        ck_assert_int_eq(n.fuse, SMOL_CUDA_FUSE_LAYER);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_graphs", "bucket", err), SMOL_OK);
        ck_assert_int_eq(n.graphs, SMOL_CUDA_GRAPHS_BUCKET);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_persistent", "on", err), SMOL_OK);
        ck_assert_int_eq(n.persistent, 1);
        smol_cuda_opts_describe(&n, buf, sizeof buf);
        ck_assert_msg(strstr(buf, "matvec=q8k fuse=layer graphs=bucket ") && strstr(buf, " persistent=on"), "%s", buf);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_persistent", "layer", err), SMOL_EINVAL);
        ck_assert_msg(strstr(err, "cuda_persistent") && strstr(err, "layer"), "%s", err);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_graphs", "buckets", err), SMOL_EINVAL);
        ck_assert_msg(strstr(err, "or bucket"), "%s", err);
        setenv("SMOL_CUDA_PERSISTENT", "off", 1);
        ck_assert_int_eq(smol_cuda_opts_from_env(&n, err), SMOL_OK);
        ck_assert_int_eq(n.persistent, 0);
        unsetenv("SMOL_CUDA_PERSISTENT");
        /* cuda_gemm_fuse: off by default, a switch, shown when on, from the environment */
        ck_assert_int_eq(n.gemm_fuse, 0);
        smol_cuda_opts_describe(&n, buf, sizeof buf);
        ck_assert_msg(!strstr(buf, "gemm_fuse"), "%s", buf);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_gemm_fuse", "on", err), SMOL_OK);
        ck_assert_int_eq(n.gemm_fuse, 1);
        smol_cuda_opts_describe(&n, buf, sizeof buf);
        ck_assert_msg(strstr(buf, " gemm_fuse=on"), "%s", buf);
        ck_assert_int_eq(smol_cuda_opts_set(&n, "cuda_gemm_fuse", "mma", err), SMOL_EINVAL);
        ck_assert_msg(strstr(err, "cuda_gemm_fuse") && strstr(err, "mma"), "%s", err);
        setenv("SMOL_CUDA_GEMM_FUSE", "off", 1);
        ck_assert_int_eq(smol_cuda_opts_from_env(&n, err), SMOL_OK);
        ck_assert_int_eq(n.gemm_fuse, 0);
        unsetenv("SMOL_CUDA_GEMM_FUSE");
    }
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_fuse", "maybe", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_fuse") && strstr(err, "maybe"), "%s", err);
    ck_assert_int_eq(o.fuse, 1);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_bogus", "on", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_bogus"), "%s", err);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_attn", "tiled", err), SMOL_OK);
    ck_assert_int_eq(o.attn, SMOL_CUDA_ATTN_TILED);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_attn", "flash", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_attn") && strstr(err, "paged, tiled or prefill") && strstr(err, "flash"), "%s", err);
    ck_assert_int_eq(o.attn, SMOL_CUDA_ATTN_TILED);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_msg(strstr(buf, " attn=tiled"), "%s", buf);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_attn", "prefill", err), SMOL_OK);
    ck_assert_int_eq(o.attn, SMOL_CUDA_ATTN_PREFILL);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_msg(strstr(buf, " attn=prefill"), "%s", buf);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_attn", "paged", err), SMOL_OK);
    ck_assert_int_eq(o.attn, SMOL_CUDA_ATTN_PAGED);
    /* cuda_gemm: tiled, mma, imma or lt */
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_TILED);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "mma", err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_MMA);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=f32 fuse=on graphs=off gemm=mma attn=paged");
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "wgmma", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_gemm") && strstr(err, "tiled, mma, imma or lt") && strstr(err, "wgmma"), "%s", err);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_MMA);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "imma", err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_IMMA);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=f32 fuse=on graphs=off gemm=imma attn=paged");
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "lt", err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_LT);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=f32 fuse=on graphs=off gemm=lt attn=paged");
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "imma", err), SMOL_OK);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "IMMA", err), SMOL_EINVAL);  /* names are exact */
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_IMMA);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", "tiled", err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_TILED);
    smol_cuda_opts_describe(&o, buf, 8);    /* truncated, terminated */
    ck_assert_uint_eq(strlen(buf), 7);
}
END_TEST

/* SMOL_CUDA_MATVEC / _FUSE / _GRAPHS override the knobs; a bad value is an error naming the
 * variable, also from smol_backend_cuda_new before any plugin is looked for */
START_TEST(cuda_opts_env)
{
    struct smol_cuda_opts o;
    char err[SMOL_ERRLEN] = "", buf[64];
    unsetenv("SMOL_CUDA_MATVEC");
    unsetenv("SMOL_CUDA_FUSE");
    unsetenv("SMOL_CUDA_GRAPHS");
    unsetenv("SMOL_CUDA_ATTN");
    unsetenv("SMOL_CUDA_GEMM");
    smol_cuda_opts_default(&o);
    o.matvec = SMOL_CUDA_MATVEC_F32;
    o.fuse = 1;
    o.graphs = 0;
    o.gemm = SMOL_CUDA_GEMM_TILED;
    o.attn = SMOL_CUDA_ATTN_PAGED;
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);    /* nothing set: unchanged */
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=f32 fuse=on graphs=off gemm=tiled attn=paged");
    setenv("SMOL_CUDA_MATVEC", "q8", 1);
    setenv("SMOL_CUDA_FUSE", "0", 1);
    setenv("SMOL_CUDA_GRAPHS", "true", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    smol_cuda_opts_describe(&o, buf, sizeof buf);
    ck_assert_str_eq(buf, "matvec=q8 fuse=off graphs=on gemm=tiled attn=paged");
    setenv("SMOL_CUDA_ATTN", "tiled", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    ck_assert_int_eq(o.attn, SMOL_CUDA_ATTN_TILED);
    setenv("SMOL_CUDA_ATTN", "fast", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "SMOL_CUDA_ATTN") && strstr(err, "paged, tiled or prefill"), "%s", err);
    unsetenv("SMOL_CUDA_ATTN");
    o.attn = SMOL_CUDA_ATTN_PAGED;
    setenv("SMOL_CUDA_GEMM", "mma", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_MMA);
    setenv("SMOL_CUDA_GEMM", "fast", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "SMOL_CUDA_GEMM") && strstr(err, "tiled, mma, imma or lt"), "%s", err);
    setenv("SMOL_CUDA_GEMM", "lt", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_LT);
    setenv("SMOL_CUDA_GEMM", "imma", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_IMMA);
    setenv("SMOL_CUDA_GEMM", "tiled", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    ck_assert_int_eq(o.gemm, SMOL_CUDA_GEMM_TILED);
    unsetenv("SMOL_CUDA_GEMM");
    setenv("SMOL_CUDA_GRAPHS", "", 1);                              /* empty = unset */
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_OK);
    ck_assert_int_eq(o.graphs, 1);
    setenv("SMOL_CUDA_FUSE", "yes please", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "SMOL_CUDA_FUSE") && strstr(err, "yes please"), "%s", err);
    unsetenv("SMOL_CUDA_FUSE");
    setenv("SMOL_CUDA_MATVEC", "int4", 1);
    ck_assert_int_eq(smol_cuda_opts_from_env(&o, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "SMOL_CUDA_MATVEC") && strstr(err, "f32, q8 or q8k"), "%s", err);
    struct smol_backend *be = NULL;
    ck_assert_int_eq(smol_backend_cuda_new(&be, 0, NULL, err), SMOL_EINVAL);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(err, "SMOL_CUDA_MATVEC"), "%s", err);
    unsetenv("SMOL_CUDA_MATVEC");
    unsetenv("SMOL_CUDA_GRAPHS");
    /* good knobs, no plugin: unsupported, with a message naming cuda */
    setenv("SMOL_CUDA_PLUGIN", "/nonexistent/libsmollm3_cuda.so", 1);
    ck_assert_int_eq(smol_backend_cuda_new(&be, 0, &o, err), SMOL_EUNSUPPORTED);
    ck_assert_msg(strstr(err, "cuda"), "%s", err);
    unsetenv("SMOL_CUDA_PLUGIN");
    ck_assert(smol_backend_cuda_mark(NULL) == -1);
    ck_assert_int_eq(smol_backend_cpu_new(&be, 1, err), SMOL_OK);
    ck_assert(smol_backend_cuda_mark(be) == -1);                   /* not a CUDA backend */
    smol_backend_free(&be);
}
END_TEST

/* cuda_matvec / cuda_fuse / cuda_graphs: the table's defaults are the loader's, values checked */
START_TEST(cuda_options)
{
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    struct smol_cuda_opts d, o;
    smol_cuda_opts_default(&d);
    smol_config_defaults(&c);
    smol_cuda_opts_default(&o);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_matvec", c.cuda_matvec, err), SMOL_OK);
    o.fuse = c.cuda_fuse;
    o.graphs = c.cuda_graphs;
    o.gemm_fuse = c.cuda_gemm_fuse;
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_attn", c.cuda_attn, err), SMOL_OK);
    ck_assert_int_eq(smol_cuda_opts_set(&o, "cuda_gemm", c.cuda_gemm, err), SMOL_OK);
    ck_assert_msg(!memcmp(&o, &d, sizeof o), "the cuda_* defaults of config.c differ from smol_cuda_opts_default");
    ck_assert_str_eq(c.cuda_matvec, "q8");
    ck_assert_str_eq(c.cuda_gemm, "mma");
    ck_assert_int_eq(c.cuda_gemm_fuse, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-gemm-fuse=on", NULL), SMOL_OK);
    ck_assert_int_eq(c.cuda_gemm_fuse, 1);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ncuda_gemm_fuse = false\n", err), SMOL_OK);
    ck_assert_int_eq(c.cuda_gemm_fuse, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-gemm", "tiled", NULL), SMOL_OK);
    ck_assert_str_eq(c.cuda_gemm, "tiled");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-gemm", "mma", NULL), SMOL_OK);
    ck_assert_str_eq(c.cuda_gemm, "mma");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-gemm", "cublas", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_gemm") && strstr(err, "tiled, mma, imma or lt") && strstr(err, "cublas"), "%s", err);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-gemm", "imma", NULL), SMOL_OK);
    ck_assert_str_eq(c.cuda_gemm, "imma");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-gemm", "lt", NULL), SMOL_OK);
    ck_assert_str_eq(c.cuda_gemm, "lt");
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ncuda_gemm = mma\n", err), SMOL_OK);
    ck_assert_str_eq(c.cuda_gemm, "mma");
    smol_config_defaults(&c);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-matvec", "f32", "--cuda-fuse=off", "--cuda-graphs=off",
                           NULL), SMOL_OK);
    ck_assert_str_eq(c.cuda_matvec, "f32");
    ck_assert_int_eq(c.cuda_fuse, 0);
    ck_assert_int_eq(c.cuda_graphs, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-matvec", "bogus", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_matvec") && strstr(err, "f32, q8 or q8k") && strstr(err, "bogus"), "%s", err);
    ck_assert_str_eq(c.cuda_attn, "prefill");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-attn", "tiled", NULL), SMOL_OK);
    ck_assert_str_eq(c.cuda_attn, "tiled");
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-attn", "flash", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_attn") && strstr(err, "paged, tiled or prefill"), "%s", err);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-graphs=sometimes", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_graphs"), "%s", err);
    /* backend_sampling: auto (-1: on for cuda, main_smollm3d.c), true, false; the flag alone, --no- */
    smol_config_defaults(&c);
    ck_assert_int_eq(c.backend_sampling, -1);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--backend-sampling", NULL), SMOL_OK);
    ck_assert_int_eq(c.backend_sampling, 1);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--no-backend-sampling", NULL), SMOL_OK);
    ck_assert_int_eq(c.backend_sampling, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--backend-sampling=auto", NULL), SMOL_OK);
    ck_assert_int_eq(c.backend_sampling, -1);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nbackend_sampling = true\n", err), SMOL_OK);
    ck_assert_int_eq(c.backend_sampling, 1);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nbackend_sampling = sometimes\n", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "backend_sampling") && strstr(err, "auto, true or false"), "%s", err);
    ck_assert_int_eq(c.backend_sampling, 1);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "m", "--cuda-graphs=sometimes", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "cuda_graphs"), "%s", err);
    smol_config_defaults(&c);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ncuda_matvec = q8\ncuda-fuse = on\ncuda_graphs = off\n", err),
                     SMOL_OK);
    ck_assert_str_eq(c.cuda_matvec, "q8");
    ck_assert_int_eq(c.cuda_fuse, 1);
    ck_assert_int_eq(c.cuda_graphs, 0);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ncuda_matvec = Q8_1\n", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, ":2:") && strstr(err, "cuda_matvec"), "%s", err);
    ck_assert_str_eq(c.cuda_matvec, "q8"); /* unchanged by the refused value */
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    smol_config_write(f, &c);
    fclose(f);
    ck_assert_msg(strstr(text, "\ncuda_matvec = q8\n") && strstr(text, "\ncuda_fuse = true\n") &&
                  strstr(text, "\ncuda_graphs = false\n"), "%s", text);
    free(text);
    /* cuda_fuse's third value: a layer in four kernels, written back as it was given */
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ncuda_fuse = layer\n", err), SMOL_OK);
    ck_assert_int_eq(c.cuda_fuse, SMOL_CUDA_FUSE_LAYER);
    f = open_memstream(&text, &n);
    smol_config_write(f, &c);
    fclose(f);
    ck_assert_msg(strstr(text, "\ncuda_fuse = layer\n"), "%s", text);
    free(text);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ncuda_fuse = maybe\n", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "or layer"), "%s", err);
}
END_TEST

START_TEST(ini_string)
{
    struct smol_daemon_config c;
    char err[SMOL_ERRLEN] = "";
    smol_config_defaults(&c);
    ck_assert_int_eq(smol_config_load_string(&c,
        "# comment\n[smollm3d]\nmodel = /a b.gguf\nkv-budget-mb = 12\nkv_f32 = yes\n; x\nsocket_mode = 0600\n", err),
        SMOL_OK);
    ck_assert_str_eq(c.model, "/a b.gguf");
    ck_assert_int_eq(c.kv_budget_mb, 12);
    ck_assert_int_eq(c.kv_f32, 1);
    ck_assert_int_eq(c.socket_mode, 0600);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nthreads = 2\nnope = 1\n", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, ":3:") && strstr(err, "nope"), "%s", err);
    ck_assert_int_eq(smol_config_load_string(&c, "[other]\nthreads = 2\n", err), SMOL_EINVAL);
    ck_assert_int_eq(smol_config_load_string(&c, "threads = 2\n", err), SMOL_EINVAL);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\nthreads = -1\n", err), SMOL_EINVAL);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\njunk line\n", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, ":2:"), "%s", err);
}
END_TEST

START_TEST(file_then_flags_override)
{
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *text = "[smollm3d]\nmodel = /from/file.gguf\nthreads = 4\nmax_queued = 9\n";
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    /* the flag before --config still wins: flags always override the file */
    ck_assert_int_eq(parse(&c, &a, err, "--threads", "7", "--config", path, NULL), SMOL_OK);
    ck_assert_str_eq(c.model, "/from/file.gguf");
    ck_assert_int_eq(c.threads, 7);
    ck_assert_int_eq(c.max_queued, 9);
    unlink(path);
    ck_assert_int_eq(parse(&c, &a, err, "--config", path, NULL), SMOL_EIO);
}
END_TEST

/* --default-thinking-budget / default_thinking_budget: 0 (unlimited) by
 * default, a count of tokens, refused when negative */
START_TEST(default_thinking_budget)
{
    struct smol_daemon_config c;
    enum smol_config_action a;
    char err[SMOL_ERRLEN] = "";
    ck_assert_int_eq(parse(&c, &a, err, "--model", "/m.gguf", NULL), SMOL_OK);
    ck_assert_int_eq(c.default_thinking_budget, 0);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "/m.gguf", "--default-thinking-budget", "256", NULL), SMOL_OK);
    ck_assert_int_eq(c.default_thinking_budget, 256);
    ck_assert_int_eq(parse(&c, &a, err, "--model", "/m.gguf", "--default-thinking-budget", "-1", NULL), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "default-thinking-budget") || strstr(err, "default_thinking_budget"), "%s", err);
    ck_assert_int_eq(smol_config_load_string(&c, "[smollm3d]\ndefault_thinking_budget = 64\n", err), SMOL_OK);
    ck_assert_int_eq(c.default_thinking_budget, 64);
}
END_TEST

START_TEST(default_listen)
{
    char buf[256];
    setenv("RUNTIME_DIRECTORY", "/run/a:/run/b", 1);
    smol_config_default_listen(buf, sizeof buf);
    ck_assert_str_eq(buf, "ipc:///run/a/smollm3d.sock");
    unsetenv("RUNTIME_DIRECTORY");
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    smol_config_default_listen(buf, sizeof buf);
    ck_assert_str_eq(buf, "ipc:///run/user/1000/smollm3d.sock");
    unsetenv("XDG_RUNTIME_DIR");
    smol_config_default_listen(buf, sizeof buf);
    ck_assert_str_eq(buf, "ipc:///run/smollm3d/smollm3d.sock");
}
END_TEST

/* deploy/smollm3d.conf is exactly what the table generates, lists every
 * option once with its default, and loads cleanly (everything commented). */
START_TEST(conf_file_matches_table)
{
    const char *roots[] = {"deploy/smollm3d.conf", "../deploy/smollm3d.conf", "../../deploy/smollm3d.conf",
                           "../../../deploy/smollm3d.conf"};
    const char *path = NULL;
    for (int i = 0; i < 4 && !path; i++)
        if (access(roots[i], R_OK) == 0) path = roots[i];
    ck_assert_msg(path != NULL, "deploy/smollm3d.conf not found");
    size_t n_file;
    char *file = read_file(path, &n_file);
    ck_assert_ptr_nonnull(file);
    char *gen = NULL;
    size_t n_gen = 0;
    FILE *f = open_memstream(&gen, &n_gen);
    smol_config_write_default(f);
    fclose(f);
    ck_assert_msg(n_gen == n_file && !memcmp(gen, file, n_gen),
                  "deploy/smollm3d.conf is stale: regenerate with `smollm3d --print-default-config`");
    size_t n;
    const struct smol_option *o = smol_config_options(&n);
    for (size_t i = 0; i < n; i++) {
        char line[256];
        snprintf(line, sizeof line, "\n#%s =%s%s\n", o[i].name, o[i].def[0] ? " " : "", o[i].def);
        char *hit = strstr(file, line);
        ck_assert_msg(hit != NULL, "option %s missing", o[i].name);
        ck_assert_msg(strstr(hit + 1, line) == NULL, "option %s listed twice", o[i].name);
    }
    struct smol_daemon_config c, d;
    char err[SMOL_ERRLEN] = "";
    smol_config_defaults(&c);
    smol_config_defaults(&d);
    ck_assert_int_eq(smol_config_load_file(&c, path, err), SMOL_OK);
    ck_assert(!memcmp(&c, &d, sizeof c));
    /* uncommenting every option gives the defaults too */
    char *un = malloc(n_file + 1), *w = un;
    for (const char *p = file; *p; p++)
        if (!(*p == '#' && p > file && p[-1] == '\n' && p[1] != ' ' && p[1] != '\n')) *w++ = *p;
    *w = 0;
    smol_config_defaults(&c);
    ck_assert_msg(smol_config_load_string(&c, un, err) == SMOL_OK, "%s", err);
    ck_assert(!memcmp(&c, &d, sizeof c));
    free(un);
    free(gen);
    free(file);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, defaults_match_table);
    tcase_add_test(tc, flags_both_spellings_and_forms);
    tcase_add_test(tc, flags_bad);
    tcase_add_test(tc, kv_type_option);
    tcase_add_test(tc, kv_spill_shared_option);
    tcase_add_test(tc, cuda_opts_set_and_describe);
    tcase_add_test(tc, cuda_opts_env);
    tcase_add_test(tc, cuda_options);
    tcase_add_test(tc, ini_string);
    tcase_add_test(tc, file_then_flags_override);
    tcase_add_test(tc, default_thinking_budget);
    tcase_add_test(tc, default_listen);
    tcase_add_test(tc, conf_file_matches_table);
    suite_add_tcase(s, tc);
    return s;
}
