// The one warp traversal of the spatial index, shared by every tree search (kNN, radius count and
// fill, hybrid, and the exact refinement's gather).
//
// A warp serves up to 32 consecutive queries in curve order (lane = query; spatial neighbors, so
// they want mostly the same cells). CellWalk walks the box hierarchy from the top for the whole
// warp: a node is opened when any lane's sphere (its current limit) may reach the node's box, and
// its children are pushed when they may reach the box around the warp's queries grown by the
// opening reach. It yields cells one at a time, each with the lanes whose query may reach it
// (`near`); a cell is staged once in shared memory and scanned for those lanes only: by rows
// (each lane its own query, broadcast reads) or, where few lanes are near, transposed (lane =
// point, lane_cell_hits). Pruning is conservative (kPruneSlack covers float rounding), so what a
// scan can find does not depend on the order of the cells.
//
// What a hit means is the result policy's business: a policy has `limit()`, the lane's current
// float threshold (it may only shrink), and `hit(p, d, pos)`, called for each staged point p with
// d = point_dist2(q, p) <= limit() (the limit as the cell's scan began: radius_walk's hook may
// lower it before the hits are offered); `pos` is p's position in the index's sorted points. The
// policies are NearestList (knn_tree.cuh), WithinRadius, NearestCollect and NearestHeap
// (radius_tree.cuh) and ExactSink (refine.cuh).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "distance.cuh"
#include "finite.cuh"
#include "spatial_index.cuh"
#include "topk.cuh"
#include "warp_reduce.cuh"
#include "warp_sort.cuh"

