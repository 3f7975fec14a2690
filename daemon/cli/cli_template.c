/*
 * cli_template.c - `smollm3 template`: render a chat request with the
 * model's own chat template, exactly as the daemon would.
 *
 *   smollm3 template -m MODEL --request FILE.json [--date "DD Month YYYY"]
 *
 * Prints the rendered prompt and nothing else (no trailing newline).  The
 * template is recognised from the GGUF's tokenizer.chat_template; without
 * --date, today's local date is used (the renderer itself never reads the
 * clock: this is the one place that does).
 */
#include "daemon/cli/cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/text/text.h"
#include "daemon/model/model.h"

#define CMD "template"

static int usage_error(const char *msg)
{
    fprintf(stderr, "smollm3 " CMD ": %s\nusage: smollm3 " CMD " -m MODEL --request FILE.json [--date \"DD Month YYYY\"]\n",
            msg);
    return 2;
}

int smol_cli_template(int argc, char **argv)
{
    const char *model = NULL, *request = NULL, *date = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--request") || !strcmp(a, "--date")) &&
            i + 1 >= argc) {
            fprintf(stderr, "smollm3 " CMD ": %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
        else if (!strcmp(a, "--request")) request = argv[++i];
        else if (!strcmp(a, "--date")) date = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: smollm3 " CMD " -m MODEL --request FILE.json [--date \"DD Month YYYY\"]\n");
            return 0;
        } else {
            fprintf(stderr, "smollm3 " CMD ": unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!model) return usage_error("-m MODEL is required");
    if (!request) return usage_error("--request FILE.json is required");

    char today[32];
    if (!date) {
        time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) ||
            smol_chat_date_format(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, today, sizeof today)) {
            fprintf(stderr, "smollm3 " CMD ": cannot read today's date\n");
            return 1;
        }
        date = today;
    } else if (smol_chat_date_check(date)) {
        fprintf(stderr, "smollm3 " CMD ": --date must read \"DD Month YYYY\" (e.g. \"09 July 2025\"), got '%s'\n",
                date);
        return 2;
    }

    int rc = 1;
    char err[SMOL_ERRLEN] = "";
    struct smol_gguf *g = NULL;
    json_t *body = NULL;
    struct smol_chat_request req = {0};
    struct smol_chat_buf out;
    smol_chat_buf_init(&out);
    enum smol_err e;

    json_error_t je;
    body = json_load_file(request, 0, &je);
    if (!body) {
        fprintf(stderr, "smollm3 " CMD ": %s: %s (line %d, column %d)\n", request, je.text, je.line, je.column);
        goto out;
    }
    if ((e = smol_gguf_open(&g, model, err))) goto fail;
    struct smol_gguf_str tpl_text = {0};
    if ((e = smol_gguf_get_str(g, "tokenizer.chat_template", &tpl_text, 1, err))) goto fail;
    enum smol_chat_tpl tpl;
    if ((e = smol_chat_tpl_detect(tpl_text.ptr, tpl_text.len, 0, &tpl, err))) goto fail;
    if ((e = smol_chat_request_from_json(&req, body, err))) goto fail;
    req.date = date;
    if ((e = smol_chat_render(tpl, &req, &out, NULL, err))) goto fail;
    if (out.len && fwrite(out.data, 1, out.len, stdout) != out.len) {
        fprintf(stderr, "smollm3 " CMD ": write error\n");
        goto out;
    }
    if (fflush(stdout)) {
        fprintf(stderr, "smollm3 " CMD ": write error\n");
        goto out;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "smollm3 " CMD ": %s: %s\n", smol_err_name(e), err);
out:
    smol_chat_buf_deinit(&out);
    smol_chat_request_deinit(&req);
    json_decref(body);
    smol_gguf_close(&g);
    return rc;
}
