// Exact radius search over the spatial index: a count pass, then a fill pass, then rows sorted.
//
// radius_walk: one warp per 32 consecutive queries in curve order, as in the kNN search,
// but with the radius known up front there is no list to keep: the warp walks the box hierarchy
// opening nodes that come within r of the box around its queries, and scans a cell (staged once
// in shared memory) when it comes within r of any lane's query. The count pass (kFill = false)
// counts each query's neighbors; after a prefix sum the fill pass repeats the walk and writes
// each neighbor as a 64-bit key (float bits of the exact squared distance, then the index), so
// that sorting keys sorts by (distance, index).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "distance.cuh"
#include "finite.cuh"
#include "knn_tree.cuh"
#include "radius_bound.cuh"
#include "spatial_index.cuh"
#include "warp_reduce.cuh"

namespace pcnn::detail {

struct RadiusArgs {
  const float4* queries = nullptr;  // sorted along the curve; w = original index
  int slot_begin = 0, slot_end = 0;
  bool exclude_self = false;
  int query_offset = 0;  // exclude_self: query i is indexed point i + query_offset
  RadiusBound bound;
  std::int64_t* counts = nullptr;             // count pass: per original query index
  const std::int64_t* row_start = nullptr;    // fill pass: where slot s writes, at [s - slot_begin]
  std::uint64_t* keys = nullptr;              // fill pass output
  unsigned long long* evaluations = nullptr;  // lane-point distances computed
};

__device__ __forceinline__ std::uint64_t radius_key(const RadiusBound& bound, float4 q, float4 p) {
  const float d = __double2float_rn(bound.exact(q, p));
  return (static_cast<std::uint64_t>(__float_as_uint(d)) << 32) |
         static_cast<std::uint32_t>(__float_as_int(p.w));
}

/// The walk every fixed-radius search shares, for the warp's 32 queries (lane = query). The
/// sink decides what a hit is: `limit()` is the lane's current float threshold (r² from above,
/// or less once a bounded list is full) and `hit(p, d)` gets each staged point with
/// d = point_dist2(q, p) <= limit(). Returns the lane's distance evaluations.
template <class Sink>
__device__ __forceinline__ unsigned long long radius_walk(const TreeView& t, float4 q, bool active,
                                                          float reach, float4* stage, int* stack,
                                                          Sink& sink) {
  const int lane = threadIdx.x & 31;
  unsigned long long evals = 0;
  if (!__any_sync(kFullMask, active)) return 0;
  const float4 glo =
      make_float4(warp_min(active ? q.x : INFINITY), warp_min(active ? q.y : INFINITY),
                  warp_min(active ? q.z : INFINITY), 0.f);
  const float4 ghi =
      make_float4(warp_max(active ? q.x : -INFINITY), warp_max(active ? q.y : -INFINITY),
                  warp_max(active ? q.z : -INFINITY), 0.f);
  int sp = 0;
  unsigned pending = 0;  // cells of the current level-1 node still to visit, as lane bits
  int pending_first = 0;
  float4 cell_lo = make_float4(0.f, 0.f, 0.f, 0.f), cell_hi = cell_lo;

  // Children [first_child, first_child + n) at `level` that come within r of the warp's box.
  auto open_children = [&](int level, int first_child, int n) {
    bool pass = false;
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    if (lane < n) {
      const int at = t.level_offset[level] + first_child + lane;
      lo = t.box_lo[at];
      hi = t.box_hi[at];
      pass = box_gap2(lo, hi, glo, ghi) <= reach;
    }
    const unsigned mask = __ballot_sync(kFullMask, pass);
    if (level == 0) {
      pending = mask;
      pending_first = first_child;
      cell_lo = lo;
      cell_hi = hi;
      return;
    }
    if (pass)
      stack[sp + __popc(mask & ((1u << lane) - 1))] = encode_node(level, first_child + lane);
    __syncwarp();
    sp += __popc(mask);
  };

  open_children(t.levels - 1, 0, t.level_count[t.levels - 1]);
  for (;;) {
    while (pending) {
      const int j = __ffs(pending) - 1;
      pending &= pending - 1;
      const float4 lo =
          make_float4(__shfl_sync(kFullMask, cell_lo.x, j), __shfl_sync(kFullMask, cell_lo.y, j),
                      __shfl_sync(kFullMask, cell_lo.z, j), 0.f);
      const float4 hi =
          make_float4(__shfl_sync(kFullMask, cell_hi.x, j), __shfl_sync(kFullMask, cell_hi.y, j),
                      __shfl_sync(kFullMask, cell_hi.z, j), 0.f);
      const bool near = active && may_reach(box_dist2(q, lo, hi), sink.limit());
      if (!__any_sync(kFullMask, near)) continue;
      const int i = (pending_first + j) * kCell + lane;
      __syncwarp();
      // Past the last point: NaN, which no limit admits (an infinite reach admits +inf).
      stage[lane] = i < t.n ? t.points[i] : make_float4(NAN, NAN, NAN, __int_as_float(INT_MAX));
      __syncwarp();
      if (near) {
        evals += kCell;
        const float limit = sink.limit();
        unsigned hits = 0;
#pragma unroll
        for (int m = 0; m < kCell; ++m) hits |= (point_dist2(q, stage[m]) <= limit ? 1u : 0u) << m;
        while (hits) {
          const int m = __ffs(hits) - 1;
          hits &= hits - 1;
          sink.hit(stage[m], point_dist2(q, stage[m]));
        }
      }
    }
    if (sp == 0) break;
    const int e = stack[--sp];
    __syncwarp();  // every lane has read the entry before any lane pushes over it
    const int level = node_level(e), index = node_index(e);
    const int at = t.level_offset[level] + index;
    const bool want = active && may_reach(box_dist2(q, t.box_lo[at], t.box_hi[at]), sink.limit());
    if (!__any_sync(kFullMask, want)) continue;
    const int first_child = index * kFanout;
    open_children(level - 1, first_child, min(kFanout, t.level_count[level - 1] - first_child));
  }
  return evals;
}

/// Radius search: counts (kFill false) or writes keys (kFill true) of every point within r.
template <bool kFill>
struct RadiusSink {
  float4 q;
  int self;
  RadiusBound bound;
  std::uint64_t* out;
  std::int64_t count = 0;
  __device__ float limit() const { return bound.upper; }
  __device__ void hit(float4 p, float d) {
    if (__float_as_int(p.w) == self || !bound.contains(q, p, d)) return;
    if (kFill) out[count] = radius_key(bound, q, p);
    ++count;
  }
};

/// The warp's place: its queries are the slots [first, first + 32) of [slot_begin, slot_end).
struct WarpQueries {
  int slot;
  float4 q;
  int qid;
  bool in_range, active;
  template <class Args>
  __device__ WarpQueries(const TreeView& t, const Args& a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    slot = a.slot_begin + (blockIdx.x * kTreeWarps + warp) * 32 + lane;
    in_range = slot < a.slot_end;
    q = in_range ? a.queries[slot] : make_float4(NAN, NAN, NAN, 0.f);
    qid = __float_as_int(q.w);
    active = in_range && finite3(q.x, q.y, q.z) && t.levels > 0;
  }
};

template <bool kFill>
__global__ void __launch_bounds__(kTreeWarps * 32) radius_tree_kernel(TreeView t, RadiusArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kCell];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (a.slot_begin + (blockIdx.x * kTreeWarps + warp) * 32 >= a.slot_end) return;  // whole warps
  const WarpQueries w(t, a);
  RadiusSink<kFill> sink{w.q, a.exclude_self ? w.qid + a.query_offset : -1, a.bound, nullptr};
  if (kFill && w.in_range) sink.out = a.keys + a.row_start[w.slot - a.slot_begin];
  unsigned long long evals = radius_walk(t, w.q, w.active, a.bound.upper * kPruneSlack,
                                         stage_all[warp], stack_all[warp], sink);
  if (!kFill && w.in_range) a.counts[w.qid] = sink.count;
  if (!kFill) {
    evals = warp_all_reduce(evals, SumOp{});
    if (lane == 0 && evals) atomicAdd(a.evaluations, evals);
  }
}

