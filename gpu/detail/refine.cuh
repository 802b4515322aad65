// Exact refinement of the float search (DESIGN.md, "Precision: exact means exact").
//
// The tree search runs in float on filter coordinates: the caller's coordinates, shifted by an
// origin and scaled by a power of two, rounded to float (exactly the caller's floats when they
// are floats of a sensible magnitude). It is exact for the float distances it computes, and it
// looks for k + 1 neighbors. The refinement then settles each row in double precision from the
// coordinates as the caller stored them:
//
//   D  = the largest exact squared distance among the first k candidates. The true k nearest
//        all lie at exact distance <= D (the k candidates are k points within D).
//   R² = FilterError::reach(D): no point at exact distance <= D has a float filter distance
//        above R² (the bound below covers the filter's rounding and the float arithmetic).
//   If the (k + 1)-th candidate's float distance exceeds R², or there is none, no point outside
//   the first k can be among the k nearest: sorting those k by (exact distance, index) gives
//   the row. Otherwise the row is flagged, and a fixed-radius walk with radius R gathers every
//   candidate and keeps the k smallest by (exact distance, index): exact ties and near ties
//   between the k-th and the next are rare in measured data but everywhere on lattices.
//
// The bound: with filter coordinates x̃ = (x - o)·s + e, |e| <= δ per coordinate, the filter
// difference of two points is within 2√3·δ of s times the exact one (in length), and the float
// squared distance (three roundings of the differences, one of a product, two of fused
// multiply-adds) is within (1 + 6u) of the square of the filter difference, u = 2^-24, as long
// as nothing underflows; 2^-126 covers underflow. The exact distance itself is the reference's
// double expression, within 2^-50 of the real value, which the factor (1 + 2^-50) covers.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstdint>

#include "distance.cuh"
#include "exact.cuh"
#include "finite.cuh"
#include "knn_tree.cuh"
#include "radius_bound.cuh"
#include "radius_tree.cuh"
#include "spatial_index.cuh"
#include "warp_reduce.cuh"

namespace pcnn::detail {

/// What the refinement of one launch reads and writes.
struct RefineArgs {
  const float4* queries = nullptr;  // the search's sorted queries (w = original index)
  int slot_begin = 0, slot_end = 0;
  int out_slot_base = -1;  // as TreeKnnArgs: < 0, row = original query index
  int k = 1;               // columns of the result; the candidates have k + 1
  int self_offset = -1;    // >= 0: exclude_self, query i is indexed point i + self_offset
  RadiusBound bound;       // hybrid: membership (decided exactly)
  // From the float search: `width` candidates (k + 1, or k when k + 1 is over the list limit)
  // for each slot of the launch, row slot - slot_begin.
  const std::int32_t* cand_idx = nullptr;
  const float* cand_dist = nullptr;
  int width = 2;
  ExactCoords refs;           // the indexed points
  ExactCoords queries_exact;  // the queries, indexed by original query index
  FilterError err;
  std::int32_t* out_idx = nullptr;  // rows × k
  float* out_dist = nullptr;
  int* flagged_slots = nullptr;  // rows that need the gather, and their reach
  float* flagged_reach = nullptr;
  int* flagged_count = nullptr;
  unsigned long long* refined = nullptr;  // counts the flagged rows of every launch (optional)

