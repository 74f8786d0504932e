#pragma once
#include <stdint.h>

#ifdef USE_ROCM
#include <hip/hip_runtime.h>
#define WARP_SIZE 64
#else
#include <cuda_runtime.h>
#define WARP_SIZE 32
#endif

#define CEILDIV(a, b) (((a) + (b) - 1) / (b))
