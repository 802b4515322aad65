// Sorting a radius row: its neighbors, written by the fill walk as 64-bit keys (float bits of the
// exact squared distance, then the index: radius_tree.cuh), put in (distance, index) order and
// written as (index, distance).
//
// A row of up to kWarpRow keys is sorted by a warp in registers: right after the fill walk, from
// the collect pass's scratch (radius.cu), or in the hybrid's collect walk, which writes only the
// row's first max_nn (knn_tree.cu); longer radius rows are listed for radius.cu's kernels
// (cub::WarpMergeSort up to 256, a segmented sort above). Keys with equal float distances come out
// by index, but their exact distances may differ below float resolution: order_ties then puts each
// such run in (exact distance, index) order, as the contract and the CPU backend have it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exact.cuh"
#include "warp_reduce.cuh"
#include "warp_sort.cuh"

namespace pcnn::detail {

inline constexpr int kWarpRow = 64;  // sorted by its warp after the fill walk, two keys a lane

__device__ __forceinline__ void split_key(std::uint64_t key, std::int32_t* idx, float* dist) {
  *idx = static_cast<std::int32_t>(key & 0xffffffffu);
  *dist = __uint_as_float(static_cast<unsigned>(key >> 32));
}

/// The second half of a bitonic sort: the warp's 32 values, a bitonic sequence across the lanes,
/// in ascending order.
__device__ __forceinline__ std::uint64_t bitonic_merge(std::uint64_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int stride = 16; stride > 0; stride >>= 1) {
    const std::uint64_t other = shfl_xor(v, stride);
    v = (lane & stride) == 0 ? min(v, other) : max(v, other);
  }
  return v;
}

/// A row of m <= kWarpRow keys as the warp holds it: key `lane` in lo, key `lane + 32` in hi, ~0
/// past the end (sorts last: a NaN distance, which no neighbor has); written at [to, to + m).
struct WarpRow {
  std::uint64_t lo = ~0ull, hi = ~0ull;
  int m = 0;
  std::int64_t to = 0;
};

/// Loads the row of m keys at keys[from, from + m), to be written at `to`; nothing where m is 0
/// or above kWarpRow (m the same in every lane).
__device__ __forceinline__ WarpRow load_warp_row(int m, std::int64_t from, std::int64_t to,
                                                 const std::uint64_t* __restrict__ keys) {
  const int lane = threadIdx.x & 31;
  WarpRow r;
  r.m = m;
  r.to = to;
  if (m > kWarpRow) return r;
  if (lane < m) r.lo = keys[from + lane];
  if (lane + 32 < m) r.hi = keys[from + lane + 32];
  return r;
}

/// Sorts a loaded row in place (entry `lane` in lo, `lane + 32` in hi). Every lane must call it.
__device__ __forceinline__ void sort_row_keys(WarpRow& row) {
  const int lane = threadIdx.x & 31;
  row.lo = warp_sort(row.lo);
  if (row.m > 32) {
    // Two sorted halves: lo[i] against hi[31 - i] leaves the 32 smallest in lo and the rest in
    // hi, each a bitonic sequence.
    const std::uint64_t hi = __shfl_sync(kFullMask, warp_sort(row.hi), 31 - lane);
    const std::uint64_t a = min(row.lo, hi), b = max(row.lo, hi);
    row.lo = bitonic_merge(a);
    row.hi = bitonic_merge(b);
  }
}

/// Whether two of the first `m` entries of a sorted row share a float distance (order_ties is
/// then due for them). Every lane must call it, with the same `m`.
__device__ __forceinline__ bool row_has_ties(const WarpRow& row, int m) {
  const int lane = threadIdx.x & 31;
  // Entry p against entry p - 1, by their distance bits.
  const unsigned d_lo = static_cast<unsigned>(row.lo >> 32),
                 d_hi = static_cast<unsigned>(row.hi >> 32);
  // Every lane takes part in every shuffle: a shuffle in one branch of a lane-dependent
  // condition would name lanes that do not execute it (a tie across entries 31 and 32 went
  // unseen, 1 row in 1M, H100).
  const unsigned before_lo = __shfl_up_sync(kFullMask, d_lo, 1);
  const unsigned last_lo = __shfl_sync(kFullMask, d_lo, 31);
  const unsigned up_hi = __shfl_up_sync(kFullMask, d_hi, 1);
  const unsigned before_hi = lane == 0 ? last_lo : up_hi;
  const bool tie =
      (lane > 0 && lane < m && d_lo == before_lo) || (lane + 32 < m && d_hi == before_hi);
  return __any_sync(kFullMask, tie);
}

/// Sorts a loaded row and writes it as (index, distance) at idx/dist[to, to + m). Returns, in
/// every lane, whether two of its entries share a float distance (order_ties is then due). Every
/// lane must call it.
__device__ __forceinline__ bool sort_warp_row(WarpRow row, std::int32_t* __restrict__ idx,
                                              float* __restrict__ dist) {
  const int lane = threadIdx.x & 31, m = row.m;
  sort_row_keys(row);
  const std::int64_t to = row.to;
  if (lane < m) split_key(row.lo, idx + to + lane, dist + to + lane);
  if (lane + 32 < m) split_key(row.hi, idx + to + lane + 32, dist + to + lane + 32);
  return row_has_ties(row, m);
}

/// The warp's 32 rows, one after the other: `load(r)` loads row r (load_warp_row), the next one
/// before the current one is handled (the keys were just written: an L2 round trip a row), and
/// `handle(r, row)` sorts and writes it, returning whether order_ties is due for it. Returns
/// those rows as lane bits. Every lane must call it.
template <class Load, class Handle>
__device__ __forceinline__ unsigned for_each_warp_row(Load load, Handle handle) {
  unsigned ties = 0;
  WarpRow row = load(0);
  for (int r = 0; r < 32; ++r) {
    const WarpRow next = r < 31 ? load(r + 1) : WarpRow{};
    if (handle(r, row)) ties |= 1u << r;
    row = next;
  }
  return ties;
}

/// Puts each run of equal float distances of a row sorted by (float distance, index) (m entries
/// at idx/dist) in (exact distance, index) order, for the query `q` as stored. Runs are short and
/// rare, except on exact ties, where the exact distances are equal too and the check is one
/// linear pass.
__device__ __forceinline__ void order_ties(double3 q, const ExactCoords& refs,
                                           std::int32_t* __restrict__ idx,
                                           const float* __restrict__ dist, std::int64_t m) {
  for (std::int64_t a = 0; a < m;) {
    std::int64_t b = a + 1;
    while (b < m && dist[b] == dist[a]) ++b;
    // Insertion sort by (exact distance, index); already in order for exact ties.
    for (std::int64_t i = a + 1; i < b; ++i) {
      const std::int32_t id = idx[i];
      const double d = exact_sqdist(q, refs.at(id));
      std::int64_t j = i;
      while (j > a) {
        const double pd = exact_sqdist(q, refs.at(idx[j - 1]));
        if (pd < d || (pd == d && idx[j - 1] < id)) break;
        idx[j] = idx[j - 1];
        --j;
      }
      idx[j] = id;
    }
    a = b;
  }
}

}  // namespace pcnn::detail
