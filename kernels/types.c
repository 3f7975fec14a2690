/*
 * types.c - the type-traits table: one row per ggml type id, so the rest of
 * the engine asks "how big is a row of this type, how do I dot it" here
 * instead of switching on the type everywhere.
 */
#include "quant_ref.h"

#define T(id, nm, bs, ts, sup, vdt, dq, vd, qz) \
    [id] = {nm, bs, ts, sup, vdt, dq, vd, qz}

static const struct smol_type_traits traits[SMOL_TYPE_COUNT] = {
    T(SMOL_TYPE_F32,  "f32",  1, 4, 1, SMOL_TYPE_F32, smol_dequant_f32_ref, smol_vec_dot_f32_ref, smol_quantize_f32_ref),
    T(SMOL_TYPE_F16,  "f16",  1, 2, 1, SMOL_TYPE_F32, smol_dequant_f16_ref, smol_vec_dot_f16_ref, smol_quantize_f16_ref),
    T(SMOL_TYPE_BF16, "bf16", 1, 2, 1, SMOL_TYPE_F32, smol_dequant_bf16_ref, smol_vec_dot_bf16_ref, smol_quantize_bf16_ref),
    T(SMOL_TYPE_Q4_0, "q4_0", QK4_0, sizeof(struct block_q4_0), 1, SMOL_TYPE_Q8_0, smol_dequant_q4_0_ref, smol_vec_dot_q4_0_ref, smol_quantize_q4_0_ref),
    T(SMOL_TYPE_Q4_1, "q4_1", QK4_1, sizeof(struct block_q4_1), 1, SMOL_TYPE_Q8_1, smol_dequant_q4_1_ref, smol_vec_dot_q4_1_ref, smol_quantize_q4_1_ref),
    T(SMOL_TYPE_Q5_0, "q5_0", QK5_0, sizeof(struct block_q5_0), 1, SMOL_TYPE_Q8_0, smol_dequant_q5_0_ref, smol_vec_dot_q5_0_ref, smol_quantize_q5_0_ref),
    T(SMOL_TYPE_Q5_1, "q5_1", QK5_1, sizeof(struct block_q5_1), 1, SMOL_TYPE_Q8_1, smol_dequant_q5_1_ref, smol_vec_dot_q5_1_ref, smol_quantize_q5_1_ref),
    T(SMOL_TYPE_Q8_0, "q8_0", QK8_0, sizeof(struct block_q8_0), 1, SMOL_TYPE_Q8_0, smol_dequant_q8_0_ref, smol_vec_dot_q8_0_ref, smol_quantize_q8_0_ref),
    /* activation-only formats: valid in a file, never a weight we compute with */
    T(SMOL_TYPE_Q8_1, "q8_1", QK8_1, sizeof(struct block_q8_1), 0, SMOL_TYPE_Q8_1, smol_dequant_q8_1_ref, NULL, smol_quantize_q8_1_ref),
    T(SMOL_TYPE_Q8_K, "q8_K", QK_K, sizeof(struct block_q8_K), 0, SMOL_TYPE_Q8_K, smol_dequant_q8_K_ref, NULL, smol_quantize_q8_K_ref),
    /* known layouts we do not compute with: named so the refusal is clear */
    T(SMOL_TYPE_Q2_K, "q2_K", QK_K, 84, 0, SMOL_TYPE_Q8_K, NULL, NULL, NULL),
    T(SMOL_TYPE_Q3_K, "q3_K", QK_K, 110, 0, SMOL_TYPE_Q8_K, NULL, NULL, NULL),
    T(SMOL_TYPE_Q4_K, "q4_K", QK_K, sizeof(struct block_q4_K), 1, SMOL_TYPE_Q8_K, smol_dequant_q4_K_ref, smol_vec_dot_q4_K_ref, smol_quantize_q4_K_ref),
    T(SMOL_TYPE_Q5_K, "q5_K", QK_K, sizeof(struct block_q5_K), 1, SMOL_TYPE_Q8_K, smol_dequant_q5_K_ref, smol_vec_dot_q5_K_ref, smol_quantize_q5_K_ref),
    T(SMOL_TYPE_Q6_K, "q6_K", QK_K, sizeof(struct block_q6_K), 1, SMOL_TYPE_Q8_K, smol_dequant_q6_K_ref, smol_vec_dot_q6_K_ref, smol_quantize_q6_K_ref),
};

const struct smol_type_traits *smol_type_traits(uint32_t type)
{
    if (type >= SMOL_TYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

const char *smol_type_name(uint32_t type)
{
    const struct smol_type_traits *t = smol_type_traits(type);
    return t ? t->name : "unknown";
}

size_t smol_row_size(uint32_t type, int64_t n)
{
    const struct smol_type_traits *t = smol_type_traits(type);
    if (!t || n < 0 || n % t->block_size) return 0;
    return (size_t)(n / t->block_size) * (size_t)t->type_size;
}
