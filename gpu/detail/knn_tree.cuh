// Exact kNN over the spatial index.
//
// knn_tree_kernel: one warp per 32 consecutive queries in Morton order (spatial neighbors, so
// they want mostly the same cells). The warp first scans the cells around its queries' place on
// the curve, which fills every list and gives each query a first radius. It then walks the box
// hierarchy from the top: a node is opened when any lane's sphere (its current k-th distance)
// may reach the node's box, and its children are pushed when they may reach the box around the
// warp's queries grown by the largest radius. A cell is staged once in shared memory and every
// lane scans it for its own query (broadcast reads). Pruning is conservative (a margin covers
// float rounding), so the result is exact; ties are broken by the smaller original index.
//
// A query whose first radius is far larger than its warp-mates' (an isolated outlier among
// dense points) would drag the whole warp through most of the tree, so it is handed to
// knn_tree_outlier_kernel, which searches it alone, nearest nodes first.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "distance.cuh"
#include "finite.cuh"
#include "morton.cuh"
#include "radius_bound.cuh"
#include "spatial_index.cuh"
#include "topk.cuh"
#include "warp_reduce.cuh"

namespace pcnn::detail {

inline constexpr int kTreeWarps = 4;          // warps per block
inline constexpr int kTreeStack = 256;        // >= kFanout + (kFanout - 1) * (kMaxLevels - 1)
inline constexpr float kOutlierRatio = 64.f;  // squared-radius ratio that marks an outlier lane
// Pruning margin: a node is skipped only when its lower bound exceeds the k-th distance by more
// than float rounding could account for.
inline constexpr float kPruneSlack = 1.0f + 1e-5f;
// Lists live in shared memory (CAP x 8 bytes per thread: 128 KiB per block at CAP = 128, which
// limits occupancy for the largest k). Local memory would need no opt-in, but with many warps
// each holding a long list it is evicted to L2, and a 64-entry insertion then waits on L2 for
// every shifted entry: measured 12x slower than shared memory at k = 64.
inline constexpr int kMaxSharedCap = 128;

template <int CAP>
using TreeList =
    TopK<CAP, false, std::conditional_t<(CAP <= kMaxSharedCap), SharedSlots, ThreadSlots<CAP>>>;

/// Dynamic shared memory a tree-search block needs for its lists.
template <int CAP>
constexpr int tree_list_bytes() {
  return CAP <= kMaxSharedCap ? CAP * kTreeWarps * 32 * 8 : 0;
}

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

__device__ __forceinline__ bool may_reach(float bound2, float worst) {
  return bound2 <= worst * kPruneSlack;
}

/// What one launch of the tree kNN kernels searches and where it writes.
struct TreeKnnArgs {
  const float4* queries = nullptr;   // sorted along the curve; w = original index
  int slot_begin = 0, slot_end = 0;  // the queries (sorted positions) of this launch
  bool self_search = false;          // the queries are the index's own points
  int k = 1;
  bool exclude_self = false;
  int out_slot_base = -1;  // < 0: row = original query index; else row = slot - out_slot_base
  int query_offset = 0;    // exclude_self: query i is reference i + query_offset
  RadiusBound bound;       // hybrid search: only points within the radius
  std::int32_t* out_idx = nullptr;
  float* out_dist = nullptr;
  int* outlier_slots = nullptr;
  int* outlier_count = nullptr;
  unsigned long long* evaluations = nullptr;