namespace pcnn::detail {

inline constexpr int kTreeWarps = 4;    // warps per block
inline constexpr int kTreeStack = 256;  // >= kFanout + (kFanout - 1) * (kMaxLevels - 1)
// Pruning margin: a node is skipped only when its lower bound exceeds the limit by more than
// float rounding could account for.
inline constexpr float kPruneSlack = 1.0f + 1e-5f;

__device__ __forceinline__ int encode_node(int level, int index) { return (level << 26) | index; }
__device__ __forceinline__ int node_level(int e) { return e >> 26; }
__device__ __forceinline__ int node_index(int e) { return e & ((1 << 26) - 1); }

__device__ __forceinline__ float sq(float v) { return v * v; }

/// Squared gap between two boxes (0 when they overlap).
__device__ __forceinline__ float box_gap2(float4 alo, float4 ahi, float4 blo, float4 bhi) {
  return sq(fmaxf(fmaxf(alo.x - bhi.x, blo.x - ahi.x), 0.f)) +
         sq(fmaxf(fmaxf(alo.y - bhi.y, blo.y - ahi.y), 0.f)) +
         sq(fmaxf(fmaxf(alo.z - bhi.z, blo.z - ahi.z), 0.f));
}

__device__ __forceinline__ bool may_reach(float bound2, float limit) {
  return bound2 <= limit * kPruneSlack;
}

/// The lists of a block of tree-search threads in dynamic shared memory: CAP x 8 bytes per
/// thread (CAP distances then CAP ids; the kNN walk's, CAP keys), 128 KiB per block at CAP = 128.
/// Local memory would need no opt-in, but with many warps each holding a long list it is evicted to
/// L2, and a 64-entry insertion then waits on L2 for every shifted entry: measured 12x slower than
/// shared memory at k = 64.
///
/// kPadded (the hybrid's lists of up to 32): entries blockDim.x + 1 words apart instead, so that
/// a warp can also read one lane's whole list at once without bank conflicts (sort_lists).
template <int CAP, bool kPadded = false>
constexpr int tree_list_bytes() {
  return CAP * (kTreeWarps * 32 + (kPadded ? 1 : 0)) * 8;
}
template <int CAP, bool kPadded = false>
__device__ __forceinline__ SharedSlots thread_list() {
  extern __shared__ __align__(16) float lists[];
  const int stride = blockDim.x + (kPadded ? 1 : 0);
  return {lists + threadIdx.x, reinterpret_cast<int*>(lists + CAP * stride) + threadIdx.x, stride};
}
/// The same bytes as keys (KeySlots) at a compile-time stride, for kernels launched with blocks
/// of kTreeWarps warps exactly (not padded).
using TreeSlots = KeySlots<kTreeWarps * 32>;
__device__ __forceinline__ TreeSlots thread_block_list() {
  extern __shared__ __align__(16) float lists[];  // 8-byte keys need 8
  return {reinterpret_cast<std::uint64_t*>(lists) + threadIdx.x};
}

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

/// Whether the warp that this thread belongs to has queries in [slot_begin, slot_end): kernels
/// return whole warps only, so the warp-synchronous code below always runs on full warps.
template <class Args>
__device__ __forceinline__ bool warp_has_queries(const Args& a) {
  return a.slot_begin + (blockIdx.x * kTreeWarps + threadIdx.x / 32) * 32 < a.slot_end;
}

/// The 32 points of a cell, one per lane. Past the last point: NaN, id INT_MAX, which no limit
/// admits (+infinity would pass an infinite limit: a radius of +inf, or a gather whose reach
/// overflowed, and read coordinates past the end by its id).
__device__ __forceinline__ float4 load_cell(const TreeView& t, int cell) {
  const int i = cell * kCell + (threadIdx.x & 31);
  return cell >= 0 && i < t.n ? t.points[i] : make_float4(NAN, NAN, NAN, __int_as_float(INT_MAX));
}

/// A warp's stage in shared memory: the kCell points of a cell, then (in the w word of entry
/// kCell) the position of its first point in the index, which a hit reads only when it happens
/// (held in a register, it would be live across the whole scan).
inline constexpr int kStage = kCell + 1;

/// Puts the warp's loaded cell in its stage, once every lane is done with the previous one.
__device__ __forceinline__ void stage_cell(float4* stage, float4 p, int cell) {
  __syncwarp();
  const int lane = threadIdx.x & 31;
  stage[lane] = p;
  if (lane == 0) stage[kCell].w = __int_as_float(cell * kCell);
  __syncwarp();
}

/// The points of the staged cell within `limit` of query `q`, as a bit mask. The hot loop only
/// computes distances and marks them (no branches, so lanes never wait on each other there);
/// offer_hits then offers the marked points one by one. Hits are rare per lane, but some lane of
/// 32 hits often: a per-point branch would make the whole warp wait on each of them.
__device__ __forceinline__ unsigned cell_hits(const float4* stage, float4 q, float limit) {
  unsigned hits = 0;
#pragma unroll
  for (int j = 0; j < kCell; ++j) hits |= (point_dist2(q, stage[j]) <= limit ? 1u : 0u) << j;
  return hits;
}
template <class Policy>
__device__ __forceinline__ void offer_hits(const float4* stage, float4 q, unsigned hits,
                                           Policy& policy) {
  while (hits) {
    const int j = __ffs(hits) - 1;
    hits &= hits - 1;
    policy.hit(stage[j], point_dist2(q, stage[j]), __float_as_int(stage[kCell].w) + j);
  }
}

/// Up to this many lanes that may reach a cell, the cell is scanned transposed
/// (cell_hits_transposed) rather than by rows (cell_hits). A row scan costs the warp kCell
/// distance passes however few lanes need the cell; the transposed scan costs one pass and four
/// shuffles for each lane that does. Cells beside a warp's own, and a sparse scan's cells in a
/// dense map, are reached by a few lanes each.
inline constexpr int kTransposedLanes = 12;

/// The hits of every lane in `near` (a mask of lanes) in the warp's cell, lane = point: `p` is
/// this lane's point of the cell (what it staged), and each lane of the mask in turn has its
/// query's distance to all 32 points computed at once. The distances are point_dist2 of the same
/// operands as the row scan's, so the two give the same hits. Warp-synchronous.
__device__ __forceinline__ unsigned cell_hits_transposed(float4 p, float4 q, float limit,
                                                         unsigned near) {
  const int lane = threadIdx.x & 31;
  unsigned mine = 0;
  while (near) {
    const int j = __ffs(near) - 1;
    near &= near - 1;
    const float4 qj = make_float4(__shfl_sync(kFullMask, q.x, j), __shfl_sync(kFullMask, q.y, j),
                                  __shfl_sync(kFullMask, q.z, j), 0.f);
    const unsigned hits =
        __ballot_sync(kFullMask, point_dist2(qj, p) <= __shfl_sync(kFullMask, limit, j));
    if (lane == j) mine = hits;
  }
  return mine;
}

/// This lane's hits in the staged cell (`p`: the lane's point of it) where `near` (its query may
/// reach the cell), else none: by rows, or transposed where few lanes are near. Returns how many
/// lanes are near. Warp-synchronous.
__device__ __forceinline__ unsigned lane_cell_hits(const float4* stage, float4 p, float4 q,
                                                   float limit, bool near, int& near_lanes) {
  const unsigned mask = __ballot_sync(kFullMask, near);
  near_lanes = __popc(mask);
  if (near_lanes <= kTransposedLanes) return cell_hits_transposed(p, q, limit, mask);
  return near ? cell_hits(stage, q, limit) : 0u;
}

/// The walk of the box hierarchy for one warp: yields the cells that some lane's query may need,
/// one at a time. Warp-synchronous: every lane makes every call, with its own `q`, `active` and
/// `limit` (the lane's current threshold, which may only shrink between calls).
///
/// kNearest (the k-nearest search, whose lists start wide and shrink as they fill): the reach
/// for opening children is taken from the lanes' current limits at each opening, and the cells
/// [skip_first, skip_last] (the first range: scanned before the walk, or passed over where no
/// lane could reach them with a limit at least as large as the walk's) are never yielded.
/// Otherwise the reach is fixed at start(). kOrdered (by default with kNearest): the cells of a
/// node are yielded nearest the warp's queries first and the children of a node are popped
/// nearest first too (those overlapping the queries' box in curve order), so that the lists
/// settle early; otherwise cells come in the order of the hierarchy.
template <bool kNearest, bool kOrdered = kNearest>
class CellWalk {
 public:
  __device__ __forceinline__ CellWalk(const TreeView& t, int* stack, int skip_first = 0,
                                      int skip_last = -1)
      : t_(t), stack_(stack), skip_first_(skip_first), skip_last_(skip_last) {}

