// The index's space-filling curve: Hilbert keys, so that nearby points get nearby keys and a run
// of consecutive keys is a compact piece of space.
//
// Why Hilbert and not Morton (Z-order): a cell of the index is 32 consecutive points, and its box
// is what the searches prune with. Z-order jumps across space at every octant boundary, so a cell
// that straddles one gets a box spanning both sides; the Hilbert curve only ever steps to a
// face-adjacent sub-cube. Counted on 1M uniform points (pcnn_bench_cell_model): the mean cell box
// holds 3.9 cells' worth of volume under Morton order and 1.3 under Hilbert order, and the cells
// a warp of 32 self-queries must scan (those some lane's final k-th-neighbor sphere reaches) fall
// from 27.8 to 15.9 at k = 1, 41.9 to 24.3 at k = 8 and 52.4 to 30.8 at k = 32
// (bench/results/2026-11-27-round11.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "finite.cuh"

namespace pcnn::detail {

inline constexpr int kCurveBits = 21;  // per axis: 63-bit keys
// The key of a non-finite point: above every finite key (bit 63, which no finite key has), so a
// finite point with the largest key, 2^63 - 1, still sorts before it.
inline constexpr std::uint64_t kInvalidKey = std::uint64_t(1) << 63;

__host__ __device__ __forceinline__ std::uint64_t expand_bits21(std::uint32_t v) {
  std::uint64_t x = v & 0x1fffff;
  x = (x | x << 32) & 0x1f00000000ffffull;
  x = (x | x << 16) & 0x1f0000ff0000ffull;
  x = (x | x << 8) & 0x100f00f00f00f00full;
  x = (x | x << 4) & 0x10c30c30c30c30c3ull;
  x = (x | x << 2) & 0x1249249249249249ull;
  return x;
}

/// All ones where `v` has bit `q`, else 0.
__host__ __device__ __forceinline__ std::uint32_t bit_mask(std::uint32_t v, std::uint32_t q) {
  return 0u - static_cast<std::uint32_t>((v & q) != 0);
}

/// One level's turn of the Hilbert transform for axis v (1 or 2), on the bits below `q`: axis 0's
/// low bits are inverted where v has the level's bit, else exchanged with v's. Without branches:
/// neighbouring lanes take different ones.
__host__ __device__ __forceinline__ void hilbert_turn(std::uint32_t& x, std::uint32_t& v,
                                                      std::uint32_t q) {
  const std::uint32_t p = q - 1, invert = bit_mask(v, q);
  const std::uint32_t t = (x ^ v) & p & ~invert;
  x ^= (p & invert) | t;
  v ^= t;
}

/// The Hilbert index of the grid point (x, y, z), each of `levels` bits (1 to kCurveBits): 3 ×
/// `levels` bits, the coarsest level's 3 bits on top. Skilling's transform ("Programming the
/// Hilbert curve", AIP Conf. Proc. 707, 2004): the rotations and reflections of each level are
/// applied to the bits below it, then the Gray code is undone and the bits interleaved. The top
/// 3L bits depend on the top L bits of each coordinate alone, so the key of the coordinates'
/// top L bits is the full key's top 3L bits: a key truncated to fewer levels orders the points
/// as the full key's prefix does.
__host__ __device__ __forceinline__ std::uint64_t hilbert_index(std::uint32_t x, std::uint32_t y,
                                                                std::uint32_t z, int levels) {
  const std::uint32_t top = std::uint32_t(1) << (levels - 1);
  for (std::uint32_t q = top; q > 1; q >>= 1) {
    x ^= (q - 1) & bit_mask(x, q);  // axis 0 is only ever inverted
    hilbert_turn(x, y, q);
    hilbert_turn(x, z, q);
  }
  y ^= x;
  z ^= y;
  // t ^= q - 1 for every bit q > 1 of z: bit i of t is the parity of z's bits above i.
  std::uint32_t t = z;
  t ^= t >> 1;
  t ^= t >> 2;
  t ^= t >> 4;
  t ^= t >> 8;
  t ^= t >> 16;
  t >>= 1;
  x ^= t;
  y ^= t;
  z ^= t;
  return expand_bits21(x) << 2 | expand_bits21(y) << 1 | expand_bits21(z);
}

/// The curve key of a point on a cubic grid of 2^kCurveBits steps over the largest extent of
/// `b` (lo xyz, hi xyz; cubic cells keep the curve's locality the same along every axis), with
/// its bits below `low_bit` cleared: computed to the levels those bits need, which orders points
/// as the full key's prefix does. Points outside the bounds are clamped; non-finite ones get
/// kInvalidKey.
__host__ __device__ __forceinline__ std::uint64_t curve_key(float x, float y, float z,
                                                            const float* __restrict__ b,
                                                            int low_bit = 0) {
  if (!finite3(x, y, z)) return kInvalidKey;
  const int levels = kCurveBits - low_bit / 3;  // whole levels: a partial one is cleared below
  const float extent = fmaxf(fmaxf(b[3] - b[0], b[4] - b[1]), fmaxf(b[5] - b[2], 1e-30f));
  const float scale = float((1 << kCurveBits) - 1) / extent;
  const float p[3] = {x, y, z};
  std::uint32_t g[3];
  for (int a = 0; a < 3; ++a) {  // unrolled by the compiler (no pragma: the host pass warns)
    const float q = fminf(fmaxf((p[a] - b[a]) * scale, 0.f), float((1 << kCurveBits) - 1));
    g[a] = static_cast<std::uint32_t>(q) >> (kCurveBits - levels);
  }
  const std::uint64_t key = hilbert_index(g[0], g[1], g[2], levels) << (3 * (kCurveBits - levels));
  return key & ~((std::uint64_t(1) << low_bit) - 1);
}

}  // namespace pcnn::detail
