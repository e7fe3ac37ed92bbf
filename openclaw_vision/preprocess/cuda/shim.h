// Compile preprocess.cu with g++ so the real kernel source runs on a CPU (tests, sanitizers).
// CUDA's qualifiers become nothing, the thread and block indices are thread-local variables that
// shim_launch sets before calling the kernel once per (block, thread), and binary16 comes from
// GCC's _Float16. The kernel uses no shared memory, barriers or warp intrinsics, so a sequential
// loop over the threads computes exactly what the GPU computes (up to float contraction).
#pragma once
#include <cmath>
#include <cstring>

#define OPENCLAW_SHIM 1
#define __global__
#define __device__
#define __forceinline__ inline

struct ShimDim3 {
  unsigned x, y, z;
};
static thread_local ShimDim3 threadIdx, blockIdx, blockDim, gridDim;

inline unsigned short shim_float_to_half_bits(float v) {
  _Float16 h = (_Float16)v;  // round to nearest even, as cvt.rn.f16.f32
  unsigned short bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

template <typename Kernel, typename... Args>
void shim_launch(ShimDim3 grid, ShimDim3 block, Kernel kernel, Args... args) {
  gridDim = grid;
  blockDim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx)
        for (unsigned tz = 0; tz < block.z; ++tz)
          for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx) {
              blockIdx = {bx, by, bz};
              threadIdx = {tx, ty, tz};
              kernel(args...);
            }
}