  /// The box around the warp's active queries, then the root's children. At least one lane must
  /// be active. `reach`: the squared opening reach, slack included (unused when kNearest).
  __device__ __forceinline__ void start(float4 q, bool active, float limit, float reach = 0.f) {
    box_lo_ = make_float4(warp_min(active ? q.x : INFINITY), warp_min(active ? q.y : INFINITY),
                          warp_min(active ? q.z : INFINITY), 0.f);
    box_hi_ = make_float4(warp_max(active ? q.x : -INFINITY), warp_max(active ? q.y : -INFINITY),
                          warp_max(active ? q.z : -INFINITY), 0.f);
    reach_ = reach;
    open_children(active, limit, t_.levels - 1, 0, t_.level_count[t_.levels - 1]);
  }

  /// The next cell to scan, or -1 when the walk is over. `near`: whether this lane's query may
  /// reach the cell (false lanes can find nothing in it).
  __device__ __forceinline__ int next(float4 q, bool active, float limit, bool& near) {
    for (;;) {
      while (pending_) {
        const int j = take_pending();
        const float4 lo = shuffle_box(cell_lo_, j), hi = shuffle_box(cell_hi_, j);
        near = active && may_reach(box_dist2(q, lo, hi), limit);
        if (__any_sync(kFullMask, near)) return pending_first_ + j;
      }
      if (sp_ == 0) return -1;
      const int e = stack_[--sp_];
      __syncwarp();  // every lane has read the entry before any lane pushes over it
      const int level = node_level(e), index = node_index(e);
      const int at = t_.level_offset[level] + index;
      const bool want = active && may_reach(box_dist2(q, t_.box_lo[at], t_.box_hi[at]), limit);
      if (!__any_sync(kFullMask, want)) continue;
      const int first_child = index * kFanout;
      open_children(active, limit, level - 1, first_child,
                    min(kFanout, t_.level_count[level - 1] - first_child));
    }
  }
  __device__ __forceinline__ int next(float4 q, bool active, float limit) {
    bool near;
    return next(q, active, limit, near);
  }