  __device__ std::size_t row(int slot, int qid) const {
    return static_cast<std::size_t>(out_slot_base < 0 ? qid : slot - out_slot_base) * k;
  }
};

/// Offers one point: the (rare) path after a threshold test passed. Kept out of line of the
/// unrolled distance loops so that the list update exists once per call site.
template <class List>
__device__ __forceinline__ void offer_point(float4 p, float4 q, int self, const RadiusBound& bound,
                                            List& best) {
  const float d = point_dist2(q, p);
  const int id = __float_as_int(p.w);
  if (best.improves(d, id) && id != self && bound.contains(q, p, d)) best.insert(d, id);
}

/// Scans 32 staged points for one query. The hot loop only computes distances and marks the
/// points within the current k-th distance in a bit mask (no branches, so lanes never wait on
/// each other there); the marked points are then offered one by one. Insertions are rare per
/// lane, but some lane of 32 inserts often: a per-point branch would make the whole warp wait
/// on each of them.
template <class List>
__device__ __forceinline__ void scan_staged(const float4* stage, float4 q, int self,
                                            const RadiusBound& bound, List& best) {
  const float worst = best.worst;
  unsigned mask = 0;
#pragma unroll
  for (int j = 0; j < kCell; ++j) mask |= (point_dist2(q, stage[j]) <= worst ? 1u : 0u) << j;
  while (mask) {
    const int j = __ffs(mask) - 1;
    mask &= mask - 1;
    offer_point(stage[j], q, self, bound, best);
  }
}

/// The cell a query falls into along the index's curve: the position of its key among the
/// sorted keys, divided by the cell size.
__device__ __forceinline__ int home_cell(const TreeView& t, float4 q) {
  const std::uint64_t key = morton_key(q.x, q.y, q.z, t.bounds);
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

template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32) knn_tree_kernel(TreeView t, TreeKnnArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kCell];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int first = a.slot_begin + (blockIdx.x * kTreeWarps + warp) * 32;
  if (first >= a.slot_end) return;  // whole warps only
  float4* stage = stage_all[warp];
  int* stack = stack_all[warp];
  const int k = a.k;
  const bool self_search = a.self_search;
  int* outlier_slots = a.outlier_slots;
  int* outlier_count = a.outlier_count;

  const int slot = first + lane;
  const float4 q = slot < a.slot_end ? a.queries[slot] : make_float4(NAN, NAN, NAN, 0.f);
  const int qid = __float_as_int(q.w);
  const int self = a.exclude_self ? qid + a.query_offset : -1;
  bool active = slot < a.slot_end && finite3(q.x, q.y, q.z) && t.levels > 0;
  bool outlier = false;
  TreeList<CAP> best;
  if constexpr (CAP <= kMaxSharedCap) {
    extern __shared__ float lists[];  // CAP distances, then CAP ids, per thread
    best.s = {lists + threadIdx.x, reinterpret_cast<int*>(lists + CAP * blockDim.x) + threadIdx.x,
              static_cast<int>(blockDim.x)};
  }
  best.init(k, a.bound.upper);
  unsigned long long evals = 0;  // lane-point distance computations

  const unsigned valid = __ballot_sync(kFullMask, active);
  if (valid) {
    const int cells = t.level_count[0];
    const int home = self_search ? min(slot / kCell, cells - 1) : home_cell(t, q);
    const int center = __shfl_sync(kFullMask, home, (valid >> 16) & 1 ? 16 : __ffs(valid) - 1);
    const int reach = (k + kCell - 1) / kCell;
    const int c0 = max(center - reach, 0), c1 = min(center + reach, cells - 1);

    // Cells to scan come from two places (the range around the queries' place on the curve,
    // then the tree walk); `next_cell` yields them one at a time so that the scan, and the list
    // update inside it, exists once in the kernel.
    float4 glo, ghi;       // box around the warp's active queries
    int sp = -1;           // tree-walk stack depth; -1 until the walk starts
    int range = c0;        // next cell of the initial range
    unsigned pending = 0;  // cells of the current level-1 node still to test, as lane bits
    int pending_first = 0;
    float4 cell_lo = make_float4(0.f, 0.f, 0.f, 0.f), cell_hi = cell_lo;
    float cell_near = INFINITY;  // this lane's pending cell: distance to the queries' center

    auto start_walk = [&]() {
      // Median first radius of the warp (bitonic sort across lanes; inactive lanes sort last),
      // floored at the curve's resolution so that exact duplicates (radius 0) flag nobody.
      float sorted = active ? best.worst : INFINITY;
#pragma unroll
      for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (int stride = size / 2; stride > 0; stride >>= 1) {
          const float other = __shfl_xor_sync(kFullMask, sorted, stride);
          const bool ascending = (lane & size) == 0;
          const bool lower = (lane & stride) == 0;
          sorted = lower == ascending ? fminf(sorted, other) : fmaxf(sorted, other);
        }
      }
      const float median = __shfl_sync(kFullMask, sorted, (__popc(valid) - 1) / 2);
      const float* b = t.bounds;
      const float extent = fmaxf(fmaxf(b[3] - b[0], b[4] - b[1]), b[5] - b[2]);
      const float floor2 = sq(extent / float(1 << kMortonBits));
      if (active && best.worst > kOutlierRatio * fmaxf(median, floor2)) {
        outlier_slots[atomicAdd(outlier_count, 1)] = slot;
        outlier = true;
        active = false;
      }
      glo = make_float4(warp_min(active ? q.x : INFINITY), warp_min(active ? q.y : INFINITY),
                        warp_min(active ? q.z : INFINITY), 0.f);
      ghi = make_float4(warp_max(active ? q.x : -INFINITY), warp_max(active ? q.y : -INFINITY),
                        warp_max(active ? q.z : -INFINITY), 0.f);
      sp = 0;
    };

