/*
 * items.h - the input items of a stored Response (items.c), as OpenAI's
 * GET /v1/responses/{id}/input_items lists them: what the request's `input`
 * held, each item with an id, and one page of them at a time.
 *
 * Layer 1 of the gateway (tests/check_layers.sh): pure functions of JSON,
 * no I/O, no state.
 */
#ifndef GW_ITEMS_H
#define GW_ITEMS_H

#include <stddef.h>
#include <jansson.h>

/* The input items of a request whose `input` is in (a string, or a list of
 * items as responses.c accepted them), as new JSON: a string becomes one
 * user message; a message's string content becomes one input_text part
 * (output_text for an assistant's); an item without a `type` (a bare
 * {role, content}) gets type "message"; an item without an `id` gets
 * PREFIX + stem + its index (msg_, fc_, fco_, rs_, item_ by type), so every
 * id is unique within the list.  in NULL -> an empty list.  NULL when out of
 * memory. */
json_t *gw_items_from_input(json_t *in, const char *stem);

/* One page of items, as OpenAI's list: {object: "list", data, first_id,
 * last_id, has_more}.  order "asc" (as sent) or "desc" (newest first, the
 * default: order NULL); after / before (NULL: none) an item id the page
 * starts after / ends before, in that order; limit 1..100.  NULL with the
 * reason in why and the parameter at fault in *param for an id not in the
 * list, a bad order or limit; NULL with *param untouched when out of
 * memory. */
json_t *gw_items_page(json_t *items, long limit, const char *order, const char *after, const char *before,
                      const char **param, char *why, size_t wn);

#endif
