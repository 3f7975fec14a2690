/*
 * gguf.h - a bounds-checked reader for GGUF model files (versions 2 and 3).
 *
 * The file is mmapped read-only; metadata values and tensor data are
 * pointers into the mapping and are never copied, except keys and tensor
 * names (copied NUL-terminated) and the index of string arrays (one
 * {ptr,len} per element, so element i is O(1)).  Parsing checks every count,
 * length, offset, overflow, type and alignment before use; a bad file gives
 * SMOL_EFORMAT with a message naming the bad key or tensor.  Nothing here
 * interprets the model: see model.c.
 *
 * GGUF stores tensor shapes contiguous-dimension first: ne[0] is the row
 * length (the input dimension of a weight).  The model loader converts that
 * convention once; nothing else should look at ne.
 */
#ifndef SMOL_GGUF_H
#define SMOL_GGUF_H

#include <stdint.h>
#include <stddef.h>
#include "daemon/model/error.h"

enum smol_gguf_vtype {
    SMOL_GGUF_U8 = 0, SMOL_GGUF_I8 = 1, SMOL_GGUF_U16 = 2, SMOL_GGUF_I16 = 3,
    SMOL_GGUF_U32 = 4, SMOL_GGUF_I32 = 5, SMOL_GGUF_F32 = 6, SMOL_GGUF_BOOL = 7,
    SMOL_GGUF_STRING = 8, SMOL_GGUF_ARRAY = 9, SMOL_GGUF_U64 = 10,
    SMOL_GGUF_I64 = 11, SMOL_GGUF_F64 = 12,
    SMOL_GGUF_VTYPE_COUNT
};

#define SMOL_GGUF_MAX_DIMS 4
#define SMOL_GGUF_DEFAULT_ALIGNMENT 32

struct smol_gguf_str {
    const char *ptr;            /* into the mapping, NOT NUL-terminated */
    uint64_t len;
};

struct smol_gguf_kv {
    char *key;                  /* NUL-terminated copy */
    enum smol_gguf_vtype type;
    /* scalars: the value, widened */
    union { uint64_t u; int64_t i; double f; } v;
    struct smol_gguf_str str;   /* type == STRING */
    /* type == ARRAY */
    enum smol_gguf_vtype arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;    /* packed elements (unaligned) for numeric arrays */
    struct smol_gguf_str *arr_strs; /* [arr_n] for string arrays, else NULL */
};

struct smol_gguf_tensor {
    char *name;                 /* NUL-terminated copy */
    uint32_t type;              /* enum smol_type (ggml type id) */
    uint32_t n_dims;
    int64_t ne[SMOL_GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint64_t offset;            /* relative to the data section */
    uint64_t size;              /* bytes */
    const void *data;           /* into the mapping */
};

struct smol_gguf {
    uint32_t version;
    uint64_t n_kv;
    struct smol_gguf_kv *kv;
    uint64_t n_tensors;
    struct smol_gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset;       /* file offset of the tensor data section */
    const uint8_t *base;        /* start of the file bytes */
    size_t size;                /* file size */
    int mapped;                 /* 1 if base is our mmap */
};

/* Opens and parses path.  On error returns the code, *out = NULL, and a
 * message in err (SMOL_ERRLEN bytes) naming the file and what is wrong. */
enum smol_err smol_gguf_open(struct smol_gguf **out, const char *path, char *err);
/* Parses a caller-owned buffer that must outlive the result (fuzzing, tests). */
enum smol_err smol_gguf_open_mem(struct smol_gguf **out, const void *data, size_t size, char *err);
/* Unmaps and frees; accepts NULL and *g == NULL; sets *g = NULL. */
void smol_gguf_close(struct smol_gguf **g);

const struct smol_gguf_kv *smol_gguf_find_kv(const struct smol_gguf *g, const char *key);
const struct smol_gguf_tensor *smol_gguf_find_tensor(const struct smol_gguf *g, const char *name);
const char *smol_gguf_vtype_name(enum smol_gguf_vtype t);

/* Typed getters.  Absent key: SMOL_OK with *out untouched when !required,
 * SMOL_EFORMAT "missing key" when required.  Wrong type or a value that does
 * not fit: SMOL_EFORMAT naming the key.  Integer getters accept any integer
 * type whose value fits; the float getter accepts f32 and f64. */
enum smol_err smol_gguf_get_u32(const struct smol_gguf *g, const char *key, uint32_t *out, int required, char *err);
enum smol_err smol_gguf_get_i64(const struct smol_gguf *g, const char *key, int64_t *out, int required, char *err);
enum smol_err smol_gguf_get_f32(const struct smol_gguf *g, const char *key, float *out, int required, char *err);
enum smol_err smol_gguf_get_bool(const struct smol_gguf *g, const char *key, int *out, int required, char *err);
enum smol_err smol_gguf_get_str(const struct smol_gguf *g, const char *key, struct smol_gguf_str *out, int required, char *err);
/* Array of elem type (SMOL_GGUF_VTYPE_COUNT = any); *out = NULL when absent and !required. */
enum smol_err smol_gguf_get_arr(const struct smol_gguf *g, const char *key, enum smol_gguf_vtype elem,
                                const struct smol_gguf_kv **out, int required, char *err);

/* Element i of a numeric array, widened (i < kv->arr_n is the caller's duty). */
int64_t smol_gguf_arr_int(const struct smol_gguf_kv *kv, uint64_t i);
double smol_gguf_arr_float(const struct smol_gguf_kv *kv, uint64_t i);

/* 1 if s equals the NUL-terminated c. */
int smol_gguf_str_eq(struct smol_gguf_str s, const char *c);

#endif