    // Children [first, first + count) of a node at level `level` + 1: those whose box may be
    // reached from the warp's queries. Cells become `pending` bits; nodes go on the stack.
    auto open_children = [&](int level, int first_child, int count) {
      const float radius2 = warp_max(active ? best.worst : 0.f);
      const int c = first_child + lane;
      bool pass = false;
      float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
      if (lane < count) {
        const int at = t.level_offset[level] + c;
        lo = t.box_lo[at];
        hi = t.box_hi[at];
        pass =
            may_reach(box_gap2(lo, hi, glo, ghi), radius2) && !(level == 0 && c >= c0 && c <= c1);
      }
      const unsigned mask = __ballot_sync(kFullMask, pass);
      if (level == 0) {
        pending = mask;
        pending_first = first_child;
        cell_lo = lo;
        cell_hi = hi;
        // Scan the cells nearest the warp's queries first: the lists then settle early and later
        // cells cause fewer insertions (and are more often skipped by the exact per-lane test).
        const float4 center = make_float4(0.5f * (glo.x + ghi.x), 0.5f * (glo.y + ghi.y),
                                          0.5f * (glo.z + ghi.z), 0.f);
        cell_near = pass ? box_dist2(center, lo, hi) : INFINITY;
        return;
      }
      const int count_pushed = __popc(mask);
      // Reversed, so that the lowest child (nearest along the curve) is popped first.
      if (pass)
        stack[sp + count_pushed - 1 - __popc(mask & ((1u << lane) - 1))] = encode_node(level, c);
      __syncwarp();
      sp += count_pushed;
    };

    auto next_cell = [&]() -> int {
      if (range <= c1) return range++;
      if (sp < 0) {
        start_walk();
        if (!__any_sync(kFullMask, active)) return -1;
        open_children(t.levels - 1, 0, t.level_count[t.levels - 1]);
      }
      for (;;) {
        while (pending) {
          const float nearest = warp_min(pending >> lane & 1 ? cell_near : INFINITY);
          const int j =
              __ffs(__ballot_sync(kFullMask, (pending >> lane & 1) && cell_near == nearest)) - 1;
          pending &= ~(1u << j);
          const float4 lo = make_float4(__shfl_sync(kFullMask, cell_lo.x, j),
                                        __shfl_sync(kFullMask, cell_lo.y, j),
                                        __shfl_sync(kFullMask, cell_lo.z, j), 0.f);
          const float4 hi = make_float4(__shfl_sync(kFullMask, cell_hi.x, j),
                                        __shfl_sync(kFullMask, cell_hi.y, j),
                                        __shfl_sync(kFullMask, cell_hi.z, j), 0.f);
          if (__any_sync(kFullMask, active && may_reach(box_dist2(q, lo, hi), best.worst)))
            return pending_first + j;
        }
        if (sp == 0) return -1;
        const int e = stack[--sp];
        __syncwarp();  // every lane has read the entry before any lane pushes over it
        const int level = node_level(e), index = node_index(e);
        const int at = t.level_offset[level] + index;
        const bool want = active && may_reach(box_dist2(q, t.box_lo[at], t.box_hi[at]), best.worst);
        if (!__any_sync(kFullMask, want)) continue;
        const int first_child = index * kFanout;
        open_children(level - 1, first_child, min(kFanout, t.level_count[level - 1] - first_child));
      }
    };

    auto load_cell = [&](int cell) {
      const int i = cell * kCell + lane;
      return cell >= 0 && i < t.n
                 ? t.points[i]
                 : make_float4(INFINITY, INFINITY, INFINITY, __int_as_float(INT_MAX));
    };
    // Software pipeline: the next cell is chosen, and its load issued, before the current one is
    // scanned, so the load's latency overlaps the scan. Choosing it with the radii from before
    // the scan is conservative (radii only shrink). The walk itself starts only after the first
    // range is fully scanned, because it decides outliers from the radii that range gives.
    int cell = next_cell();
    float4 p = load_cell(cell);
    while (cell >= 0) {
      int following = -2;
      float4 p_next;
      if (range <= c1 || sp >= 0) {
        following = next_cell();
        p_next = load_cell(following);
      }
      __syncwarp();
      stage[lane] = p;
      __syncwarp();
      evals += kCell * __popc(__ballot_sync(kFullMask, active));
      if (active) scan_staged(stage, q, self, a.bound, best);
      if (following == -2) {
        following = next_cell();
        p_next = load_cell(following);
      }
      cell = following;
      p = p_next;
    }
  }

  if (slot < a.slot_end && !outlier) {
    const std::size_t row = a.row(slot, qid);
    best.write(a.out_idx + row, a.out_dist + row, nullptr);
  }
  if (lane == 0 && evals) atomicAdd(a.evaluations, evals);
}

