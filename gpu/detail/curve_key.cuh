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

/// The Hilbert curve as a machine of 24 states, one a rotation or reflection of the cube (and the
/// parity the Gray code carries down): at each level, from the coarsest, the point's octant there
/// (its x, y, z bits, x highest) and the state give the key's 3 bits of that level and the state
/// of the next. Entry state × 8 + octant holds next state × 8 + key bits. It is the machine of
/// Skilling's transform ("Programming the Hilbert curve", AIP Conf. Proc. 707, 2004), read off
/// that transform's keys, which tests/test_curve_key.cu still computes and compares with it bit
/// for bit. A level costs a table read (192 bytes, two cache lines) and a few operations instead
/// of the transform's ~20: the keys of 10M points to all 21 levels took 221 us instead of 372
/// (ncu, H200; 14 levels 277), bench/results/2026-11-30-round36.md.
// Written once for the host's copy and the device's.
// clang-format off
#define PCNN_HILBERT_MACHINE \
  { \
    8, 17, 27, 2, 39, 46, 52, 5, \
    56, 71, 73, 86, 91, 20, 10, 13, \
    48, 1, 103, 110, 115, 18, 12, 21, \
    126, 129, 29, 26, 79, 80, 140, 3, \
    148, 43, 37, 34, 127, 128, 78, 81, \
    156, 45, 35, 42, 31, 6, 160, 105, \
    72, 87, 139, 4, 57, 70, 50, 53, \
    0, 171, 111, 76, 49, 58, 102, 61, \
    180, 143, 83, 184, 69, 54, 66, 97, \
    16, 123, 9, 74, 47, 60, 38, 77, \
    132, 95, 85, 14, 67, 144, 82, 33, \
    142, 55, 185, 96, 93, 116, 90, 11, \
    188, 107, 175, 176, 101, 98, 62, 65, \
    164, 109, 119, 22, 99, 106, 152, 41, \
    174, 177, 63, 64, 117, 114, 92, 19, \
    30, 125, 161, 122, 7, 172, 104, 75, \
    130, 25, 133, 166, 179, 136, 84, 191, \
    94, 15, 141, 28, 145, 32, 138, 51, \
    146, 155, 149, 36, 137, 24, 190, 167, \
    154, 157, 147, 44, 169, 182, 120, 135, \
    162, 165, 121, 134, 187, 108, 168, 183, \
    118, 173, 23, 124, 153, 170, 40, 59, \
    178, 113, 131, 88, 181, 158, 68, 151, \
    186, 163, 89, 112, 189, 100, 150, 159 \
  }
alignas(128) inline constexpr std::uint8_t kHilbertMachine[192] = PCNN_HILBERT_MACHINE;
alignas(128) static __device__ const std::uint8_t kHilbertMachineOnDevice[192] = PCNN_HILBERT_MACHINE;
#undef PCNN_HILBERT_MACHINE
// clang-format on

/// The Hilbert index of the grid point (x, y, z), each of `levels` bits (1 to kCurveBits): 3 ×
/// `levels` bits, the coarsest level's 3 bits on top. The top 3L bits depend on the top L bits of
/// each coordinate alone, so the key of the coordinates' top L bits is the full key's top 3L
/// bits: a key truncated to fewer levels orders the points as the full key's prefix does.
__host__ __device__ __forceinline__ std::uint64_t hilbert_index(std::uint32_t x, std::uint32_t y,
                                                                std::uint32_t z, int levels) {
#ifdef __CUDA_ARCH__
  const std::uint8_t* machine = kHilbertMachineOnDevice;
#else
  const std::uint8_t* machine = kHilbertMachine;
#endif
  const std::uint64_t octants = expand_bits21(x) << 2 | expand_bits21(y) << 1 | expand_bits21(z);
  std::uint64_t key = 0;
  unsigned entry = 0;  // state 0 at the top
  for (int shift = 3 * (levels - 1); shift >= 0; shift -= 3) {
    entry = machine[(entry & ~7u) | static_cast<unsigned>((octants >> shift) & 7)];
    key = key << 3 | (entry & 7);
  }
  return key;
}

/// Whether keys `a` and `b` are equal in their bits from `low_bit` up: one bucket of a sort on
/// those bits (the index's keys keep the bits below).
__host__ __device__ __forceinline__ bool same_bucket(std::uint64_t a, std::uint64_t b,
                                                     int low_bit) {
  return ((a ^ b) >> low_bit) == 0;
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
