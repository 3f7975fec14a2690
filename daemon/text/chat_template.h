/*
 * chat_template.h - SmolLM3's chat template (and SmolLM2's ChatML) rendered
 * natively in C, byte-identical to the Jinja templates the models carry.
 *
 * There is no Jinja interpreter here.  Each supported template was read line
 * by line and replicated branch by branch; the tests compare against renders
 * made by Python jinja2 with Hugging Face's environment.  A model's template
 * is recognised from its tokenizer.chat_template text by an exact hash (after
 * trailing whitespace, which the templates trim anyway); anything else is
 * SMOL_ETEMPLATE, or plain ChatML when the caller explicitly allows it.
 *
 * What the SmolLM3 template does (and so what this renders):
 *  - system block: "## Metadata" (date passed in by the caller, the renderer
 *    never reads the clock), "## Custom Instructions" (the system text with
 *    "/think" and "/no_think" removed and rstripped, or a default persona),
 *    then "### Tools" with each tool as Python's repr of the JSON object.
 *    The block is closed with <|im_end|> only when tools are given (template
 *    quirk, reproduced).  "/system_override" replaces the whole block.
 *  - /no_think or /think in the first (system) message overrides
 *    enable_thinking; /no_think wins when both appear.
 *  - only messages[0] may act as system; later system messages render
 *    nothing.  Tool results render as user turns.  Assistant turns render
 *    content.lstrip("\n"), prefixed "<think>\n\n</think>\n" in no-think mode;
 *    reasoning_content, name and tool_call_id are accepted and NOT rendered
 *    (the template ignores them).
 *  - DEPARTURE from the official template, which drops an assistant
 *    message's tool_calls (so on an agent's second turn the model would not
 *    see what it called, and the KV of the first turn could not be reused):
 *    the calls are rendered after the content as the model writes them,
 *    "<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>" ("\n"
 *    after non-empty content and between calls, ARGS the arguments string
 *    verbatim), so turn 2's prompt holds turn 1's prompt + output as tokens.
 *    Without tool_calls the render is byte-identical to the Jinja one.
 *  - null/absent content renders "" for user/assistant/tool turns; a
 *    system message needs string content (Jinja fails otherwise).
 * Rejected (the template would silently drop them): unknown roles, content
 * that is a list of parts or any non-string, non-null value, non-array tools;
 * (SmolLM3) tool_calls on a non-assistant message, a call without a string
 * function.name, arguments neither a string nor an object.
 *
 * SmolLM2's template (and the ChatML fallback) render every message as
 * "<|im_start|>{role}\n{content}<|im_end|>\n" (tool turns keep the role
 * "tool"), SmolLM2 adding its default system message when messages[0] is
 * not a system message.  They need string content in every message (Jinja
 * fails on null) and ignore enable_thinking; tools are refused
 * (SMOL_EUNSUPPORTED) rather than silently dropped.
 */
#ifndef SMOL_CHAT_TEMPLATE_H
#define SMOL_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "daemon/model/error.h"
#include "daemon/model/rules.h"      /* smol_utf8_valid, the input rules */
#include "daemon/text/chat_buf.h"       /* struct smol_chat_buf, smol_chat_utf8_decode */
#include "daemon/text/tokenizer.h"      /* struct smol_span */

/* ---- growable output buffer: chat_buf.h ------------------------------- */

/* ---- templates --------------------------------------------------------- */

enum smol_chat_tpl {
    SMOL_CHAT_TPL_SMOLLM3,      /* HuggingFaceTB/SmolLM3-3B chat_template.jinja (2025-07) */
    SMOL_CHAT_TPL_SMOLLM2,      /* SmolLM2-Instruct ChatML with its default system prompt */
    SMOL_CHAT_TPL_CHATML,       /* fallback: bare ChatML, no default system prompt, no tools */
};

const char *smol_chat_tpl_name(enum smol_chat_tpl t);   /* "smollm3", "smollm2", "chatml" */

/* Recognises a template from its text (len bytes, need not be NUL-terminated).
 * Unknown text: SMOL_ETEMPLATE naming its hash, unless allow_chatml_fallback,
 * in which case *out = SMOL_CHAT_TPL_CHATML. */
enum smol_err smol_chat_tpl_detect(const char *text, size_t len, int allow_chatml_fallback,
                                   enum smol_chat_tpl *out, char *err);

/* ---- request ----------------------------------------------------------- */

enum smol_chat_role { SMOL_CHAT_SYSTEM, SMOL_CHAT_USER, SMOL_CHAT_ASSISTANT, SMOL_CHAT_TOOL };

struct smol_chat_msg {
    enum smol_chat_role role;
    const char *content;            /* UTF-8, NUL-terminated; NULL = null or absent */
    const char *reasoning_content;  /* NULL when absent; not rendered by these templates */
    const json_t *tool_calls;       /* assistant: JSON array or NULL; SmolLM3 renders them (above) */
    const char *tool_call_id;       /* tool: NULL when absent; not rendered */
    const char *name;               /* NULL when absent; not rendered */
};

struct smol_chat_request {
    struct smol_chat_msg *msgs;     /* [n_msgs], n_msgs >= 1 */
    size_t n_msgs;
    const json_t *tools;            /* JSON array (OpenAI "tools") or NULL; [] = none */
    int enable_thinking;            /* request flag; system /think, /no_think override it */
    int add_generation_prompt;      /* end with the assistant header (and empty think in no-think) */
    const char *date;               /* "DD Month YYYY" (e.g. "09 July 2025"); SmolLM3 needs it */
    int msgs_owned;                 /* 1 when msgs was allocated by smol_chat_request_from_json */
};

