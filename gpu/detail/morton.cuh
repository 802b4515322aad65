// Morton (Z-order) keys: nearby points get nearby keys.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "finite.cuh"

namespace pcnn::detail {

inline constexpr int kMortonBits = 21;  // per axis: 63-bit keys
// The key of a non-finite point: above every finite key (bit 63, which no finite key has), so a
// finite point at the grid's far corner, whose key is 2^63 - 1, still sorts before it.
inline constexpr std::uint64_t kInvalidKey = std::uint64_t(1) << 63;

__device__ __forceinline__ std::uint64_t expand_bits21(std::uint32_t v) {
  std::uint64_t x = v & 0x1fffff;
  x = (x | x << 32) & 0x1f00000000ffffull;
  x = (x | x << 16) & 0x1f0000ff0000ffull;
  x = (x | x << 8) & 0x100f00f00f00f00full;
  x = (x | x << 4) & 0x10c30c30c30c30c3ull;
  x = (x | x << 2) & 0x1249249249249249ull;
  return x;
}

// Morton key on a cubic grid of 2^21 steps over the largest extent (cubic cells keep the curve's
// locality the same along every axis); points outside the bounds are clamped.
__device__ __forceinline__ std::uint64_t morton_key(float x, float y, float z,
                                                    const float* __restrict__ b) {
  if (!finite3(x, y, z)) return kInvalidKey;
  const float extent = fmaxf(fmaxf(b[3] - b[0], b[4] - b[1]), fmaxf(b[5] - b[2], 1e-30f));
  const float scale = float((1 << kMortonBits) - 1) / extent;
  const float p[3] = {x, y, z};
  std::uint64_t key = 0;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    const float q = fminf(fmaxf((p[a] - b[a]) * scale, 0.f), float((1 << kMortonBits) - 1));
    key |= expand_bits21(static_cast<std::uint32_t>(q)) << a;
  }
  return key;
}

}  // namespace pcnn::detail
