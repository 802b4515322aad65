// Sorting one value (or key and value) per lane across a warp.
//
// A bitonic network through shuffles: 15 compare-exchange steps, all in registers, no shared
// memory and no barrier. cub::WarpMergeSort with one item per lane would take 5 merge rounds
// through shared memory instead, each with two __syncwarp, a stored key, a binary search
// (1 to 5 dependent pairs of shared loads) and a merge step: about 50 dependent shared-memory
// accesses against 15 shuffles, and a TempStorage per warp. It fits where each lane holds
// several keys (radius.cu's medium rows), not here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "warp_reduce.cuh"

namespace pcnn::detail {

__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}
__device__ __forceinline__ int shfl_xor(int v, int mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}
__device__ __forceinline__ unsigned shfl_xor(unsigned v, int mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}
__device__ __forceinline__ std::uint64_t shfl_xor(std::uint64_t v, int mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}

/// The 15 compare-exchange steps of the network: step(stride, keep_first) exchanges this lane's
/// value with lane ^ stride's, keeping the first of the two (in sort order) where `keep_first`
/// (this lane's position is the lower one of an ascending run or the upper one of a descending
/// run), else the second. Every lane must call it.
template <class Step>
__device__ __forceinline__ void bitonic_network(Step step) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size / 2; stride > 0; stride >>= 1)
      step(stride, ((lane & stride) == 0) == ((lane & size) == 0));
  }
}

/// The warp's 32 values (float, int, unsigned or 64-bit unsigned) in ascending order: lane i
/// returns the i-th. min/max keep it branch-free (one instruction each for floats).
template <class T>
__device__ __forceinline__ T warp_sort(T v) {
  bitonic_network([&](int stride, bool keep_first) {
    const T other = shfl_xor(v, stride);
    v = keep_first ? min(v, other) : max(v, other);
  });
  return v;
}

/// The warp's 32 * kItems values (an integer type) in ascending order, kItems a lane, striped:
/// entry e = i * 32 + lane in v[i], before and after. A bitonic network whose strides under 32 are
/// shuffles and whose longer ones are exchanges between a lane's own registers. Every lane must
/// call it.
template <int kItems, class T>
__device__ __forceinline__ void warp_sort_striped(T (&v)[kItems]) {
  static_assert(kItems >= 1 && (kItems & (kItems - 1)) == 0, "a power of two");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int size = 2; size <= 32 * kItems; size <<= 1) {
#pragma unroll
    for (int stride = size / 2; stride > 0; stride >>= 1) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const bool ascending = ((i * 32 + lane) & size) == 0;
        if (stride >= 32) {
          const int j = i ^ (stride / 32);
          if (j < i) continue;  // the pair is handled from its lower entry
          const T lo = min(v[i], v[j]), hi = max(v[i], v[j]);
          v[i] = ascending ? lo : hi;
          v[j] = ascending ? hi : lo;
        } else {
          const T other = shfl_xor(v[i], stride);
          v[i] = ascending == ((lane & stride) == 0) ? min(v[i], other) : max(v[i], other);
        }
      }
    }
  }
}

/// Sorts the warp's 32 (key, value) pairs by key in `before` order (a strict weak order): lane i
/// ends with the i-th. A lane keeps its own pair where the keys are equivalent.
template <class K, class V, class Before>
__device__ __forceinline__ void warp_sort_by_key(K& key, V& value, Before before) {
  bitonic_network([&](int stride, bool keep_first) {
    const K other_key = shfl_xor(key, stride);
    const V other_value = shfl_xor(value, stride);
    if (keep_first ? before(other_key, key) : before(key, other_key)) {
      key = other_key;
      value = other_value;
    }
  });
}

}  // namespace pcnn::detail
