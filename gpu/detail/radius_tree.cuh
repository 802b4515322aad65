// Exact radius search over the spatial index: a count pass, then a fill pass, then rows sorted
// (radius.cu); and the hybrid search, the k nearest within r. Result policies of the tree walk
// (tree_walk.cuh) with a fixed opening reach: r from above.
//
// The count pass counts each query's neighbors; after a prefix sum the fill pass repeats the walk
// and writes each neighbor as a 64-bit key (float bits of the exact squared distance, then the
// index), so that sorting keys sorts by (distance, index). The fill's warp then sorts its rows
// itself (row_sort.cuh): a separate sort kernel read every key back from memory (0.65 ms of a
// 2.7 ms search at 1M uniform points, 0.85 of 2.4 on the LiDAR-like cloud, H100:
// bench/results/2026-11-27-round13.md).
//
// The collect pass does both walks' work in one where it can (radius.cu: radius_query and
// radius_fill_query): it counts every neighbor and keeps each query's first keys (radius.cu's
// kRadiusCollect, or kCollect where memory is short) in a scratch of fixed rows, sorted into
// place once the counts give the rows' offsets; only rows longer than that are filled by a
// second walk, which skips every other slot.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "knn_tree.cuh"
#include "radius_bound.cuh"
#include "row_sort.cuh"
#include "spatial_index.cuh"
#include "topk.cuh"
#include "tree_walk.cuh"
#include "warp_reduce.cuh"

