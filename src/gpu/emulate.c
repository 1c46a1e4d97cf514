/*
 * emulate.c — the GPU image pipeline's kernels run on the CPU (the
 * emulated device of device.h; docs/gpu.md, "Testing without a GPU").
 *
 * A launch walks the grid as the GPU would schedule it: every block, every
 * thread of the block, the thread's coordinates computed exactly as the
 * kernel wrapper in kernels.cu computes them (x: block * blockDim +
 * thread; y and z: the block's), and calls the same per-thread body from
 * kernels.h. Bodies write disjoint outputs (STK_K_IMGSUM, which writes its
 * record, runs after the STK_K_ROWSUM it reads), so the order of the walk
 * cannot change a result.
 */
#include "gpu/emulate.h"

#include "core/error.h"

typedef void (*stk_gpu_body)(const stk_gpu_args *a, uint32_t x, uint32_t y, uint32_t z);

static const stk_gpu_body bodies[STK_K_COUNT] = {stk_gb_hpass,  stk_gb_vpass, stk_gb_rowsum,
                                                 stk_gb_imgsum, stk_gb_out,   stk_gb_vout};

int stk_gpu_emu_launch(stk_kernel_id k, const uint32_t grid[3], const uint32_t block[3],
                       const void *args, size_t args_bytes)
{
    if ((unsigned)k >= STK_K_COUNT || args_bytes != sizeof(stk_gpu_args))
        return stk_fail(STK_EINVAL, "emulated launch: kernel %d with %zu bytes of arguments",
                        (int)k, args_bytes);
    if (block[1] != 1 || block[2] != 1)
        return stk_fail(STK_EINVAL, "emulated launch: blocks are one-dimensional");
    const stk_gpu_args *a = args;
    stk_gpu_body body = bodies[k];
    for (uint32_t bz = 0; bz < grid[2]; bz++)
        for (uint32_t by = 0; by < grid[1]; by++)
            for (uint32_t bx = 0; bx < grid[0]; bx++)
                for (uint32_t t = 0; t < block[0]; t++)
                    body(a, bx * block[0] + t, by, bz);
    return 0;
}