 private:
  static __device__ __forceinline__ float4 shuffle_box(float4 v, int lane) {
    return make_float4(__shfl_sync(kFullMask, v.x, lane), __shfl_sync(kFullMask, v.y, lane),
                       __shfl_sync(kFullMask, v.z, lane), 0.f);
  }

  // The lane (of the pending cells) to yield next, removed from `pending_`.
  __device__ __forceinline__ int take_pending() {
    const int lane = threadIdx.x & 31;
    int j;
    if constexpr (kOrdered) {
      const bool mine = pending_ >> lane & 1;
      const float nearest = warp_min(mine ? cell_near_ : INFINITY);
      j = __ffs(__ballot_sync(kFullMask, mine && cell_near_ == nearest)) - 1;
    } else {
      j = __ffs(pending_) - 1;
    }
    pending_ &= ~(1u << j);
    return j;
  }

  // Children [first_child, first_child + count) of a node at level `level` + 1: those whose box
  // may be reached from the warp's queries. Cells become `pending_` bits (lane = child); nodes
  // go on the stack.
  __device__ __forceinline__ void open_children(bool active, float limit, int level,
                                                int first_child, int count) {
    const int lane = threadIdx.x & 31;
    const float reach = kNearest ? warp_max(active ? limit : 0.f) * kPruneSlack : reach_;
    const int c = first_child + lane;
    bool pass = false;
    float gap = 0.f;
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    if (lane < count) {
      const int at = t_.level_offset[level] + c;
      lo = t_.box_lo[at];
      hi = t_.box_hi[at];
      gap = box_gap2(lo, hi, box_lo_, box_hi_);
      pass = gap <= reach && !(kNearest && level == 0 && c >= skip_first_ && c <= skip_last_);
    }
    const unsigned mask = __ballot_sync(kFullMask, pass);
    if (level == 0) {
      pending_ = mask;
      pending_first_ = first_child;
      cell_lo_ = lo;
      cell_hi_ = hi;
      if constexpr (kOrdered) {
        const float4 center =
            make_float4(0.5f * (box_lo_.x + box_hi_.x), 0.5f * (box_lo_.y + box_hi_.y),
                        0.5f * (box_lo_.z + box_hi_.z), 0.f);
        cell_near_ = pass ? box_dist2(center, lo, hi) : INFINITY;
      }
      return;
    }
    const int pushed = __popc(mask), below = __popc(mask & ((1u << lane) - 1));
    if constexpr (kOrdered) {
      // Nearest the warp's queries on top, ties (children overlapping the queries' box) in
      // curve order. In curve order alone, a warp whose first limits were far too wide (queries
      // off the cloud: above a scan, between clusters, whose home cells along the curve lie far
      // away) scanned far nodes before near ones: 100k uniform queries against a 1M-point
      // LiDAR-like cloud evaluated 729 distances a query instead of 434 (2.92-2.99 against
      // 2.62-2.65 ms on an H100; 5k queries 10-50 m above it: 4.50 against 2.53 ms). It gains
      // 5 % on clustered clouds and costs 1M self-searches at k = 1 ~7 %, for a reason not found:
      // sorting only where more than 4 or 8 children pass, a rolled sort (no spills) and one out
      // of line cost the same or more (bench/results/2026-11-28-round18.md); those walk without
      // it (kOrdered false: knn_tree_kernel). The key is the gap's bits with the lane in the low
      // five (finite gaps >= 0 order as ints).
      if (pushed > 1 && __any_sync(kFullMask, pass && gap > 0.f)) {
        const int key = warp_sort(pass ? (__float_as_int(gap) & ~31) | lane : INT_MAX);
        if (lane < pushed)
          stack_[sp_ + pushed - 1 - lane] = encode_node(level, first_child + (key & 31));
        __syncwarp();
        sp_ += pushed;
        return;
      }
    }
    // Reversed for kNearest, so that the lowest child (nearest along the curve) is popped first.
    if (pass) stack_[kNearest ? sp_ + pushed - 1 - below : sp_ + below] = encode_node(level, c);
    __syncwarp();
    sp_ += pushed;
  }

