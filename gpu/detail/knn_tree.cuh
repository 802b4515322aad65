// Exact kNN over the spatial index: the k-list result policy of the tree walk
// (tree_walk.cuh) and its kernels.
//
// knn_tree_kernel: a warp of 32 queries (16 or 8 up to k = 32 in a launch too small to fill the
// device: knn_tree.cu's queries_per_warp) first scans the cells around its queries' place on the
// curve, which fills every list and gives each query a first radius; then it walks the box
// hierarchy (CellWalk<true>: nearest first, but for k = 1 self-searches), each lane's limit its
// current k-th distance. The lists hold positions in the index's sorted points, not original
// indices: the epilogue then reads the neighbors' coordinates (and original indices) near the
// cells just scanned rather than all over the caller's array, and ranks the row by (exact
// distance, original index) (refine.cuh).
//
// A query whose first radius is far larger than its warp-mates' (an isolated outlier among
// dense points, or a query on the far side of a jump of the curve) would drag the whole warp
// through most of the tree, so it is listed as an outlier and searched alone, a warp to a query,
// nearest nodes first (search_outlier). A single outlier's search is a chain of dependent steps
// (~100 us on an H100): run after the kernel, it added its whole length to a small frame's
// search. So in a launch of one wave (a frame's), warps that have finished their own queries
// search the outliers while others still run; knn_tree_outlier_kernel searches what is left
// after the kernel, and a longer launch's from its last wave on (started early where the device
// and the build allow it, up to CAP 32).
//
// A one-wave launch lasts as long as its slowest warp. Against a map, a few warps of scan points
// (off the map's surfaces, in its sparse parts) walk three to six times the cells of the median
// warp, while most of the device waits idle for them. So in such a launch of a query set
// (TreeKnnArgs::hand_off), once nine warps in ten are done and waiting, a warp still walking lists
// its queries as outliers, each with its current limit, and the waiting warps search them, a warp
// each.
#pragma once

#include <cuda_runtime.h>
#include <cuda/cmath>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/row_shares.hpp"
#include "curve_key.cuh"
#include "distance.cuh"
#include "radius_bound.cuh"
#include "refine.cuh"
#include "row_forward.cuh"
#include "search.cuh"
#include "spatial_index.cuh"
#include "topk.cuh"
#include "tree_walk.cuh"
#include "warp_reduce.cuh"
#include "warp_sort.cuh"

namespace pcnn::detail {

inline constexpr float kOutlierRatio = 64.f;  // squared-radius ratio that marks an outlier lane
/// KnnParams::few_queries_per_sm's automatic value: a warp a query, about 1.3 waves of them
/// (knn_tree_outlier_kernel: 40 registers and 8 KB of shared memory a block of 4 warps on sm_90,
/// 48 warps an SM).
/// 5k queries against 1M points on an H100 (132 SMs), a warp each against 32 to a warp: 0.45-0.48
/// against 2.5-3.2 ms for queries off or sparse on the cloud, 0.20 against 0.51 uniform, 2.0
/// against 12.4 at k = 32; but 0.40 against 0.31 ms for a sparse LiDAR-like scan at k = 8. 100k
/// queries a warp each took 5.0 ms against 0.31 (bench/results/2026-11-28-round18.md).
inline constexpr int kFewQueriesPerSm = 64;

/// What one launch of the tree kNN kernels searches and where it writes.
struct TreeKnnArgs {
  const float4* queries = nullptr;   // sorted along the curve; w = original index
  int slot_begin = 0, slot_end = 0;  // the queries (sorted positions) of this launch
  bool self_search = false;          // the queries are the index's own points
  int k = 1;
  bool exclude_self = false;
  int few_per_sm = 0;      // launches of at most this many queries per SM: a warp a query (0:
                           // none, nor groups of fewer than 32, nor hand_off: knn_tree.cu)
  int group = 32;          // the queries of a warp of knn_tree_kernel: 32, 16 or 8 (knn_tree.cu)
  bool hand_off = false;   // knn_tree_kernel<CAP, true>: slow warps hand their queries off
  int out_slot_base = -1;  // < 0: row = original query index; else row = slot - out_slot_base
  int query_offset = 0;    // exclude_self: query i is reference i + query_offset
  RadiusBound bound;       // hybrid search: only points within the radius
  SettleArgs exact;        // the rows are settled exactly (refine.cuh)
  std::int32_t* out_idx = nullptr;
  float* out_dist = nullptr;
  RowShares shares;  // count > 0: rows go to these shares instead of out_idx / out_dist
  // The outliers: kOutlierCounters counters, [0] listed, [1] claimed for a search (claimed <=
  // listed while any is listed still; past it, the outlier kernel's tickets that found none;
  // with hand_off, the tickets of the search kernel's waiting warps), [2] blocks of the search
  // kernel started, [3] groups of slots taken by its warps (next_slot_group), [4] its warps done
  // with their own queries and [5] those of them that wait for outliers (hand_off); then the
  // list, slot s as ~s. The list is read while written (by warps of the search kernel that claim
  // outliers, or by the outlier kernel started beside it), so it is cleared too, 0 meaning listed
  // but not written yet: one buffer, so that one fill of zeros clears both. After the list, as
  // many floats: the limit each listed query is searched from (outlier_limit; written before
  // its entry, never cleared).
  int* outliers = nullptr;
  unsigned long long* evaluations = nullptr;
  // Hybrid search of max_nn <= kCollectRoom, where the scratch fits (knn_tree.cu): the collect
  // walk keeps up to kCollect keys of each query's nearest within r, at [(slot - slot_begin) *
  // kCollect], and how many, at [slot - slot_begin] (kCollect + 1: a row it could not cut); the
  // heap walk then takes only those rows.
  std::uint64_t* collect = nullptr;
  int* collected = nullptr;
  // Rows also forwarded to the host, as their segments complete or by sweeps (row_forward.cuh),
  // rows by original index: knn_tree_kernel's and the outliers' (search_outlier), up to CAP 32;
  // rows of other kernels (the gather's, empty_rows_kernel's) are left to forward_rest_kernel
  // (knn_tree.cu).
  RowForward forward;

