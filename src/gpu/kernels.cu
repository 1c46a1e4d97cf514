/*
 * kernels.cu — the CUDA kernels of the GPU image pipeline (docs/gpu.md).
 *
 * Each kernel is a wrapper: it maps its thread to the coordinates its
 * per-thread body in kernels.h takes, and calls it. The arithmetic lives
 * in kernels.h so that emulate.c runs the same code on the CPU (CI has no
 * GPU). The build compiles this file with nvcc into a fat binary (sm_80,
 * sm_90, and compute_90 PTX for later GPUs; --fmad=false, -Werror) that
 * the library embeds and loads through the driver API (device.c): the
 * library itself links no CUDA library.
 */
#include "gpu/kernels.h"

#define STK_KERNEL(name, body)                                                          \
    extern "C" __global__ void __launch_bounds__(STK_GPU_BLOCK) name(stk_gpu_args a)     \
    {                                                                                   \
        body(&a, blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y, blockIdx.z);         \
    }

STK_KERNEL(stk_k_hpass, stk_gb_hpass)
STK_KERNEL(stk_k_vpass, stk_gb_vpass)
STK_KERNEL(stk_k_rowsum, stk_gb_rowsum)
STK_KERNEL(stk_k_imgsum, stk_gb_imgsum)
STK_KERNEL(stk_k_out, stk_gb_out)
STK_KERNEL(stk_k_vout, stk_gb_vout)