/// Hybrid search: the k nearest among the points within r, by (float distance, index) as in
/// the kNN search. The list (shared memory) is filled in arrival order, with no sorting, until
/// it holds k; then it is made a max-heap, a better point replaces the worst (the root) in
/// O(log k), and the lane's threshold drops to the worst distance. Sorted once at the end.
template <int CAP>
struct NearestSink {
  float4 q;
  int self;
  RadiusBound bound;
  SharedSlots s;
  int k;
  int count = 0;

  static __device__ bool after(float da, int ia, float db, int ib) {
    return da > db || (da == db && ia > ib);
  }
  __device__ float limit() const { return count < k ? bound.upper : s.d(0); }
  // Restores the heap below position i (children 2i+1, 2i+2) for an entry (d, id) placed there.
  __device__ void sift_down(int i, float d, int id) {
    for (;;) {
      int c = 2 * i + 1;
      if (c >= k) break;
      if (c + 1 < k && after(s.d(c + 1), s.id(c + 1), s.d(c), s.id(c))) ++c;
      if (!after(s.d(c), s.id(c), d, id)) break;
      s.d(i) = s.d(c);
      s.id(i) = s.id(c);
      i = c;
    }
    s.d(i) = d;
    s.id(i) = id;
  }
  __device__ void hit(float4 p, float d) {
    const int id = __float_as_int(p.w);
    if (id == self) return;
    if (count == k && !after(s.d(0), s.id(0), d, id)) return;
    if (!bound.contains(q, p, d)) return;
    if (count < k) {
      s.d(count) = d;
      s.id(count) = id;
      if (++count == k)
        for (int i = k / 2 - 1; i >= 0; --i) sift_down(i, s.d(i), s.id(i));
      return;
    }
    sift_down(0, d, id);
  }
  /// Sorts the list by (distance, index) and writes the k entries, -1 / +inf padded.
  __device__ void write(std::int32_t* out_idx, float* out_dist) {
    for (int i = 1; i < count; ++i) {
      const float d = s.d(i);
      const int id = s.id(i);
      int j = i;
      for (; j > 0 && (s.d(j - 1) > d || (s.d(j - 1) == d && s.id(j - 1) > id)); --j) {
        s.d(j) = s.d(j - 1);
        s.id(j) = s.id(j - 1);
      }
      s.d(j) = d;
      s.id(j) = id;
    }
    for (int i = 0; i < k; ++i) {
      out_idx[i] = i < count ? s.id(i) : -1;
      out_dist[i] = i < count ? s.d(i) : INFINITY;
    }
  }
};

template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32) hybrid_tree_kernel(TreeView t, TreeKnnArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kCell];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  extern __shared__ float lists[];  // CAP distances, then CAP ids, per thread
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (a.slot_begin + (blockIdx.x * kTreeWarps + warp) * 32 >= a.slot_end) return;  // whole warps
  const WarpQueries w(t, a);
  NearestSink<CAP> sink{
      w.q,
      a.exclude_self ? w.qid + a.query_offset : -1,
      a.bound,
      {lists + threadIdx.x, reinterpret_cast<int*>(lists + CAP * blockDim.x) + threadIdx.x,
       static_cast<int>(blockDim.x)},
      a.k};
  unsigned long long evals = radius_walk(t, w.q, w.active, a.bound.upper * kPruneSlack,
                                         stage_all[warp], stack_all[warp], sink);
  if (w.in_range) {
    const std::size_t row = a.row(w.slot, w.qid);
    sink.write(a.out_idx + row, a.out_dist + row);
  }
  evals = warp_all_reduce(evals, SumOp{});
  if (lane == 0 && evals) atomicAdd(a.evaluations, evals);
}

}  // namespace pcnn::detail
