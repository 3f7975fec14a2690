/*
 * testrefs.h - the fixtures' reference outputs (tests/fixtures/refs, see its
 * README): the <model>.refs.json index, its binaries, and the comparison of
 * our logits with a reference's top-20 lists.  Header-only, shared by
 * test_model (the engine against the references) and test_cuda (both
 * backends against them).  A missing or unreadable reference fails the test.
 */
#ifndef SMOL_TESTREFS_H
#define SMOL_TESTREFS_H

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#define TOPK 20

/* How our logits [rows][vocab] compare with a reference's top-20 lists:
 * mean / max |dlogit| over the reference's top-20 ids of every row, the
 * fraction of rows whose argmax is the reference's, and that fraction
 * over the rows whose reference top1-top2 margin is >= margin. */
struct stats { double mean, max; double argmax_agree; int rows; double clear_agree; int clear_rows; double margin; };

/* refs/<model_base>.refs.json, parsed (json_decref it). */
static inline json_t *load_refs(const char *model_base)
{
    char rel[256];
    snprintf(rel, sizeof rel, "refs/%s.refs.json", model_base);
    const char *p = fixture_path(rel);
    ck_assert_msg(p, "missing %s", rel);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j, "parse %s: %s", rel, je.text);
    return j;
}

/* The whole of refs/<name> (free it); *n = its size in bytes. */
static inline void *load_ref_bin(const char *name, size_t *n)
{
    char rel[256];
    snprintf(rel, sizeof rel, "refs/%s", name);
    const char *p = fixture_path(rel);
    ck_assert_msg(p, "missing %s", rel);
    void *d = read_file(p, n);
    ck_assert(d);
    return d;
}

/* A JSON array of integers as int32 (free it); *n = its length. */
static inline int32_t *json_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return v;
}

/* Our logits [rows][vocab] vs reference top-20 ids/logits [rows][20]; rows
 * whose argmax misses where the reference margin is >= margin are printed. */
static inline struct stats compare_top(const float *ours, int vocab, const int32_t *ref_ids, const float *ref_logits,
                                       int rows, double margin)
{
    struct stats s = {.margin = margin};
    double sum = 0;
    int agree = 0, clear = 0, clear_agree = 0;
    for (int r = 0; r < rows; r++) {
        const float *o = ours + (size_t)r * vocab;
        int am = 0;
        for (int i = 1; i < vocab; i++) if (o[i] > o[am]) am = i;
        agree += am == ref_ids[r * TOPK];
        if (ref_logits[r * TOPK] - ref_logits[r * TOPK + 1] >= margin) {
            clear++;
            clear_agree += am == ref_ids[r * TOPK];
            if (am != ref_ids[r * TOPK])
                printf("clear-margin miss: row %d, reference margin %.3f, ours: top %d at %.3f, reference top %d at %.3f\n",
                       r, ref_logits[r * TOPK] - ref_logits[r * TOPK + 1], am, o[am], ref_ids[r * TOPK],
                       o[ref_ids[r * TOPK]]);
        }
        for (int k = 0; k < TOPK; k++) {
            double d = fabs((double)o[ref_ids[r * TOPK + k]] - ref_logits[r * TOPK + k]);
            sum += d;
            if (d > s.max) s.max = d;
        }
    }
    s.rows = rows;
    s.mean = sum / (rows * TOPK);
    s.argmax_agree = (double)agree / rows;
    s.clear_rows = clear;
    s.clear_agree = clear ? (double)clear_agree / clear : 1.0;
    return s;
}

#endif