namespace pcnn::detail {

struct RadiusArgs {
  const float4* queries = nullptr;  // sorted along the curve; w = original index
  int slot_begin = 0, slot_end = 0;
  bool exclude_self = false;
  int query_offset = 0;  // exclude_self: query i is indexed point i + query_offset
  RadiusBound bound;
  std::int64_t* counts = nullptr;  // count, collect: per original query index
  // Fill pass: where slot s writes, at [s - slot_begin] (negative: nowhere, the slot is skipped).
  const std::int64_t* row_start = nullptr;
  // Fill: the keys, at row_start. Collect: `capacity` a slot, at (s - slot_begin) * capacity.
  std::uint64_t* keys = nullptr;
  std::int64_t capacity = INT64_MAX;  // collect: the keys a slot keeps (fill: no bound)
  std::int32_t* idx = nullptr;        // fill pass: the sorted rows, at row_start
  float* dist = nullptr;
  int* listed = nullptr;        // fill pass: rows (slot - slot_begin) longer than kWarpRow ...
  int* listed_count = nullptr;  // ... left to radius.cu's sort, and how many
  // [0]: lane-point distances computed; collect pass, [1]: the rows longer than `capacity`.
  unsigned long long* counters = nullptr;
};

// Keys a query keeps in the hybrid's collect walk (hybrid_collect_kernel: its nearest, cut to
// max_nn whenever a cell's hits would overflow them), and in the radius collect pass where
// memory is too short for radius.cu's kRadiusCollect (radius_query and radius_fill_query: its
// row when it has no more).
inline constexpr int kCollect = kWarpRow;

/// The key of indexed point `p` at exact squared distance `d2` from its query.
__device__ __forceinline__ std::uint64_t radius_key(double d2, float4 p) {
  const float d = __double2float_rn(d2);
  return (static_cast<std::uint64_t>(__float_as_uint(d)) << 32) |
         static_cast<std::uint32_t>(__float_as_int(p.w));
}

/// What a radius kernel does with the neighbors it finds: count them (the count pass), write
/// them at the rows' starts and sort the rows (the fill pass after the count), or collect them
/// up to a fixed number a query, counting them all (the collect pass, which spares a radius
/// search its count pass: radius.cu).
enum class RadiusPass { count, fill, collect };

/// The radius result policy: counts, and writes the keys (up to `cap`) of every point within r.
template <bool kWrite>
struct WithinRadius {
  float4 q;
  double3 qe;  // kWrite: bound.query(q) for an active query
  int self;
  RadiusBound bound;
  std::uint64_t* out;
  // A row holds fewer than 2^31 points: 32-bit counts spare two registers and two instructions
  // a hit.
  int cap;
  int count = 0;
  __device__ float limit() const { return bound.upper; }
  __device__ void hit(float4 p, float d, int) {
    if (__float_as_int(p.w) == self || !bound.contains(q, p, d)) return;
    if (kWrite && count < cap) out[count] = radius_key(exact_sqdist(qe, bound.ref(p)), p);
    ++count;
  }
};

/// After the fill walk: the warp's rows (lane r's: `count` keys from `start`), each sorted by the
/// whole warp when it has at most kWarpRow keys, else listed for radius.cu's sort. The next row
/// is loaded before the current one is sorted (the keys were just written: an L2 round trip a
/// row). The rows with ties are then ordered by their own lanes, side by side. Every lane must
/// call it.
__device__ __forceinline__ void sort_rows(const RadiusArgs& a, const WarpQueries& w,
                                          std::int64_t start, int count) {
  const int lane = threadIdx.x & 31;
  const int first_row = w.slot - lane - a.slot_begin;
  auto load = [&](int r) {
    const std::int64_t s = __shfl_sync(kFullMask, start, r);
    return load_warp_row(__shfl_sync(kFullMask, count, r), s, s, a.keys);
  };
  __syncwarp();  // every lane's keys are written (global memory, ordered within the warp)
  const unsigned ties = for_each_warp_row(load, [&](int r, const WarpRow& row) {
    if (row.m > kWarpRow) {
      if (lane == 0) a.listed[atomicAdd(a.listed_count, 1)] = first_row + r;
      return false;
    }
    return row.m > 0 && sort_warp_row(row, a.idx, a.dist);
  });
  __syncwarp();  // the rows are written
  if (ties >> lane & 1)
    order_ties(a.bound.queries.at(w.qid), a.bound.refs, a.idx + start, a.dist + start, count);
}

template <RadiusPass kPass>
__global__ void __launch_bounds__(kTreeWarps * 32)
    radius_tree_kernel(const __grid_constant__ TreeView t, RadiusArgs a) {
  constexpr bool kFill = kPass == RadiusPass::fill, kCollecting = kPass == RadiusPass::collect;
  __shared__ float4 stage_all[kTreeWarps][kStage];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  if (!warp_has_queries(a)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const WarpQueries w(t, a);
  constexpr bool kWrite = kFill || kCollecting;
  WithinRadius<kWrite> sink{w.q,
                            kWrite && w.active ? a.bound.query(w.q) : double3{},
                            a.exclude_self ? w.qid + a.query_offset : -1,
                            a.bound,
                            nullptr,
                            static_cast<int>(min(a.capacity, std::int64_t(INT_MAX)))};
  // A fill's slot whose row start is negative has no row to fill: its lane only walks along.
  const std::int64_t start = !w.in_range   ? -1
                             : kFill       ? a.row_start[w.slot - a.slot_begin]
                             : kCollecting ? std::int64_t(w.slot - a.slot_begin) * a.capacity
                                           : 0;
  const bool active = w.active && (!kFill || start >= 0);
  if (kWrite && active) sink.out = a.keys + start;
  const unsigned long long evals = radius_walk<true>(t, w.q, active, a.bound.upper * kPruneSlack,
                                                     stage_all[warp], stack_all[warp], sink);
  if constexpr (kFill) {
    sort_rows(a, w, start, sink.count);
  } else {
    if (w.in_range) a.counts[w.qid] = sink.count;
    const unsigned long long warp_evals = warp_all_reduce(evals, SumOp{});
    if (lane == 0 && warp_evals) atomicAdd(a.counters, warp_evals);
    if constexpr (kCollecting) {  // the rows collected_sort_kernel leaves: counts over capacity
      const unsigned over = __ballot_sync(kFullMask, w.in_range && sink.count > a.capacity);
      if (lane == 0 && over)
        atomicAdd(a.counters + 1, static_cast<unsigned long long>(__popc(over)));
    }
  }
}

/// The hybrid result policy: the k nearest among the points within r, by (float distance,
/// position in the index) as in the kNN search. The list (shared memory) is HeapTopK's: filled in
/// arrival order until it holds k, then a max-heap whose root a better point replaces in
/// O(log k); the lane's threshold is r's, then widen(the worst distance) below it. Sorted once
/// at the end, then settled exactly (refine.cuh; `spill` as TopK's).
template <int CAP>
struct NearestHeap {
  float4 q;
  int self;
  const RadiusBound& bound;
  float term;  // FilterError::widen_term()
  HeapTopK<CAP, SharedSlots> list;

  __device__ NearestHeap(float4 q_, int self_, const RadiusBound& bound_, float term_,
                         SharedSlots s, int k)
      : q(q_), self(self_), bound(bound_), term(term_) {
    list.s = s;
    list.init(k);
    list.limit = bound.upper;  // the heap's limits only lower it
  }
  __device__ float limit() const { return list.limit; }
  __device__ void hit(float4 p, float d, int id) {
    if (__float_as_int(p.w) == self || !bound.contains(q, p, d)) return;
    list.offer(d, id, term);
  }
};

/// Sorts every lane's list of up to 32 entries (`count` each, `s` as thread_list<CAP, true>
/// gives it) by (distance, position), one list at a time by the whole warp: entry j in lane j,
/// packed as a 64-bit key (list_key: the distance's bits, non-negative floats, then the position)
/// and sorted through shuffles. Alone, each lane ran an insertion sort in shared memory: 20 % of
/// the hybrid kernel's stalls at 1M uniform points, with 15 of 32 threads active (ncu source
/// counters, bench/results/2026-11-27-round14.md). Every lane must call it.
__device__ __forceinline__ void sort_lists(const SharedSlots& s, int count) {
  const int lane = threadIdx.x & 31;
  __syncwarp();  // every lane's last entries are written before another lane reads them
  for (int r = 0; r < 32; ++r) {
    const int m = __shfl_sync(kFullMask, count, r);
    if (m < 2) continue;
    SharedSlots list = s;  // lane r's
    list.d_ += r - lane;
    list.id_ += r - lane;
    std::uint64_t key = ~0ull;
    if (lane < m) key = list.key(lane);
    key = warp_sort(key);
    if (lane < m) list.set_key(lane, key);
  }
  __syncwarp();  // every list is written before its lane reads it
}

template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32)
    hybrid_tree_kernel(const __grid_constant__ TreeView t, TreeKnnArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kStage];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  if (!warp_has_queries(a)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const WarpQueries w(t, a);
  // After the collect walk, only the rows it could not hold.
  const bool mine = !a.collected || (w.in_range && a.collected[w.slot - a.slot_begin] > kCollect);
  if (a.collected && !__any_sync(kFullMask, mine)) return;
  NearestHeap<CAP> sink(w.q, a.exclude_self ? w.qid + a.query_offset : -1, a.bound, a.exact.term,
                        thread_list<CAP, (CAP <= 32)>(), a.k);
  unsigned long long evals = radius_walk(t, w.q, w.active && mine, a.bound.upper * kPruneSlack,
                                         stage_all[warp], stack_all[warp], sink);
  bool flagged = false;
  float reach = 0.f;
  auto& best = sink.list;
  if constexpr (CAP <= 32) sort_lists(best.s, best.count());
  if (w.in_range && mine) {
    const auto o = a.out(w.slot, w.qid);
    if constexpr (CAP > 32) best.finish();
    flagged = !settle_row<CAP>(best.s, best.count(), a.k, best.spill, a.exact.query(w.q, w.qid),
                               a.exact, o.idx, o.dist, reach);
  }
  flag_rows(a.exact, a.slot_begin, w.slot - lane, flagged, reach);
  evals = warp_all_reduce(evals, SumOp{});
  if (lane == 0 && evals) atomicAdd(a.evaluations, evals);
}

/// The largest max_nn the hybrid's collect walk serves: a row cut to it (and its ties) has room
/// left for a cell's hits, mostly.
inline constexpr int kCollectRoom = kCollect - kCell;
static_assert(kCollectRoom <= 32, "make_room and write_hybrid_row keep max_nn keys, one a lane");

/// The hybrid's collect policy (knn_tree.cu's hybrid_collect_kernel): the keys of the points
/// within r, written to the lane's scratch row of kCollect. Before a cell's hits would overflow
/// a row, make_room cuts it back to its nearest and lowers the lane's threshold, as a k-list
/// does, so that a generous radius with max_nn as the real bound is walked as a k-nearest search
/// is. A row whose cut leaves no room for the cell's hits (its k nearest and the keys tied with
/// the k-th in float, with the hits, over kCollect) is `over`: its lane stops (a limit below
/// every distance) and the heap walk takes the row.
struct NearestCollect {
  float4 q;
  int self;
  RadiusBound bound;
  std::uint64_t* out;
  float threshold;  // bound.upper, then lowered by make_room
  int count = 0;
  bool over = false;
  __device__ float limit() const { return over ? -1.f : threshold; }
  __device__ void hit(float4 p, float d, int) {
    // After a cut, hits of the cell beyond the new threshold are no longer wanted.
    if (over || d > threshold || __float_as_int(p.w) == self || !bound.contains(q, p, d)) return;
    if (count < kCollect)
      out[count++] = radius_key(bound.exact(q, p), p);
    else
      over = true;  // make_room left no room: not reached, a guard
  }
};

/// Before a cell's `n` hits are offered: each row of the warp (lane r's at rows + r * kCollect)
/// that they would overflow is sorted by the warp and cut to its k nearest (k <= kCollectRoom)
/// and every key tied with the k-th by float distance. A point it drops has a larger float
/// distance than k kept ones, so a larger exact distance: it is in no row. The lane's threshold
/// becomes the largest filter distance (FilterError::reach) of a point no farther than the k-th
/// kept, whose exact distance is below the next float up from its key's: every point that may
/// still enter the row is offered. Rows only cut when they must: cutting at every cell that
/// might fill one (a row of more than 32) made 1M uniform points' search 2.35 ms instead of 1.70
/// (H100, bench/results/2026-11-27-round15.md). Every lane must call it.
__device__ __forceinline__ void make_room(NearestCollect& c, int n, std::uint64_t* rows, int k,
                                          const FilterError& err) {
  unsigned full = __ballot_sync(kFullMask, !c.over && c.count + n > kCollect);
  if (!full) return;
  const int lane = threadIdx.x & 31;
  __syncwarp();  // every lane's keys are written (global memory, ordered within the warp)
  while (full) {
    const int r = __ffs(full) - 1;
    full &= full - 1;
    WarpRow row =
        load_warp_row(__shfl_sync(kFullMask, c.count, r), std::int64_t(r) * kCollect, 0, rows);
    sort_row_keys(row);
    const unsigned kth = static_cast<unsigned>(__shfl_sync(kFullMask, row.lo, k - 1) >> 32);
    const int keep =
        k +
        __popc(__ballot_sync(
            kFullMask, lane >= k && lane < row.m && static_cast<unsigned>(row.lo >> 32) == kth)) +
        __popc(__ballot_sync(kFullMask,
                             lane + 32 < row.m && static_cast<unsigned>(row.hi >> 32) == kth));
    const bool fits = keep + __shfl_sync(kFullMask, n, r) <= kCollect;
    __syncwarp();  // every lane has loaded the row before it is written over
    if (fits) {
      if (lane < keep) rows[std::int64_t(r) * kCollect + lane] = row.lo;
      if (lane + 32 < keep) rows[std::int64_t(r) * kCollect + lane + 32] = row.hi;
    }
    if (lane == r) {
      if (fits) {
        c.count = keep;
        c.threshold =
            fminf(c.threshold,
                  err.reach(static_cast<double>(nextafterf(__uint_as_float(kth), INFINITY))));
      } else {
        c.over = true;
      }
    }
  }
  __syncwarp();  // the cut rows are written before their lanes add to them
}

/// A hybrid row from its sorted collected keys (`row`, m <= kCollect of them): its first k (<=
/// kCollectRoom) as (index, distance) at idx/dist, -1 / +inf past m. Where two of its first
/// k + 1 entries share a float distance, the whole row goes to `spare` instead (kCollect
/// indices, then kCollect distances: its own scratch row, already loaded), for order_ties;
/// returns whether it did. Every lane must call it.
__device__ __forceinline__ bool write_hybrid_row(const WarpRow& row, int k,
                                                 std::int32_t* __restrict__ idx,
                                                 float* __restrict__ dist,
                                                 std::uint64_t* __restrict__ spare) {
  const int lane = threadIdx.x & 31, m = row.m;
  if (row_has_ties(row, min(m, k + 1))) {
    auto* spare_idx = reinterpret_cast<std::int32_t*>(spare);
    auto* spare_dist = reinterpret_cast<float*>(spare) + kCollect;
    __syncwarp();  // every lane has loaded the row before its keys are overwritten
    if (lane < m) split_key(row.lo, spare_idx + lane, spare_dist + lane);
    if (lane + 32 < m) split_key(row.hi, spare_idx + lane + 32, spare_dist + lane + 32);
    return true;
  }
  if (lane < min(m, k)) {
    split_key(row.lo, idx + lane, dist + lane);
  } else if (lane < k) {
    idx[lane] = -1;
    dist[lane] = INFINITY;
  }
  return false;
}

}  // namespace pcnn::detail