  const TreeView& t_;
  int* stack_;
  int sp_ = 0;
  int skip_first_, skip_last_;
  float reach_ = 0.f;
  float4 box_lo_, box_hi_;  // around the warp's active queries
  unsigned pending_ = 0;    // cells of the current level-1 node still to yield, as lane bits
  int pending_first_ = 0;
  float4 cell_lo_ = make_float4(0.f, 0.f, 0.f, 0.f), cell_hi_ = cell_lo_;  // this lane's cell
  float cell_near_ = INFINITY;  // kOrdered: this lane's cell's distance to the queries' center
};

/// What radius_walk calls before each cell's hits are offered, by default: nothing.
struct NoOfferHook {
  __device__ void operator()(int) const {}
};

/// The walk with a fixed opening `reach` (squared, slack included) for the warp's 32 queries,
/// each lane scanning the cells its own query may reach. Before a cell's hits are offered,
/// every lane calls `before_offers(its hits in the cell)`: a policy may make room there,
/// warp-synchronously, and lower its limit (its hit() then sees points beyond the new limit
/// too). Returns the lane's distance evaluations.
///
/// kAhead: the next cell is chosen, and its load issued, before the current one is scanned, as in
/// the kNN kernel (with the limits from before the scan: conservative, since they only shrink).
/// It costs registers: taken by the radius kernels, whose LiDAR-like walks wait on their loads
/// (1M points, radius CSR 2.7 % faster LiDAR-like, 1.5 % slower uniform, H200); the hybrid's
/// collect walk, held to 64 registers, spilled and was 2-3 % slower
/// (bench/results/2026-11-29-round29.md).
template <bool kAhead = false, class Policy, class BeforeOffers = NoOfferHook>
__device__ __forceinline__ unsigned long long radius_walk(const TreeView& t, float4 q, bool active,
                                                          float reach, float4* stage, int* stack,
                                                          Policy& policy,
                                                          BeforeOffers before_offers = {}) {
  if (!__any_sync(kFullMask, active)) return 0;
  CellWalk<false> walk(t, stack);
  walk.start(q, active, policy.limit(), reach);
  unsigned long long evals = 0;
  auto scan = [&](int cell, float4 p, bool near) {
    stage_cell(stage, p, cell);
    if (near) evals += kCell;
    int near_lanes;
    const unsigned hits = lane_cell_hits(stage, p, q, policy.limit(), near, near_lanes);
    before_offers(__popc(hits));
    offer_hits(stage, q, hits, policy);
  };
  bool near;
  if constexpr (kAhead) {
    int cell = walk.next(q, active, policy.limit(), near);
    float4 p = load_cell(t, cell);
    while (cell >= 0) {
      bool near_next = false;
      const int following = walk.next(q, active, policy.limit(), near_next);
      const float4 p_next = load_cell(t, following);
      scan(cell, p, near);
      cell = following;
      near = near_next;
      p = p_next;
    }
  } else {
    for (int cell; (cell = walk.next(q, active, policy.limit(), near)) >= 0;)
      scan(cell, load_cell(t, cell), near);
  }
  return evals;
}

}  // namespace pcnn::detail
