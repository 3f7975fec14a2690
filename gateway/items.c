/*
 * items.c - the input items of a stored Response, and their pages (items.h).
 *
 * OpenAI lists a response's input items newest first by default and pages
 * them with limit, after and before (item ids) as every list of its API
 * does: {object: "list", data, first_id, last_id, has_more}.  The items are
 * what the request's `input` held, made whole once when the response is
 * stored (types and ids filled in), so a page is a slice of one array.
 */
#include "gateway/items.h"

#include <stdio.h>
#include <string.h>

static const char *id_prefix(const char *type)
{
    if (!strcmp(type, "message")) return "msg_";
    if (!strcmp(type, "function_call")) return "fc_";
    if (!strcmp(type, "function_call_output")) return "fco_";
    if (!strcmp(type, "reasoning")) return "rs_";
    return "item_";
}

/* A message's content as parts: a string -> one input_text / output_text part. */
static json_t *parts_of(json_t *content, const char *role)
{
    if (!json_is_string(content)) return json_incref(content);
    const char *t = role && !strcmp(role, "assistant") ? "output_text" : "input_text";
    return json_pack("[{s:s,s:O}]", "type", t, "text", content);
}

json_t *gw_items_from_input(json_t *in, const char *stem)
{
    json_t *out = json_array();
    if (!out || !in) return out;
    if (json_is_string(in)) {
        char id[80];
        snprintf(id, sizeof id, "msg_%s0000", stem);
        if (json_array_append_new(out, json_pack("{s:s,s:s,s:s,s:o,s:s}", "id", id, "type", "message", "role",
                                                 "user", "content", parts_of(in, "user"), "status", "completed"))) {
            json_decref(out);
            return NULL;
        }
        return out;
    }
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) {
        json_t *x = json_deep_copy(it);
        if (!x || !json_is_object(x)) {
            json_decref(x);
            json_decref(out);
            return NULL;
        }
        const char *type = json_string_value(json_object_get(x, "type"));
        if (!type) {
            json_object_set_new(x, "type", json_string("message"));
            type = "message";
        }
        if (!strcmp(type, "message")) {
            const char *role = json_string_value(json_object_get(x, "role"));
            json_object_set_new(x, "content", parts_of(json_object_get(x, "content"), role));
            if (!json_object_get(x, "status")) json_object_set_new(x, "status", json_string("completed"));
        }
        if (!json_is_string(json_object_get(x, "id"))) {
            char id[96];
            snprintf(id, sizeof id, "%s%s%04zu", id_prefix(type), stem, i);
            json_object_set_new(x, "id", json_string(id));
        }
        if (json_array_append_new(out, x)) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* The index of the item id in items, or -1. */
static long index_of(json_t *items, const char *id)
{
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        const char *x = json_string_value(json_object_get(it, "id"));
        if (x && !strcmp(x, id)) return (long)i;
    }
    return -1;
}

json_t *gw_items_page(json_t *items, long limit, const char *order, const char *after, const char *before,
                      const char **param, char *why, size_t wn)
{
    const long n = (long)json_array_size(items);
    int desc = 1;
    if (order && !strcmp(order, "asc")) desc = 0;
    else if (order && strcmp(order, "desc")) {
        *param = "order";
        snprintf(why, wn, "'order' must be \"asc\" or \"desc\", not \"%.40s\"", order);
        return NULL;
    }
    if (limit < 1 || limit > 100) {
        *param = "limit";
        snprintf(why, wn, "'limit' must be an integer in [1, 100]");
        return NULL;
    }
    /* positions in the listing's order: k-th listed = items[desc ? n-1-k : k] */
    long lo = 0, hi = n;        /* the listed positions [lo, hi) the cursors leave */
    if (after) {
        long i = index_of(items, after);
        if (i < 0) {
            *param = "after";
            snprintf(why, wn, "'after': no input item '%.60s' in this response", after);
            return NULL;
        }
        lo = (desc ? n - 1 - i : i) + 1;
    }
    if (before) {
        long i = index_of(items, before);
        if (i < 0) {
            *param = "before";
            snprintf(why, wn, "'before': no input item '%.60s' in this response", before);
            return NULL;
        }
        hi = desc ? n - 1 - i : i;
    }
    json_t *data = json_array();
    long k = lo;
    for (; data && k < hi && k - lo < limit; k++)
        json_array_append(data, json_array_get(items, (size_t)(desc ? n - 1 - k : k)));
    if (!data) return NULL;
    size_t m = json_array_size(data);
    json_t *first = m ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = m ? json_object_get(json_array_get(data, m - 1), "id") : NULL;
    return json_pack("{s:s,s:o,s:O?,s:O?,s:b}", "object", "list", "data", data, "first_id", first, "last_id", last,
                     "has_more", k < hi);
}
