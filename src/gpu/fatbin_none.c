/*
 * fatbin_none.c — the kernels' fat binary of a build made without nvcc
 * (CMake: STK_CUDA=OFF, or AUTO on a machine without it): none.
 *
 * A CMake build with nvcc compiles a generated fatbin.c instead
 * (scripts/embed_fatbin.py), never both: CMakeLists.txt leaves this file
 * out of the src/gpu sources it globs, by name. setup.py never compiles it: it always
 * generates fatbin.c, empty without nvcc or with STOKER_CUDA=0. With stk_gpu_fatbin_size 0,
 * stk_gpu_open refuses a real device with STK_EUNSUPPORTED ("built without
 * CUDA kernels"); the emulated device (STOKER_CUDA_EMULATE=1) needs no
 * kernels and works in every build.
 */
#include "gpu/device.h"

const unsigned char stk_gpu_fatbin[1] = {0};
const size_t stk_gpu_fatbin_size = 0;