/* Fills req from an OpenAI-style chat request body: "messages" (role,
 * content, reasoning_content or its alias "reasoning", tool_calls,
 * tool_call_id, name), optional "tools", "add_generation_prompt" (default
 * true), "chat_template_kwargs": {"enable_thinking": bool} (default true).
 * Strings point into body, which must outlive req; req->date is NULL (set it).
 * Errors: SMOL_EINVAL naming the bad field (messages[2].role ...).
 * Free with smol_chat_request_deinit. */
enum smol_err smol_chat_request_from_json(struct smol_chat_request *req, const json_t *body, char *err);
/* Frees msgs if owned; accepts a zeroed or already deinited req. */
void smol_chat_request_deinit(struct smol_chat_request *req);

/* ---- rendering --------------------------------------------------------- */

/* Appends the rendered prompt to out (not reset first).  *thinking (if not
 * NULL) receives the effective reasoning mode: 1 when the prompt ends ready
 * for the model to open <think> itself, 0 when thinking was disabled (the
 * no-think generation prompt pre-fills "<think>\n\n</think>\n"; always 0 for
 * ChatML templates).  Errors: SMOL_EINVAL (bad role, date, tools),
 * SMOL_EUTF8 (invalid UTF-8 in a string), SMOL_ETEMPLATE (input the template
 * cannot render, e.g. a system message without string content),
 * SMOL_EUNSUPPORTED (tools given to a ChatML template), SMOL_ENOMEM; on error
 * out->len is restored. */
enum smol_err smol_chat_render(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                               struct smol_chat_buf *out, int *thinking, char *err);

/* ---- untrusted spans -------------------------------------------------- */

/* Where the bytes of a span came from. */
enum smol_chat_field {
    SMOL_CHAT_FIELD_CONTENT,    /* msgs[msg].content as rendered: user and tool turns verbatim,
                                 * assistant turns (SmolLM3) after content.lstrip("\n");
                                 * ChatML templates: every message verbatim */
    SMOL_CHAT_FIELD_SYSTEM,     /* SmolLM3 msgs[0] system text as custom instructions:
                                 * c.replace("/no_think", "").replace("/think", "").rstrip(),
                                 * then under /system_override also
                                 * .replace("/system_override", "").rstrip() */
    SMOL_CHAT_FIELD_TOOL,       /* tools[tool] as `tool | string`: Python repr of the object
                                 * (a JSON string element: its text) */
    SMOL_CHAT_FIELD_DATE,       /* req->date (validated "DD Month YYYY") */
    SMOL_CHAT_FIELD_TOOL_CALL,  /* SmolLM3 msgs[msg].tool_calls[]: a call's name (as a JSON string) or its
                                 * arguments (the string verbatim, an object as json.dumps) */
};

struct smol_chat_span_src {
    int32_t msg;                /* index in req->msgs, -1 when not from a message */
    int32_t tool;               /* index in req->tools, -1 when not a tool */
    enum smol_chat_field field;
};

/* The byte ranges of a render that hold caller-provided text, in output
 * order (ascending, disjoint; some may be empty, e.g. content "").  Offsets
 * are absolute in the output buffer (a render appends, so a span's offset
 * counts the bytes out held before).  src[i] says where v[i] came from.
 * Every byte the template copies from the request lies in a span; the other
 * bytes are literal template text (markers, headers, default personas, the
 * no-think pre-fill, the <tool_call> tags).  Request fields these templates
 * do not render (reasoning_content, tool_call_id, name) have no span.  A
 * SmolLM3 system message whose custom instructions come out empty renders
 * the default persona instead and so has no span (unless /system_override).
 * v can go straight to smol_tokenizer_encode_spans. */
struct smol_chat_spans {
    struct smol_span *v;                /* [n] */
    struct smol_chat_span_src *src;     /* [n] */
    size_t n, cap;
};

void smol_chat_spans_init(struct smol_chat_spans *s);
void smol_chat_spans_deinit(struct smol_chat_spans *s);   /* frees; reusable after */
void smol_chat_spans_reset(struct smol_chat_spans *s);    /* n = 0, keeps memory */

/* smol_chat_render that also appends to *spans (when not NULL) the spans of
 * caller-provided text in what it appended to out.  On error both out->len
 * and spans->n are restored.  smol_chat_render(...) is this with
 * spans = NULL. */
enum smol_err smol_chat_render_spans(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                                     struct smol_chat_buf *out, struct smol_chat_spans *spans, int *thinking,
                                     char *err);

/* ---- helpers shared with chat_parse.c and the CLI ---------------------- */

/* 0 if date is exactly "DD Month YYYY" with an English month name, else -1. */
int smol_chat_date_check(const char *date);
/* Formats a calendar date (year 1..9999, month 1..12, day 1..31) as
 * "DD Month YYYY" into out (at least 24 bytes).  -1 when out of range. */
int smol_chat_date_format(int year, int month, int day, char *out, size_t cap);

#include "daemon/text/pyrepr.h"  /* repr / json.dumps of tools, part of the template's face */

#endif
