/* cuda_fp16.h (cuda-emu): in cuda_runtime.h */
#include "cuda_runtime.h"
