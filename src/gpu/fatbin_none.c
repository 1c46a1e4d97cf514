/*
 * fatbin_none.c — the kernels' fat binary of a build made without nvcc
 * (STK_CUDA=OFF, or AUTO on a machine without it; setup.py likewise): none.
 *
 * A build with nvcc compiles a generated fatbin.c instead
 * (scripts/embed_fatbin.py), never both: CMakeLists.txt and setup.py leave
 * this file out of their src/gpu/*.c by name. With stk_gpu_fatbin_size 0,
 * stk_gpu_open refuses a real device with STK_EUNSUPPORTED ("built without
 * CUDA kernels"); the emulated device (STOKER_CUDA_EMULATE=1) needs no
 * kernels and works in every build.
 */
#include "gpu/device.h"

const unsigned char stk_gpu_fatbin[1] = {0};
const size_t stk_gpu_fatbin_size = 0;
