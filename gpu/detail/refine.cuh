// Exact refinement of the float search (DESIGN.md, "Precision: exact means exact").
//
// The tree search runs in float on filter coordinates: the caller's coordinates, shifted by an
// origin and scaled by a power of two, rounded to float (exactly the caller's floats when they
// are floats of a sensible magnitude). It is exact for the float distances it computes. Its list
// (TopK; HeapTopK, the kNN walk's from k = 32; or the hybrid's heap) keeps the k best by float
// distance, as positions in the index's sorted points, and `spill`, the smallest float distance of
// any point it was offered and did not keep; the scan offers every point within FilterError::widen
// of the list's k-th float distance. Which of two points at the same float distance is kept does
// not matter to what follows. The search kernel's epilogue then settles each row in double
// precision from the coordinates as the caller stored them (settle_row):
//
//   D  = the largest exact squared distance among the k kept. The true k nearest all lie at
//        exact distance <= D (the k kept are k points within D).
//   R² = FilterError::reach(D): no point at exact distance <= D has a float filter distance
//        above R² (the bound below covers the filter's rounding and the float arithmetic).
//   Every point at float distance <= R² was offered: R² <= widen(k-th float distance) while D
//   is finite (a D of +inf, a square overflowing double, always goes to the gather), and the
//   list's limit only shrinks. So if spill > R² (or nothing spilled), no point outside the k
//   can be among the k nearest: sorting those k by (exact distance, index) gives the row. If
//   only the nearest spilled point lies within R² (the second spilled distance > R²), the row is
//   the k smallest of the k and that point. Otherwise the row is flagged, and a fixed-radius
//   walk with radius R (the gather) collects every candidate and keeps the k smallest by (exact
//   distance, index): several points tied within rounding of the k-th are rare in measured data
//   but everywhere on lattices.
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

#include "exact.cuh"
#include "radius_bound.cuh"
#include "topk.cuh"
#include "warp_reduce.cuh"

namespace pcnn::detail {

/// What settling the rows of a launch needs besides the list (every tree kNN and hybrid launch).
struct SettleArgs {
  ExactCoords refs;     // the indexed points
  ExactCoords queries;  // the queries, by original query index
  FilterError err;
  const float4* points = nullptr;  // the index's sorted points: position -> original index
  // The filter coordinates are the caller's own (float input, no shift, no scale): exact
  // distances then come from the sorted points and the query's filter coordinates, which are
  // local reads, rather than from the caller's arrays in original order.
  bool filter_exact = false;
  float term = INFINITY;  // err.widen_term()
  // Flagged rows, for the gather: a group per warp that flagged any, (first slot, lane mask),
  // and each flagged row's reach at [slot - slot_begin of the launch].
  int2* groups = nullptr;
  int* group_count = nullptr;
  float* reach = nullptr;
  unsigned long long* refined = nullptr;  // counts the flagged rows (optional)

  /// The point at position `pos` of the index: its original index and its coordinates as stored.
  __device__ __forceinline__ double3 ref(int pos, int& id) const {
    const float4 p = points[pos];
    id = __float_as_int(p.w);
    return filter_exact ? make_double3(p.x, p.y, p.z) : refs.at(id);
  }
  /// A query's coordinates as stored, from its filter coordinates `q` and original index.
  __device__ __forceinline__ double3 query(float4 q, int qid) const {
    return filter_exact ? make_double3(q.x, q.y, q.z) : queries.at(qid);
  }
};

/// Writes a row: entries j < count as id(j) and d(j), the rest -1 and +inf; 16 bytes a store
/// where k and both pointers allow it. A row written into a peer device's memory (replicas,
/// RowShares) crosses NVLink a store at a time: four bytes a store made a 200M-point self-search
/// on two H100s 30 % slower than with every row local (bench/results/2026-11-28-round19.md).
template <class Id, class D>
__device__ __forceinline__ void write_row(std::int32_t* out_idx, float* out_dist, int k, int count,
                                          Id&& id, D&& d) {
  const auto bits =
      reinterpret_cast<std::uintptr_t>(out_idx) | reinterpret_cast<std::uintptr_t>(out_dist);
  if ((k & 3) == 0 && (bits & 15) == 0) {
    for (int j = 0; j < k; j += 4) {
      int4 i4;
      float4 d4;
      i4.x = j < count ? id(j) : -1;
      i4.y = j + 1 < count ? id(j + 1) : -1;
      i4.z = j + 2 < count ? id(j + 2) : -1;
      i4.w = j + 3 < count ? id(j + 3) : -1;
      d4.x = j < count ? d(j) : INFINITY;
      d4.y = j + 1 < count ? d(j + 1) : INFINITY;
      d4.z = j + 2 < count ? d(j + 2) : INFINITY;
      d4.w = j + 3 < count ? d(j + 3) : INFINITY;
      *reinterpret_cast<int4*>(out_idx + j) = i4;
      *reinterpret_cast<float4*>(out_dist + j) = d4;
    }
    return;
  }
  for (int j = 0; j < k; ++j) {
    out_idx[j] = j < count ? id(j) : -1;
    out_dist[j] = j < count ? d(j) : INFINITY;
  }
}

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
    write_row(
        out_idx, out_dist, k, count, [&](int i) { return id[i]; },
        [&](int i) { return __double2float_rn(d[i]); });
  }
};

