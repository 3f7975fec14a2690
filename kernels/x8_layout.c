/*
 * x8_layout.c - portable pack / unpack of the x8 weight layouts (see
 * x8_layout.h): lanes_pack.inc with 8 lanes, the bodies amx_layout.c
 * compiles with 16.  Plain C, built and tested on every machine; the AVX2
 * and AVX-VNNI tables use these packers at load.
 */
#include "x8_layout.h"

#include <string.h>

int smol_x8_has(uint32_t type)
{
    return type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K || type == SMOL_TYPE_Q4_1 || type == SMOL_TYPE_Q8_0;
}

#define LANES 8
#define LANES_T(t) t##_x8
#define LANES_FN(f) smol_x8_##f
#include "lanes_pack.inc"
