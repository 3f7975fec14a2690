/*
 * chat_parse.h - incremental parser of SmolLM3's output into reasoning,
 * content and tool calls, fed piece by piece as tokens are detokenized.
 *
 * SmolLM3 writes `<think>…</think>` (think mode) and
 * `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.  The four tags are
 * added tokens, so they usually arrive as one special piece; they are also
 * recognised as plain text, even split across pieces (the parser holds back
 * a tail that could still become a tag, and an incomplete UTF-8 sequence,
 * so every emitted fragment ends on a character boundary).
 *
 * Rules (what an OpenAI-style client gets):
 *  - `<think>` opens reasoning only at the start of the reply (after
 *    whitespace at most); `</think>` closes it.  Think mode (prompt ends
 *    "<|im_start|>assistant\n") and no-think mode (prompt pre-filled with
 *    "<think>\n\n</think>\n") both start in content; START_REASONING is for
 *    a prompt that ends inside an open <think>.
 *  - Each text segment (reasoning, or content between tags) is trimmed of
 *    leading and trailing whitespace: the "\n\n" after </think> and the
 *    newlines around tool calls never reach the client, matching the
 *    template's content.lstrip("\n") when the answer is sent back as
 *    history.  Whitespace inside a segment is streamed once followed by text.
 *  - `<tool_call>` in content starts a call; at `</tool_call>` (or at the end
 *    of the reply if unclosed) its JSON is parsed: an object with a string
 *    "name" and "arguments" (any JSON: reported as the exact bytes the
 *    model wrote for it, so the call renders back into the history as the
 *    same tokens, chat_template.c; re-serialised like Python's json.dumps
 *    only if those bytes cannot be located; a string is passed through as
 *    already-serialised JSON; absent = "{}").  Anything else is malformed: the raw text, tags
 *    included, is emitted as content and counted in n_malformed.
 *  - A tag that means nothing where it appears (</think> in content,
 *    <tool_call> inside reasoning, <think> mid-answer) is literal text of
 *    the current segment, special piece or not.  Other special pieces (e.g.
 *    <|im_end|>, which the caller should treat as a stop) are dropped.
 *  - At finish, an unclosed <think> keeps its text as reasoning and sets
 *    unclosed_think (typically finish_reason "length").
 * START_PLAIN (ChatML models without think/tool tags) passes text through
 * as content untouched.
 */
#ifndef SMOL_CHAT_PARSE_H
#define SMOL_CHAT_PARSE_H

#include <stddef.h>
#include "daemon/text/chat_template.h"
#include "daemon/model/error.h"

enum smol_chat_start {
    SMOL_CHAT_START_CONTENT,    /* think or no-think SmolLM3 prompt (see above) */
    SMOL_CHAT_START_REASONING,  /* the prompt ends with an open <think> */
    SMOL_CHAT_START_PLAIN,      /* no tag recognition at all */
};

enum smol_chat_ev_kind { SMOL_CHAT_EV_REASONING, SMOL_CHAT_EV_CONTENT, SMOL_CHAT_EV_TOOL_CALL };

struct smol_chat_event {
    enum smol_chat_ev_kind kind;
    const char *text;           /* REASONING/CONTENT: fragment, not NUL-terminated */
    size_t len;                 /* bytes of text */
    const char *name;           /* TOOL_CALL: function name, NUL-terminated */
    const char *arguments;      /* TOOL_CALL: arguments as JSON text, NUL-terminated */
    int index;                  /* TOOL_CALL: 0, 1, ... within this reply */
};

/* Called for each event; pointers are valid only during the call. */
typedef void (*smol_chat_emit_fn)(void *ud, const struct smol_chat_event *ev);

struct smol_chat_parser {
    int state;                  /* internal: content, reasoning, tool call, plain */
    int at_start;               /* nothing but whitespace seen yet: <think> may open */
    int seg_started;            /* current segment has emitted non-whitespace */
    int n_tool_calls;           /* tool calls emitted so far */
    int n_malformed;            /* <tool_call> blocks emitted as content */
    int unclosed_think;         /* set by finish when reasoning never closed */
    int finished;
    struct smol_chat_buf pend;  /* unclassified tail: possible tag prefix, partial UTF-8 */
    struct smol_chat_buf ws;    /* trailing whitespace held back in the segment */
    struct smol_chat_buf call;  /* body of the open tool call */
    struct smol_chat_buf scratch;
    smol_chat_emit_fn emit;
    void *ud;
};

void smol_chat_parser_init(struct smol_chat_parser *p, enum smol_chat_start start, smol_chat_emit_fn emit, void *ud);
/* Frees buffers; accepts NULL; p may be inited again after. */
void smol_chat_parser_deinit(struct smol_chat_parser *p);

/* Feeds one detokenized piece (len bytes).  special = 1 when the piece is a
 * special/added token rendered as text ("<think>", "<|im_end|>"): it is then
 * matched whole, never as a fragment.  Emits zero or more events.
 * SMOL_ENOMEM, or SMOL_EINVAL after finish. */
enum smol_err smol_chat_parser_feed(struct smol_chat_parser *p, const char *text, size_t len, int special);
/* End of the reply: flushes held text, closes open segments (see rules). */
enum smol_err smol_chat_parser_finish(struct smol_chat_parser *p);

#endif
