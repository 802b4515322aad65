// Sorting a radius row: its neighbors, written by the fill walk as 64-bit keys (float bits of the
// exact squared distance, then the index: radius_tree.cuh), put in (distance, index) order and
// written as (index, distance).
//
// A row of up to kWarpRow keys is sorted by a warp in registers: right after the fill walk, from
// the collect pass's scratch (radius.cu), or in the hybrid's collect walk, which writes only the
// row's first max_nn (knn_tree.cu); longer radius rows are sorted by radius.cu's kernels (up to 128
// by 32-bit keys four a lane where those order the row, else and up to 256 by cub::WarpMergeSort:
// those of the collect pass's scratch where they are collected, the fill's after it; a segmented
// sort above). Keys with equal float distances come out by index, but their exact distances may
// differ below float resolution: order_ties then puts each such run in (exact distance, index)
// order, as the contract and the CPU backend have it. A row sorted by its 32-bit keys has no
// such run: distinct truncated distances come from distinct float ones.
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
template <class T>
__device__ __forceinline__ T bitonic_merge(T v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int stride = 16; stride > 0; stride >>= 1) {
    const T other = shfl_xor(v, stride);
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

/// A row entry's 32-bit sort key (sort_row_keys_short): its distance's bits with the `mask` bits
/// cleared, then its position in the row in those bits. Distances are finite and non-negative, so
/// their bits, truncated or not, order as they do; a missing key (~0) sorts last.
__device__ __forceinline__ unsigned short_key(std::uint64_t key, int position, unsigned mask) {
  return (static_cast<unsigned>(key >> 32) & ~mask) | static_cast<unsigned>(position);
}

/// sort_row_keys' way for rows whose distances differ in their bits above the lowest 5 (rows of up
/// to 32) or 6 (up to 64): a sort of 32-bit keys (short_key), one shuffle a step where the 64-bit
/// keys take two and twice the compares, then each whole key fetched from its position. Where no
/// two of the row's entries share a truncated distance, the truncated order is the distances'
/// order (truncation keeps order, and distinct truncations come from distinct distances), so the
/// row comes out as the 64-bit sort leaves it. Where two do (exact ties among them: lattices,
/// duplicates), it returns false with the row untouched, for the 64-bit sort. Every lane must call
/// it.
__device__ __forceinline__ bool sort_row_keys_short(WarpRow& row) {
  const int lane = threadIdx.x & 31;
  const bool two = row.m > 32;  // the same in every lane
  const unsigned mask = two ? 63u : 31u;
  unsigned lo = warp_sort(short_key(row.lo, lane, mask)), hi = ~0u;
  if (two) {
    const unsigned h =
        __shfl_sync(kFullMask, warp_sort(short_key(row.hi, lane + 32, mask)), 31 - lane);
    const unsigned a = min(lo, h), b = max(lo, h);  // as in the 64-bit sort below
    lo = bitonic_merge(a);
    hi = bitonic_merge(b);
  }
  // Sorted entry p against entry p - 1, p < m, by truncated distance.
  const unsigned t_lo = lo & ~mask, t_hi = hi & ~mask;
  const unsigned before_lo = __shfl_up_sync(kFullMask, t_lo, 1);
  const unsigned last_lo = __shfl_sync(kFullMask, t_lo, 31);
  const unsigned up_hi = __shfl_up_sync(kFullMask, t_hi, 1);
  const unsigned before_hi = lane == 0 ? last_lo : up_hi;
  const bool tie =
      (lane > 0 && lane < row.m && t_lo == before_lo) || (lane + 32 < row.m && t_hi == before_hi);
  if (__any_sync(kFullMask, tie)) return false;
  // The whole keys, from their positions (past m: missing keys, ~0, from missing places).
  const int from_lo = static_cast<int>(lo & mask), from_hi = static_cast<int>(hi & mask);
  const std::uint64_t lo_of_lo = __shfl_sync(kFullMask, row.lo, from_lo & 31);
  if (!two) {
    row.lo = lo_of_lo;
    return true;
  }
  const std::uint64_t lo_of_hi = __shfl_sync(kFullMask, row.hi, from_lo & 31);
  const std::uint64_t hi_of_lo = __shfl_sync(kFullMask, row.lo, from_hi & 31);
  const std::uint64_t hi_of_hi = __shfl_sync(kFullMask, row.hi, from_hi & 31);
  row.lo = from_lo < 32 ? lo_of_lo : lo_of_hi;
  row.hi = from_hi < 32 ? hi_of_lo : hi_of_hi;
  return true;
}

/// Sorts a loaded row in place (entry `lane` in lo, `lane + 32` in hi) by its 64-bit keys. Every
/// lane must call it.
__device__ __forceinline__ void sort_row_keys_wide(WarpRow& row) {
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

/// Sorts a loaded row in place: by 32-bit keys where they order it (sort_row_keys_short), else
/// by the 64-bit keys. Returns, in every lane, whether the 32-bit keys did: then no two of its
/// entries share a float distance. Every lane must call it.
__device__ __forceinline__ bool sort_row_keys(WarpRow& row) {
  if (sort_row_keys_short(row)) return true;
  sort_row_keys_wide(row);
  return false;
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
/// every lane, whether two of its entries share a float distance (order_ties is then due: never
/// where the 32-bit keys sorted it, whose truncated distances all differ). Every lane must call
/// it.
__device__ __forceinline__ bool sort_warp_row(WarpRow row, std::int32_t* __restrict__ idx,
                                              float* __restrict__ dist) {
  const int lane = threadIdx.x & 31, m = row.m;
  const bool distinct = sort_row_keys(row);
  const std::int64_t to = row.to;
  if (lane < m) split_key(row.lo, idx + to + lane, dist + to + lane);
  if (lane + 32 < m) split_key(row.hi, idx + to + lane + 32, dist + to + lane + 32);
  return !distinct && row_has_ties(row, m);
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
