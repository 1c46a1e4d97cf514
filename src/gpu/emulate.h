/*
 * emulate.h — run a kernel of kernels.h over its grid on the CPU (the
 * emulated CUDA device; internal, see emulate.c).
 */
#ifndef STK_GPU_EMULATE_H
#define STK_GPU_EMULATE_H

#include "gpu/kernels.h"

/* Same contract as stk_gpu_launch (device.h), synchronously. */
int stk_gpu_emu_launch(stk_kernel_id k, const uint32_t grid[3], const uint32_t block[3],
                       const void *args, size_t args_bytes);

#endif