/// Settles one row from the float search's list `s` (entries 0..count-1 kept, ascending by
/// float distance, as positions in the index; `spill` as TopK's) in double precision, for query
/// `q` (the caller's coordinates). Writes the row and returns true; or returns false, with
/// `reach` set, when the row must be gathered. The exact distances and original indices replace
/// the list's float distances and positions. They are almost always already in (exact distance,
/// index) order; a row where they are not, or where the nearest spilled point joins, is ranked
/// again (rare: near-ties within the float's rounding).
template <int CAP, class Slots>
__device__ __forceinline__ bool settle_row(Slots& s, int count, int k, const Spill& spill,
                                           double3 q, const SettleArgs& x, std::int32_t* out_idx,
                                           float* out_dist, float& reach) {
  double worst = 0, previous = -1;
  int previous_id = -1;
  bool in_order = true;
#pragma unroll 4
  for (int j = 0; j < count; ++j) {
    int id;
    const double d = exact_sqdist(q, x.ref(s.id(j), id));
    in_order = in_order && (previous < d || (previous == d && previous_id < id));
    previous = d;
    previous_id = id;
    worst = fmax(worst, d);
    s.set(j, __double2float_rn(d), id);
  }
  if (count == k && isinf(worst)) {  // a square overflowed double: the proof needs D finite,
    reach = INFINITY;                // and every point may tie at +inf (ranked by index)
    return false;
  }
  bool extra = false;     // the nearest spilled point may be among the k nearest
  if (!isnan(spill.d)) {  // a point outside the k was offered: is it far enough for certain?
    reach = x.err.reach(worst);
    extra = !(spill.d > reach);
    if (extra && !isnan(spill.d2) && !(spill.d2 > reach)) return false;
  }
  if (in_order && !extra) {
    write_row(
        out_idx, out_dist, k, count, [&](int j) { return s.id(j); }, [&](int j) { return s.d(j); });
    return true;
  }
  ExactList<CAP> list;  // rare: from the caller's arrays, by original index
  list.k = k;
  for (int j = 0; j < count; ++j) list.offer(exact_sqdist(q, x.refs.at(s.id(j))), s.id(j));
  if (extra) {
    int id;
    const double d = exact_sqdist(q, x.ref(spill.id, id));
    list.offer(d, id);
  }
  list.write(out_idx, out_dist);
  return true;
}

/// Records the rows a warp flagged (every lane calls; lane i's slot is first_slot + i, and
/// `slot_begin` is the launch's first slot): one group for the gather.
__device__ __forceinline__ void flag_rows(const SettleArgs& x, int slot_begin, int first_slot,
                                          bool flagged, float reach) {
  const unsigned mask = __ballot_sync(kFullMask, flagged);
  const int lane = threadIdx.x & 31;
  if (flagged) x.reach[first_slot + lane - slot_begin] = reach;
  if (mask && lane == 0) {
    x.groups[atomicAdd(x.group_count, 1)] = make_int2(first_slot, static_cast<int>(mask));
    if (x.refined) atomicAdd(x.refined, static_cast<unsigned long long>(__popc(mask)));
  }
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
  __device__ void hit(float4 p, float d, int) {
    const int id = __float_as_int(p.w);
    if (id == self || !bound.contains(q, p, d)) return;
    list.offer(exact_sqdist(qe, refs->at(id)), id);
  }
};

}  // namespace pcnn::detail