  __device__ __forceinline__ std::size_t row(int slot, int qid) const {
    return static_cast<std::size_t>(out_slot_base < 0 ? qid : slot - out_slot_base);
  }
};

/// Up to CAP entries sorted by (exact distance, index), in the thread's own arrays.
template <int CAP>
struct ExactList {
  double d[CAP];
  int id[CAP];
  int count = 0;
  int k = 0;
  /// Keeps the k smallest: inserts (dist, nid) in order, dropping the last when full.
  __device__ __forceinline__ void offer(double dist, int nid) {
    if (count == k && !(dist < d[k - 1] || (dist == d[k - 1] && nid < id[k - 1]))) return;
    int i = count < k ? count++ : k - 1;
    for (; i > 0 && (d[i - 1] > dist || (d[i - 1] == dist && id[i - 1] > nid)); --i) {
      d[i] = d[i - 1];
      id[i] = id[i - 1];
    }
    d[i] = dist;
    id[i] = nid;
  }
  /// The row: indices and exact distances rounded to float, -1 / +inf padded.
  __device__ __forceinline__ void write(std::int32_t* out_idx, float* out_dist) const {
    for (int i = 0; i < k; ++i) {
      out_idx[i] = i < count ? id[i] : -1;
      out_dist[i] = i < count ? __double2float_rn(d[i]) : INFINITY;
    }
  }
};

/// One thread per query: the float search's k + 1 candidates decide the row, or flag it. The
/// exact distances of the first k are computed together (their reads in flight at once, kept in
/// registers for the small capacities), then written in the float search's order: almost always
/// that is already their order by (exact distance, index). A row where it is not is ranked again
/// in a list (rare: near-ties within the float's rounding).
template <int CAP>
__global__ void __launch_bounds__(128) refine_kernel(RefineArgs a) {
  const int slot = a.slot_begin + blockIdx.x * blockDim.x + threadIdx.x;
  if (slot >= a.slot_end) return;
  const int qid = __float_as_int(a.queries[slot].w);
  const std::size_t row = a.row(slot, qid);
  const int k = a.k;
  const std::size_t cand_row = static_cast<std::size_t>(slot - a.slot_begin) * a.width;
  const std::int32_t* ci = a.cand_idx + cand_row;
  const float* cd = a.cand_dist + cand_row;
  const double3 q = a.queries_exact.at(qid);
  int id[CAP];
  double d[CAP];
#pragma unroll
  for (int j = 0; j < CAP; ++j) id[j] = j < k ? ci[j] : -1;  // found candidates come first
#pragma unroll
  for (int j = 0; j < CAP; ++j) d[j] = id[j] >= 0 ? exact_sqdist(q, a.refs.at(id[j])) : INFINITY;
  int count = 0;
  double worst = 0;
  bool in_order = true;
#pragma unroll
  for (int j = 0; j < CAP; ++j) {
    if (id[j] < 0) continue;
    ++count;
    worst = fmax(worst, d[j]);
    if (j > 0) in_order = in_order && (d[j - 1] < d[j] || (d[j - 1] == d[j] && id[j - 1] < id[j]));
  }
  if (count == k) {  // full: is the (k + 1)-th candidate far enough to leave out for certain?
    const float reach = a.err.reach(worst);
    if (a.width == k || (ci[k] >= 0 && !(cd[k] > reach))) {
      const int at = atomicAdd(a.flagged_count, 1);
      a.flagged_slots[at] = slot;
      a.flagged_reach[at] = reach;
      if (a.refined) atomicAdd(a.refined, 1ull);
      return;  // the gather writes the row
    }
  }
  std::int32_t* oi = a.out_idx + row * k;
  float* od = a.out_dist + row * k;
  if (in_order) {
#pragma unroll
    for (int j = 0; j < CAP; ++j)
      if (j < k) {
        oi[j] = id[j];
        od[j] = id[j] >= 0 ? __double2float_rn(d[j]) : INFINITY;
      }
    return;
  }
  ExactList<CAP> list;
  list.k = k;
#pragma unroll
  for (int j = 0; j < CAP; ++j)
    if (id[j] >= 0) list.offer(d[j], id[j]);
  list.write(oi, od);
}

/// The gather of a flagged row: every point within its reach (and, for hybrid, within r),
/// kept by (exact distance, index).
template <int CAP>
struct ExactSink {
  float4 q;  // filter coordinates
  double3 qe;
  int self;
  RadiusBound bound;
  const ExactCoords* refs;
  float reach;
  ExactList<CAP> list;
  __device__ float limit() const { return reach; }
  __device__ void hit(float4 p, float d) {
    const int id = __float_as_int(p.w);
    if (id == self || !bound.contains(q, p, d)) return;
    list.offer(exact_sqdist(qe, refs->at(id)), id);
  }
};

/// Flagged rows, a lane each, over a fixed grid (their count is read on the device). Lanes of a
/// warp walk together, so the walk's reach is the warp's largest.
template <int CAP>
__global__ void __launch_bounds__(kTreeWarps * 32) refine_gather_kernel(TreeView t, RefineArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kCell];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int count = *a.flagged_count;
  for (int base = (blockIdx.x * kTreeWarps + warp) * 32; base < count;
       base += gridDim.x * kTreeWarps * 32) {
    const int i = base + lane;
    const bool on = i < count;
    const int slot = on ? a.flagged_slots[i] : a.slot_begin;
    const float4 q = a.queries[slot];
    const int qid = __float_as_int(q.w);
    ExactSink<CAP> sink{q,
                        a.queries_exact.at(qid),
                        a.self_offset >= 0 ? qid + a.self_offset : -1,
                        a.bound,
                        &a.refs,
                        on ? a.flagged_reach[i] : 0.f,
                        {}};
    sink.list.k = a.k;
    const float reach = warp_max(on ? sink.reach : 0.f);
    radius_walk(t, q, on && t.levels > 0, reach * kPruneSlack, stage_all[warp], stack_all[warp],
                sink);
    if (on) {
      const std::size_t row = a.row(slot, qid);
      sink.list.write(a.out_idx + row * a.k, a.out_dist + row * a.k);
    }
  }
}

}  // namespace pcnn::detail