  struct Out {
    std::int32_t* idx;
    float* dist;
  };
  /// The row of out_idx / out_dist of the query at `slot` (original index `qid`).
  __device__ int row(int slot, int qid) const {
    return out_slot_base < 0 ? qid : slot - out_slot_base;
  }
  /// Where the row of the query at `slot` (original index `qid`) goes.
  __device__ Out out(int slot, int qid) const {
    Out o;
    if (shares.count > 0) {
      shares.at(qid, k, o.idx, o.dist);
      return o;
    }
    const std::size_t r = static_cast<std::size_t>(row(slot, qid)) * k;
    return {out_idx + r, out_dist + r};
  }
  /// Every lane calls (warp-synchronous): `written` says its row (the query at `slot`) is now
  /// complete on the device. Forwards the rows' completed segments, where rows are forwarded
  /// (lists of up to a line, kForwardSegment entries; above, forward_rest_kernel copies them).
  template <int CAP>
  __device__ __forceinline__ void forward_row(bool written, int slot, int qid) const {
    if constexpr (CAP <= kForwardSegment)
      if (forward.done) forward_rows(forward, out_idx, out_dist, written ? row(slot, qid) : -1, k);
  }
};

/// The capacities from which the kNN walk keeps a heap (HeapTopK) rather than a sorted list.
inline constexpr int kHeapCap = 32;

/// The k-list result policy: the k best (distance, position) pairs seen so far, in the thread's
/// slice of the block's shared memory (tree_walk.cuh, thread_block_list), and what the exact
/// refinement needs (TopK's spill). Sorted by finish().
template <int CAP>
struct NearestList {
  float4 q;
  int self;    // the query's own index when it is excluded, else -1
  float term;  // FilterError::widen_term()
  // Blocks of kTreeWarps warps only.
  std::conditional_t<(CAP >= kHeapCap), HeapTopK<CAP, TreeSlots>, TopK<CAP, TreeSlots>> best;

