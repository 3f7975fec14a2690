/*
 * test_config.c - the daemon's option table, INI file and flag parsing, and
 * deploy/smollm3d.conf kept in step with the table (generate-and-check).
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    ck_assert_int_eq(c.kv_budget_mb, 1024);
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
    tcase_add_test(tc, ini_string);
    tcase_add_test(tc, file_then_flags_override);
    tcase_add_test(tc, default_listen);
    tcase_add_test(tc, conf_file_matches_table);
    suite_add_tcase(s, tc);
    return s;
}