/// One warp per outlier query: depth-first, nearest child first, so that the radius shrinks as
/// fast as it can. Lane t tests child t of a node (children sorted by distance across the warp
/// and pushed nearest-on-top) and computes the distance to point t of a cell; every lane keeps
/// the same list, updated with the cell's candidates in lane order.
template <int CAP>
__device__ void search_outlier(const TreeView& t, const TreeKnnArgs& a, int i, int* stack_node,
                               float* stack_d) {
  const int lane = threadIdx.x & 31;
  const int slot = a.outlier_slots[i];
  const float4 q = a.queries[slot];
  const int qid = __float_as_int(q.w);
  const int self = a.exclude_self ? qid + a.query_offset : -1;
  TopK<CAP, false> best;
  best.init(a.k, a.bound.upper);
  unsigned long long evals = 0;
  int sp = 0;

  // Pushes the children [first, first + n) at `level` that may hold a neighbor, nearest on top.
  auto push_children = [&](int level, int first, int n) {
    float key = -INFINITY;
    int node = 0;
    if (lane < n) {
      const int at = t.level_offset[level] + first + lane;
      const float d = box_dist2(q, t.box_lo[at], t.box_hi[at]);
      if (may_reach(d, best.worst)) key = d;
      node = encode_node(level, first + lane);
    }
    const int passing = __popc(__ballot_sync(kFullMask, key != -INFINITY));
    // Bitonic sort across lanes, descending by distance (non-passing lanes, at -inf, sort last).
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        const float other_key = __shfl_xor_sync(kFullMask, key, stride);
        const int other_node = __shfl_xor_sync(kFullMask, node, stride);
        const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
        if (keep_max ? other_key > key : other_key < key) {
          key = other_key;
          node = other_node;
        }
      }
    }
    if (lane < passing) {
      stack_node[sp + lane] = node;
      stack_d[sp + lane] = key;
    }
    __syncwarp();
    sp += passing;
  };

  push_children(t.levels - 1, 0, t.level_count[t.levels - 1]);
  while (sp > 0) {
    --sp;
    const int e = stack_node[sp];
    const float bound = stack_d[sp];
    __syncwarp();
    if (!may_reach(bound, best.worst)) continue;
    const int level = node_level(e), index = node_index(e);
    if (level > 0) {
      const int first = index * kFanout;
      push_children(level - 1, first, min(kFanout, t.level_count[level - 1] - first));
      continue;
    }
    const int j = index * kCell + lane;
    const float4 p =
        j < t.n ? t.points[j] : make_float4(INFINITY, INFINITY, INFINITY, __int_as_float(INT_MAX));
    const float d = point_dist2(q, p);
    const int id = __float_as_int(p.w);
    evals += min(kCell, t.n - index * kCell);
    unsigned better =
        __ballot_sync(kFullMask, best.improves(d, id) && id != self && a.bound.contains(q, p, d));
    while (better) {
      const int src = __ffs(better) - 1;
      better &= better - 1;
      const float cd = __shfl_sync(kFullMask, d, src);
      const int cid = __shfl_sync(kFullMask, id, src);
      if (best.improves(cd, cid)) best.insert(cd, cid);
    }
  }
  if (lane == 0) {
    const std::size_t row = a.row(slot, qid);
    best.write(a.out_idx + row, a.out_dist + row, nullptr);
    atomicAdd(a.evaluations, evals);
  }
}

/// The outliers the main kernel listed, a warp each, over a fixed grid: the count is read on the
/// device, so the launch needs no round trip to the host.
template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32)
    knn_tree_outlier_kernel(TreeView t, TreeKnnArgs a) {
  __shared__ int node_all[kTreeWarps][kTreeStack];
  __shared__ float dist_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32;
  const int count = *a.outlier_count;
  for (int i = blockIdx.x * kTreeWarps + warp; i < count; i += gridDim.x * kTreeWarps)
    search_outlier<CAP>(t, a, i, node_all[warp], dist_all[warp]);  // whole warps only
}

}  // namespace pcnn::detail