  __device__ NearestList(float4 q_, int self_, float term_, int k)
      : q(q_), self(self_), term(term_) {
    best.s = thread_block_list();
    best.init(k);
  }
  __device__ __forceinline__ float limit() const { return best.limit; }
  __device__ __forceinline__ void hit(float4 p, float d, int pos) {
    if (__float_as_int(p.w) != self) best.offer(d, pos, term);
  }
};

/// The cell a query falls into along the index's curve: the position of its key among the
/// sorted keys, divided by the cell size. The query's key has its bits below key_low_bit cleared,
/// so `<` orders it against an index key as their sorted bits do, whatever the index key's bits
/// below.
__device__ __forceinline__ int home_cell(const TreeView& t, float4 q) {
  const std::uint64_t key = curve_key(q.x, q.y, q.z, t.bounds, t.key_low_bit);
  int lo = 0, hi = t.n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (t.keys[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return min(lo / kCell, t.level_count[0] - 1);
}

/// The most cells between the home cells of a warp's first and last query that the first range
/// spans (see first_cells).
inline constexpr int kFirstSpan = 16;

/// The cells scanned before the walk, [first, last]: the home cells of the warp's queries and
/// enough on either side to hold k points, so that they fill every list, each with points near
/// its own query. The homes grow with the lane (queries and index share the curve). Queries
/// sparser than the index spread a warp over several cells; scanned from the middle lane's home
/// alone, the lanes at the ends got a first radius far above their true one and were searched
/// as outliers (thousands a frame for a scan against a map). Where the homes span more than
/// kFirstSpan cells (a jump of the curve), the range is the middle lane's.
struct CellRange {
  int first, last;
  int home;  // this lane's home cell (a lane not in `valid`: the first valid lane's)
};
__device__ __forceinline__ CellRange first_cells(const TreeView& t, const TreeKnnArgs& a, int slot,
                                                 float4 q, unsigned valid) {
  const int cells = t.level_count[0];
  // A self-search's query at slot s is the index's point s, in cell s / kCell, unless it is a
  // shadow (a repeat set aside behind the kNN hierarchy's points, spatial_index.cuh).
  const bool own_cell = a.self_search && (slot < t.n || !finite3(q.x, q.y, q.z));
  const int home = own_cell ? min(slot / kCell, cells - 1) : home_cell(t, q);
  const int lo = __shfl_sync(kFullMask, home, __ffs(valid) - 1);
  const int hi = __shfl_sync(kFullMask, home, 31 - __clz(valid));
  const int reach = cuda::ceil_div(a.k, kCell);
  const int own = (valid >> (threadIdx.x & 31)) & 1 ? home : lo;
  if (lo <= hi && hi - lo <= kFirstSpan)
    return {max(lo - reach, 0), min(hi + reach, cells - 1), own};
  // The middle valid lane's (lane 16 of a full warp).
  const int center = __shfl_sync(kFullMask, home, __fns(valid, 0, __popc(valid) / 2 + 1));
  return {max(center - reach, 0), min(center + reach, cells - 1), own};
}

/// The groups whose nearest points seed a list's limit (seed_limit): one per list slot, up to 16
/// (more would hold too many registers, and the k-th of them costs G² compares).
template <int CAP>
constexpr int seed_groups() {
  return CAP <= 16 ? CAP : 0;
}

/// The k-th smallest of v[0, G) (ties by position), k <= G: compile-time indices only, so that v
/// stays in registers.
template <int G>
__device__ __forceinline__ float kth_smallest(const float (&v)[G], int k) {
  float kth = INFINITY;
#pragma unroll
  for (int a = 0; a < G; ++a) {
    int below = 0;
#pragma unroll
    for (int b = 0; b < G; ++b) below += v[b] < v[a] || (v[b] == v[a] && b < a);
    if (below == k - 1) kth = v[a];
  }
  return kth;
}

/// Seeds each lane's limit before the first range is scanned. Without it, the first cell scanned
/// offers the list all of its points (the list is empty, its limit infinite), the next ones most
/// of theirs, and each offer is an insertion into the list in shared memory, lane by lane: at 1M
/// uniform points and k = 8 the offers took over half of the kernel's instructions (ncu source
/// counters, bench/results/2026-11-27-round11.md). Here each lane takes the points of its own
/// home cell and of the cells on either side of it, and puts each in one of G groups by its place
/// in its cell; the nearest of each group (the query itself excluded) are G distinct points, so
/// the k-th smallest of the groups' nearest bounds the k-th nearest distance from above
/// (TopK::bound). The scan then offers only what lies within that bound, and skips the cells of
/// the first range that the bound does not reach. Where the warp's queries share one home (a
/// self-search), the cells are staged once and read by every lane at once; otherwise (a warp of
/// scan points against a denser map spans several cells) each lane reads its own. Seeded from
/// the whole first range by the warp, such a warp computed every lane's distance to a dozen map
/// cells twice; seeded from the home cell alone, k = 8 and 16 were 7 % slower (a looser bound:
/// more offers), except for a list of one, which is seeded from its home cell alone
/// (bench/results/2026-11-27-round17.md).
template <int CAP>
__device__ __forceinline__ void seed_limit(const TreeView& t, CellRange range, float4* stage,
                                           float4 q, bool active, NearestList<CAP>& list,
                                           unsigned long long& evals) {
  constexpr int G = seed_groups<CAP>();
  if constexpr (G > 0) {
    constexpr int kSide = CAP == 1 ? 0 : 1;
    const int home = range.home, cells = t.level_count[0];
    const int first = max(home - kSide, 0), last = min(home + kSide, cells - 1);
    const int end = min((last + 1) * kCell, t.n);  // past this lane's last point
    // A lane whose home lies outside the first range (homes spanning more than kFirstSpan
    // cells, see first_cells) is seeded from its own home too, so that its first radius is its
    // own, not the range's: it is then walked with the warp instead of listed as an outlier.
    // A walk does not grow with the gap between such lanes: a node is opened only where some
    // lane's own sphere reaches its box.
    evals += warp_sum(active ? end - first * kCell : 0);
    float nearest[G];
#pragma unroll
    for (int g = 0; g < G; ++g) nearest[g] = INFINITY;
    // Point j of a round into group g (past the last point: NaN, which fminf passes over).
    auto take = [&](int g, float4 c) {
      if (__float_as_int(c.w) != list.self) nearest[g] = fminf(nearest[g], point_dist2(q, c));
    };
    if (__all_sync(kFullMask, home == __shfl_sync(kFullMask, home, 0))) {
      // One home for the warp (a self-search, or dense queries): its cells staged once, each
      // read by every lane at once.
      float4 p = load_cell(t, first);
      for (int cell = first; cell <= last; ++cell) {
        const float4 next = load_cell(t, cell < last ? cell + 1 : -1);
        stage_cell(stage, p, cell);
        if (active) {
          // Rolled over the groups' rounds where G is large, to spare registers.
#pragma unroll(G >= 4 ? 1 : 4 / G)
          for (int j = 0; j < kCell; j += G) {
#pragma unroll
            for (int g = 0; g < G; ++g) take(g, stage[j + g]);
          }
        }
        p = next;
      }
    } else if (active) {
#pragma unroll(G >= 4 ? 1 : 4 / G)
      for (int j = first * kCell; j < end; j += G) {
#pragma unroll
        for (int g = 0; g < G; ++g)
          if (j + g < end) take(g, t.points[j + g]);
      }
    }
    if (active) list.best.bound(kth_smallest(nearest, list.best.k), list.term);
  }
}

/// Whether this lane's query is an outlier: its first radius `worst` above kOutlierRatio times
/// the median of the warp's (`valid`: the lanes with a query), floored at the curve's
/// resolution so that exact duplicates (radius 0) flag nobody. Every lane must call it.
__device__ __forceinline__ bool is_outlier(const TreeView& t, float worst, bool active,
                                           unsigned valid) {
  const float sorted = warp_sort(active ? worst : INFINITY);
  const float median = __shfl_sync(kFullMask, sorted, (__popc(valid) - 1) / 2);
  const float* b = t.bounds;
  const float extent = fmaxf(fmaxf(b[3] - b[0], b[4] - b[1]), b[5] - b[2]);
  const float floor2 = sq(extent / float(1 << kCurveBits));
  return active && worst > kOutlierRatio * fmaxf(median, floor2);
}

/// A device-scope relaxed load of a counter or list entry that other warps write with atomics.
/// An atomic read (atomicOr with 0) would be a read-modify-write by every warp of a launch on
/// the same few addresses.
__device__ __forceinline__ int load_relaxed(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// Where the limit of listed outlier i is kept: after the list (TreeKnnArgs::outliers).
__device__ __forceinline__ int* outlier_limit(const TreeKnnArgs& a, int i) {
  return a.outliers + kOutlierCounters + (a.slot_end - a.slot_begin) + i;
}

/// Lists the query at `slot` as an outlier, to be searched from `limit`: the lane's current
/// limit, which only ever lies at or above the widened distance of the k-th of k candidates
/// (TopK::bound), so a search started from it still offers every point the exact refinement
/// needs.
__device__ __forceinline__ void list_outlier(const TreeKnnArgs& a, int slot, float limit) {
  const int listed = atomicAdd(a.outliers, 1);
  *outlier_limit(a, listed) = __float_as_int(limit);
  __threadfence();                                            // the limit is seen before the entry
  atomicExch(a.outliers + kOutlierCounters + listed, ~slot);  // written
}

/// Pushes the children [first, first + n) at `level` whose box q's sphere (`worst`) may reach on
/// the outlier stack (`sp` deep), nearest on top, with their bounds where `bounds` is given.
/// Returns the new depth. Lane t tests child t.
__device__ __forceinline__ int push_nearest_last(const TreeView& t, float4 q, float worst,
                                                 int level, int first, int n, int* stack,
                                                 float* bounds, int sp) {
  const int lane = threadIdx.x & 31;
  float key = -INFINITY;
  int node = 0;
  if (lane < n) {
    const int at = t.level_offset[level] + first + lane;
    const float d = box_dist2(q, t.box_lo[at], t.box_hi[at]);
    if (may_reach(d, worst)) key = d;
    node = encode_node(level, first + lane);
  }
  const int passing = __popc(__ballot_sync(kFullMask, key != -INFINITY));
  // Descending by distance (non-passing lanes, at -inf, sort last).
  warp_sort_by_key(key, node, [](float x, float y) { return x > y; });
  if (lane < passing) {
    stack[sp + lane] = node;
    if (bounds) bounds[sp + lane] = key;
  }
  __syncwarp();
  return sp + passing;
}

/// One warp per outlier query: depth-first, nearest child first, so that the radius shrinks as
/// fast as it can. Lane t tests child t of a node (children sorted by distance across the warp
/// and pushed nearest-on-top) and computes the distance to point t of a cell; the warp keeps one
/// list (WarpTopK: entry j in lane j, for k up to 32; else the same TopK in every lane), offered
/// the cell's candidates in lane order. The nodes' bounds are kept on a second stack where
/// `bounds` is given (knn_tree_outlier_kernel); inside the search kernel, where a stack of bounds
/// took 4 KB more shared memory a block and L1 cache from its walks, a popped node's bound is
/// computed again from its box (one more dependent load a step: the outlier kernel's search at
/// 1M LiDAR points took 136 us that way instead of 107). The list starts from the limit the
/// query was listed with (list_outlier): from it rather than from infinity, 1M LiDAR-like points
/// were searched 6 % faster at k = 8 and 3 % at k = 32 (H200).
template <int CAP>
__device__ void search_outlier(const TreeView& t, const TreeKnnArgs& a, int i, int* stack,
                               float* bounds) {
  const int lane = threadIdx.x & 31;
  // Listed, but perhaps not written yet by the lane that listed it (a moment away: it listed it
  // and is running), when the search overlaps the listing: an atomic write, read with relaxed
  // loads until it lands, by lane 0 for the warp.
  int entry = 0, from = 0;
  if (lane == 0) {
    while ((entry = load_relaxed(a.outliers + kOutlierCounters + i)) == 0) {
    }
    __threadfence();  // the limit, written before the entry, is seen
    from = load_relaxed(outlier_limit(a, i));
  }
  const int slot = ~__shfl_sync(kFullMask, entry, 0);
  const float4 q = a.queries[slot];
  const int qid = __float_as_int(q.w);
  const int self = a.exclude_self ? qid + a.query_offset : -1;
  // A warp's list from CAP 2 to 32 (TopK's local memory held every insertion up), a heap above
  // (as the walk's), TopK for one.
  constexpr bool kWarpList = CAP > 1 && CAP <= 32;
  std::conditional_t<kWarpList, WarpTopK<CAP>,
                     std::conditional_t<(CAP > 32), HeapTopK<CAP, ThreadSlots<CAP>>, TopK<CAP>>>
      best;
  best.init(a.k);
  best.limit = __int_as_float(__shfl_sync(kFullMask, from, 0));  // infinite, or list_outlier's
  unsigned long long evals = 0;
  // A query that is not finite has no neighbors (its row is padding, as for an inactive lane
  // of knn_tree_kernel): with an infinite coordinate every distance is infinite, which the list
  // would otherwise take.
  int sp = finite3(q.x, q.y, q.z) ? push_nearest_last(t, q, best.limit, t.levels - 1, 0,
                                                      t.level_count[t.levels - 1], stack, bounds, 0)
                                  : 0;
  while (sp > 0) {
    --sp;
    const int e = stack[sp];
    const float stored = bounds ? bounds[sp] : 0.f;
    __syncwarp();  // every lane has read the entry before any lane pushes over it
    const int level = node_level(e), index = node_index(e);
    const int at = t.level_offset[level] + index;
    const float bound = bounds ? stored : box_dist2(q, t.box_lo[at], t.box_hi[at]);
    if (!may_reach(bound, best.limit)) continue;
    if (level > 0) {
      const int first = index * kFanout;
      sp = push_nearest_last(t, q, best.limit, level - 1, first,
                             min(kFanout, t.level_count[level - 1] - first), stack, bounds, sp);
      continue;
    }
    const float4 p = load_cell(t, index);
    const float d = point_dist2(q, p);
    evals += min(kCell, t.n - index * kCell);
    // Every point within the limit is offered, in lane order (the same list in every lane), by
    // its position (lane src holds point index * kCell + src).
    unsigned offered = __ballot_sync(kFullMask, d <= best.limit && __float_as_int(p.w) != self);
    while (offered) {
      const int src = __ffs(offered) - 1;
      offered &= offered - 1;
      const float cd = __shfl_sync(kFullMask, d, src);
      if (cd <= best.limit) best.offer(cd, index * kCell + src, a.exact.term);
    }
  }
  bool flagged = false;
  float reach = 0.f;
  auto settle = [&](auto& slots) {
    if (lane == 0) {
      const auto o = a.out(slot, qid);
      flagged = !settle_row<CAP>(slots, best.count(), a.k, best.spill, a.exact.query(q, qid),
                                 a.exact, o.idx, o.dist, reach);
      atomicAdd(a.evaluations, evals);
    }
  };
  if constexpr (kWarpList) {
    SharedSlots slots = best.slots(stack);  // the walk's stack is empty now
    settle(slots);
    __syncwarp();  // lane 0 is done with the stack before the next search pushes onto it
  } else {
    best.finish();
    settle(best.s);
  }
  flag_rows(a.exact, a.slot_begin, slot, flagged, reach);
  a.forward_row<CAP>(lane == 0 && !flagged, slot, qid);  // lane 0 wrote the row
}

/// Claims the next listed outlier not yet claimed, for the calling warp: its index in the list,
/// or -1 when every outlier listed so far is claimed. Its claims never pass the listed count
/// (knn_tree_outlier_kernel's tickets do, and wait_for_outlier's may).
__device__ __forceinline__ int claim_outlier(const TreeKnnArgs& a) {
  int i = -1;
  if ((threadIdx.x & 31) == 0) {
    int* counts = a.outliers;
    for (int seen = load_relaxed(counts + 1); seen < load_relaxed(counts);) {
      const int was = atomicCAS(counts + 1, seen, seen + 1);
      if (was == seen) {
        i = seen;
        break;
      }
      seen = was;
    }
  }
  return __shfl_sync(kFullMask, i, 0);
}

/// Hand-off (TreeKnnArgs::hand_off): a warp still walking checks every kHandOffCheckCells cells
/// whether nine warps in ten wait for outliers (hand_off_now, on counter [5] as loaded a cell
/// before, so that the check does not wait on the load; warps that had no queries, or are done
/// but left, their launch not all resident, do not count: they would search nothing); waiting
/// warps look for listed outliers every kHandOffPollNs once nine in ten are done (counter [4]),
/// every kHandOffIdleNs before (no hand-off comes then, and fewer polls load the counters' L2
/// slice less while most warps still walk: 16 and 2 us measured the same as 2 and 2). Measured on
/// the map frame (100k LiDAR-like scan points against a 1M map, k = 8, H200; all of its blocks
/// resident, so that every done warp waited): handed off once 8.5 / 9 / 9.5 warps in 10 were done,
/// its search took 0.34 / 0.31 / 0.32 ms against 0.47; polled every 0.5 us, the waiting warps
/// slowed the walks that were left, every 2 or 4 us they did not; after a fixed number of cells
/// instead (32, 1.5x the median warp's), 0.35 ms, but 3-4x as many queries were handed off. Its
/// cost: where every warp takes about as long (100k uniform queries against 1M uniform points) the
/// waiting and the hand-offs made the search 5-25 % slower (0.12 -> 0.14-0.16 ms at k = 1); 100k
/// clustered queries were 45 % faster at k = 1 and 8, LiDAR-like 36 % and 14 %
/// (bench/results/2026-11-30-round31.md).
inline constexpr int kHandOffCheckCells = 4;
inline constexpr unsigned kHandOffPollNs = 2000;
inline constexpr unsigned kHandOffIdleNs = 16000;

/// Whether nine in ten of the launch's warps wait for outliers (`waiting_seen`: lane 0's load of
/// counter [5]). Warp-synchronous.
__device__ __forceinline__ bool hand_off_now(int waiting_seen) {
  const int waiting = __shfl_sync(kFullMask, waiting_seen, 0);
  return 10ll * waiting >= 9ll * gridDim.x * kTreeWarps;
}

/// Counters [0] (listed) and [1] (claimed), by one instruction (each word a relaxed load: the
/// caller needs no more).
__device__ __forceinline__ int2 load_relaxed_pair(const int* p) {
  int2 v;
  asm volatile("ld.relaxed.gpu.global.v2.s32 {%0, %1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p)
               : "memory");
  return v;
}

/// With hand_off: the next outlier for the calling warp, waiting until one is listed, or -1 once
/// every warp of the launch is done with its own queries and every listed one is taken (no more
/// will be). A warp takes a ticket (counter [1]) only when it sees one listed and not taken, and
/// then searches the outlier of that number once it is listed (others may have taken those it
/// saw first): taken at once by every waiting warp, the tickets were thousands of atomics on one
/// address while the last warps still walked. Only while every block of the launch runs: the
/// warps waited on must.
__device__ __forceinline__ int wait_for_outlier(const TreeKnnArgs& a) {
  const int warps = static_cast<int>(gridDim.x) * kTreeWarps;
  int i = -1;
  if ((threadIdx.x & 31) == 0) {
    int ticket = -1;
    for (bool last = false; !last;) {
      const int done = load_relaxed(a.outliers + 4);
      if (done == warps) {
        // Every warp that listed fenced its listings before it counted itself done.
        __threadfence();
        last = true;
      }
      const int2 counts = load_relaxed_pair(a.outliers);  // listed, taken
      if (ticket < 0 && counts.y < counts.x) ticket = atomicAdd(a.outliers + 1, 1);
      if (ticket >= 0 && ticket < counts.x) {
        i = ticket;
        break;
      }
      if (!last) __nanosleep(10ll * done >= 9ll * warps ? kHandOffPollNs : kHandOffIdleNs);
    }
  }
  return __shfl_sync(kFullMask, i, 0);
}

/// Whether the warps of knn_tree_kernel<CAP> take their groups of slots in turn
/// (next_slot_group) rather than by block index: from CAP 32 on. There a block's place (a
/// sixth of an SM's shared memory or more) was held until its slowest warp finished; taken in
/// turn, 1M points searched 8 % (k = 32) and 6 % (k = 64) faster uniform, 6 % and 5 % clustered,
/// 13 % and 14 % LiDAR-like (H200). At k <= 16 the four warps of a block, on neighboring groups,
/// share their cells in the SM's L1: taken in turn, clustered k = 8 was 6 % slower
/// (bench/results/2026-11-29-round22.md).
template <int CAP>
constexpr bool takes_slot_groups() {
  return CAP >= 32;
}

/// The first slot of the next group of a.group slots that the calling warp searches: groups go
/// to warps as they become free (counter [3] of the outliers), so that a launch of no more blocks
/// than the device holds at once keeps every warp busy until the last group.
__device__ __forceinline__ int next_slot_group(const TreeKnnArgs& a) {
  int group = 0;
  if ((threadIdx.x & 31) == 0) group = atomicAdd(a.outliers + 3, 1);
  // Past the last group (by up to a take a warp): the end, without overflowing an int.
  const std::int64_t first =
      a.slot_begin + std::int64_t(__shfl_sync(kFullMask, group, 0)) * a.group;
  return first < a.slot_end ? static_cast<int>(first) : a.slot_end;
}

/// The blocks of knn_tree_kernel<CAP> an SM's registers must hold while the lists are short, on
/// sm_90: 8 (32 warps, 64 registers a thread). Left alone, the compiler settles a register or
/// two above 64 for some CAP, which costs a block per SM; 64 is reached without spills there
/// (ptxas -v). From CAP 64 on, shared memory holds 3 blocks or fewer and the registers are left
/// to the compiler (0: no bound; 90 registers at CAP 64 and 128), as they are on other
/// architectures, where the bound costs spills.
template <int CAP>
constexpr int knn_blocks_per_sm() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return CAP <= 32 ? 8 : 0;
#else
  return 0;
#endif
}

/// Whether knn_tree_kernel<CAP, true> exists: up to CAP 32. Above, the lists take most of the
/// shared memory and the outlier search inside cost the main loop 60-byte spills.
template <int CAP>
constexpr bool claims_outliers() {
  return CAP <= 32;
}
// knn_tree.cu opts only the other instantiation in to more than 48 KB of shared memory.
static_assert(tree_list_bytes<32>() <= 48 * 1024, "claiming capacities need no opt-in");

/// kClaim: warps search outliers after their own queries (a launch of one wave). The outlier
/// search takes registers: within 64 (8 blocks an SM), the main loop spilled from CAP 4 on and
/// 100k uniform points at k = 8 were 9 % slower, so that instantiation is held to 7 blocks an
/// SM (72 registers; a one-wave launch of 100k points needs 6). The other one has no outlier
/// search inside: with the search inside, searches of 1M points (longer launches) were 4-5 %
/// slower.
template <int CAP, bool kClaim>
constexpr int knn_launch_blocks_per_sm() {
  return kClaim && knn_blocks_per_sm<CAP>() > 0 ? knn_blocks_per_sm<CAP>() - 1
                                                : knn_blocks_per_sm<CAP>();
}

/// Programmatic dependent launch (sm_90 on): lets the kernel launched after this one on its
/// stream with cudaLaunchAttributeProgrammaticStreamSerialization start once every block of this
/// one has called it (or ended). Elsewhere nothing: that kernel starts after this one ends.
__device__ __forceinline__ void let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// In a kernel started early (let_next_kernel_start): waits until the kernel before it on its
/// stream has ended and its writes are visible. Elsewhere, or launched without the attribute,
/// it returns at once: that kernel has ended already.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// kOrdered: the walk takes nodes and cells nearest the warp's queries first (CellWalk). A k = 1
/// self-search walks without that order (knn_tree.cu's search_kernel): its queries are the
/// index's points, whose first limits come from their own cells and are tight, and at 1M points
/// it was 9-11 % faster so; a k = 1 query set off the cloud, whose first limits are wide, was up
/// to 78 % slower (bench/results/2026-11-29-round29.md).
template <int CAP, bool kClaim, bool kOrdered = true>
__global__ void __launch_bounds__(kTreeWarps * 32, knn_launch_blocks_per_sm<CAP, kClaim>())
    knn_tree_kernel(const __grid_constant__ TreeView t, TreeKnnArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kStage];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  // Not claiming its outliers (not kClaim; several waves, mostly): the outlier kernel may start
  // once every block has; it then takes the places that blocks of the last wave leave, and
  // searches the outliers while the others run.
  if constexpr (!kClaim) let_next_kernel_start();
  if (kClaim && threadIdx.x == 0) atomicAdd(a.outliers + 2, 1);
  // The warp's group of a.group slots (lanes past it have no query) by block index, or groups in
  // turn until none is left (whole warps only).
  constexpr bool kTakesGroups = takes_slot_groups<CAP>();
  int first_slot =
      kTakesGroups ? next_slot_group(a) : a.slot_begin + (blockIdx.x * kTreeWarps + warp) * a.group;
  if (!kTakesGroups && first_slot >= a.slot_end) {
    if (kClaim && kOrdered && a.hand_off && lane == 0) atomicAdd(a.outliers + 4, 1);  // done
    return;
  }
  bool listed = false;  // some lane of this warp listed an outlier
  for (; first_slot < a.slot_end; first_slot = kTakesGroups ? next_slot_group(a) : a.slot_end) {
    float4* stage = stage_all[warp];
    unsigned long long evals = 0;  // lane-point distance computations
    const int slot = first_slot + lane;
    // (One bound rather than two tests: `lane < a.group && slot < a.slot_end` cost the kernels from
    // CAP 32 on registers and spills, ptxas -v.)
    const bool mine = lane < min(a.group, a.slot_end - first_slot);
    const float4 q = mine ? a.queries[slot] : make_float4(NAN, NAN, NAN, 0.f);
    const int qid = __float_as_int(q.w);
    bool active = mine && finite3(q.x, q.y, q.z) && t.levels > 0;
    NearestList<CAP> list(q, a.exclude_self ? qid + a.query_offset : -1, a.exact.term, a.k);
    bool outlier = false;
    const unsigned valid = __ballot_sync(kFullMask, active);
    if (valid) {
      const CellRange first = first_cells(t, a, slot, q, valid);
      seed_limit(t, first, stage, q, active, list, evals);
      const int c0 = first.first, c1 = first.last;
      CellWalk<true, kOrdered> walk(t, stack_all[warp], c0, c1);
      bool walking = false;
      int range = c0;
      // Cells come from the first range, then the walk; next_cell yields them one at a time so
      // that the scan, and the list update inside it, exists once in the kernel. The walk starts
      // only after the first range is fully scanned, because it decides outliers from the radii
      // that range gives: a call `ahead` of the current cell's scan that runs out of the range
      // returns -2 (not chosen yet) instead of starting it. (The kernel's locals and this one loop,
      // rather than a loop per source, keep the registers at 64: see knn_blocks_per_sm.)
      // `near`: whether this lane's query may reach the cell. Cells of the first range that no
      // lane may reach are passed over.
      auto next_cell = [&](bool& near, bool ahead) -> int {
        while (range <= c1) {
          const int at = t.level_offset[0] + range;
          near = active && may_reach(box_dist2(q, t.box_lo[at], t.box_hi[at]), list.limit());
          if (__any_sync(kFullMask, near)) return range++;
          ++range;
        }
        if (!walking) {
          if (ahead) return -2;
          walking = true;
          if (is_outlier(t, list.limit(), active, valid)) {
            list_outlier(a, slot, list.limit());
            outlier = true;
            active = false;
          }
          if (!__any_sync(kFullMask, active)) return -1;
          walk.start(q, active, list.limit());
        }
        return walk.next(q, active, list.limit(), near);
      };
      // Software pipeline: the next cell is chosen, and its load issued, before the current one is
      // scanned, so the load's latency overlaps the scan (-2: not chosen yet, where the walk
      // starts). Choosing it with the limits from before the scan is conservative (limits only
      // shrink).
      bool near = false;
      int waiting_seen = 0;  // lane 0: counter [5]
      int walked = 0;        // cells of the walk scanned
      int cell = next_cell(near, false);
      float4 p = load_cell(t, cell);
      while (cell >= 0) {
        int following = -2;
        bool near_next = false;
        float4 p_next;
        if (range <= c1 || walking) {
          following = next_cell(near_next, true);
          p_next = load_cell(t, following);
        }
        stage_cell(stage, p, cell);
        int near_lanes;
        const unsigned hits = lane_cell_hits(stage, p, q, list.limit(), near, near_lanes);
        evals += kCell * near_lanes;
        offer_hits(stage, q, hits, list);
        if (kClaim && kOrdered && a.hand_off && walking) {
          // Late in a launch whose other warps are mostly done: this warp's queries go to them.
          if (++walked % kHandOffCheckCells == 0 && hand_off_now(waiting_seen)) {
            if (active) list_outlier(a, slot, list.limit());
            outlier = outlier || active;
            break;
          }
          // Counter [5] loaded a cell ahead of its check (hand_off_now).
          if (walked % kHandOffCheckCells == kHandOffCheckCells - 1 && lane == 0)
            waiting_seen = load_relaxed(a.outliers + 5);
        }
        if (following == -2) {
          following = next_cell(near_next, false);
          p_next = load_cell(t, following);
        }
        cell = following;
        near = near_next;
        p = p_next;
      }
    }
    // The epilogue: each row settled exactly, or flagged for the gather.
    bool flagged = false;
    float reach = 0.f;
    if (mine && !outlier) {
      const auto o = a.out(slot, qid);
      list.best.finish();
      flagged = !settle_row<CAP>(list.best.s, list.best.count(), a.k, list.best.spill,
                                 a.exact.query(q, qid), a.exact, o.idx, o.dist, reach);
    }
    flag_rows(a.exact, a.slot_begin, first_slot, flagged, reach);
    a.forward_row<CAP>(mine && !outlier && !flagged, slot, qid);
    if (lane == 0 && evals) atomicAdd(a.evaluations, evals);
    if constexpr (kClaim) listed = listed || __any_sync(kFullMask, outlier);
  }
  // This warp's queries are done. In a launch of one wave (kClaim), once every block has started
  // (no block waits for this one's place: another kernel may share the device), it searches the
  // outliers listed so far. Lane 0 reads the count for the warp: the code below is
  // warp-synchronous.
  // With hand_off, it counts itself done (its listings seen first) and waits for outliers until
  // every warp is done.
  if constexpr (kClaim) {
    const int started = __shfl_sync(kFullMask, lane == 0 ? load_relaxed(a.outliers + 2) : 0, 0);
    const bool all_started = started == static_cast<int>(gridDim.x);
    if (kOrdered && a.hand_off) {  // (k = 1 self-searches walk unordered, and never hand off)
      __syncwarp();                // the warp's listings, then lane 0's fence
      if (lane == 0) {
        if (listed) __threadfence();
        atomicAdd(a.outliers + 4, 1);
        if (all_started) atomicAdd(a.outliers + 5, 1);
      }
      if (all_started)
        for (int i = wait_for_outlier(a); i >= 0; i = wait_for_outlier(a))
          search_outlier<CAP>(t, a, i, stack_all[warp], nullptr);
    } else if (all_started) {
      for (int i = claim_outlier(a); i >= 0; i = claim_outlier(a))
        search_outlier<CAP>(t, a, i, stack_all[warp], nullptr);
    }
  }
}

/// The outliers the search kernel listed and left unclaimed, a warp each over a fixed grid (the
/// counts are read on the device: no round trip to the host). After a search kernel that does
/// not claim outliers it is launched to start early (let_next_kernel_start; up to CAP 32, where
/// the device and the build allow it: knn_tree.cu): once all the search kernel's blocks have
/// started, this kernel's blocks take the places that its last wave's leave, and this kernel's
/// warps search the outliers listed so far while that wave runs, so that the longest outlier's
/// search (a warp walking alone: ~85 us at 1M clustered points, k = 8, ~155 us LiDAR-like) overlaps
/// the search kernel instead of following it. Each warp takes a ticket (counter [1]) for the
/// outlier of that number; where none is listed yet, it waits for the search kernel to end, after
/// which the listed count is final.
template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32)
    knn_tree_outlier_kernel(const __grid_constant__ TreeView t, TreeKnnArgs a) {
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  __shared__ float bounds_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  bool ended = false;  // the search kernel: seen to have ended by this thread
  for (;;) {           // whole warps only
    int ticket = 0;
    if (lane == 0) ticket = atomicAdd(a.outliers + 1, 1);
    ticket = __shfl_sync(kFullMask, ticket, 0);
    if (ticket >= load_relaxed(a.outliers)) {
      if (ended) break;
      wait_for_previous_kernel();  // its writes, the whole list among them, are visible after
      ended = true;
      if (ticket >= load_relaxed(a.outliers)) break;
    }
    search_outlier<CAP>(t, a, ticket, stack_all[warp], bounds_all[warp]);
  }
  // What runs after this kernel on its stream (the gather of flagged rows) reads the search
  // kernel's rows too: this kernel ends only after it.
  if (!ended) wait_for_previous_kernel();
}

/// The rows flagged by the search kernels, a warp per group (the lanes of one search warp, so
/// that they are spatial neighbors), over a fixed grid (the count is read on the device). Lanes
/// of a warp walk together: the walk's reach is the warp's largest.
template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32)
    gather_flagged_kernel(const __grid_constant__ TreeView t, TreeKnnArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kStage];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int groups = *a.exact.group_count;
  for (int g = blockIdx.x * kTreeWarps + warp; g < groups; g += gridDim.x * kTreeWarps) {
    const int2 group = a.exact.groups[g];
    const bool on = (static_cast<unsigned>(group.y) >> lane) & 1;
    const int slot = group.x + (on ? lane : 0);
    const float4 q = a.queries[slot];
    const int qid = __float_as_int(q.w);
    ExactSink<CAP> sink{
        q,       a.exact.queries.at(qid), a.exclude_self ? qid + a.query_offset : -1,
        a.bound, &a.exact.refs,           on ? a.exact.reach[slot - a.slot_begin] : 0.f,
        {}};
    sink.list.k = a.k;
    const float reach = warp_max(sink.reach);
    radius_walk(t, q, on, reach * kPruneSlack, stage_all[warp], stack_all[warp], sink);
    if (on) {
      const auto o = a.out(slot, qid);
      sink.list.write(o.idx, o.dist);
    }
  }
}

}  // namespace pcnn::detail
