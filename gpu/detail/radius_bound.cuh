// The exact "within radius r" test (d² <= r², inclusive) of radius and hybrid searches.
//
// Squared distances are computed in float on the search's filter coordinates for speed. Points
// whose float distance lies clearly inside or outside are decided by it; the few within rounding
// of r² are decided by the exact distance from the caller's coordinates (exact_sqdist, the
// reference's expression), so that the GPU and the reference agree on every boundary point. The
// band comes from FilterError (see refine.cuh for the proof): a point at exact d² <= r² has a
// float distance <= upper, and one with a float distance < lower has exact d² <= r².
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "exact.cuh"

namespace pcnn::detail {

struct RadiusBound {
  float lower = INFINITY;     // float distance below this: inside for certain
  float upper = INFINITY;     // float distance above this: outside for certain
  double r2 = INFINITY;       // the exact test in between
  ExactCoords refs, queries;  // the caller's coordinates (queries by original query index)
  // The filter coordinates are the caller's own (ExactSearch::filter_exact): exact distances
  // then come from `q` and `p` themselves, not from the caller's arrays in original order (a
  // random read for every neighbor a radius fill writes: with it, 1M uniform points' radius
  // search took 2.09-2.12 ms instead of 1.91, H100).
  bool filter_exact = false;

  /// The caller's coordinates of query `q` and of indexed point `p` (w: their original indices).
  /// The radius walk that writes keys takes its query's once: converted at every neighbor, they
  /// were 3 of the 7 conversions (F2F, a quarter-rate unit on sm_90) of each key it wrote.
  __device__ __forceinline__ double3 query(float4 q) const {
    return filter_exact ? make_double3(q.x, q.y, q.z) : queries.at(__float_as_int(q.w));
  }
  __device__ __forceinline__ double3 ref(float4 p) const {
    return filter_exact ? make_double3(p.x, p.y, p.z) : refs.at(__float_as_int(p.w));
  }
  /// The exact squared distance of query `q` and indexed point `p`. Written out rather than
  /// through query() and ref(): the hybrid's collect kernel compiled that way was 1 % slower.
  __device__ __forceinline__ double exact(float4 q, float4 p) const {
    if (filter_exact) return exact_sqdist(make_double3(q.x, q.y, q.z), make_double3(p.x, p.y, p.z));
    return exact_sqdist(queries.at(__float_as_int(q.w)), refs.at(__float_as_int(p.w)));
  }
  __device__ __forceinline__ bool contains(float4 q, float4 p, float d) const {
    if (d < lower) return true;
    if (!(d <= upper)) return false;
    return r2 == INFINITY || exact(q, p) <= r2;  // no bound: nothing to look up
  }
};

/// The bound for radius `r` (>= 0; infinity for no bound) of a search with these coordinates.
inline RadiusBound make_radius_bound(double r, const ExactSearch& ex) {
  RadiusBound b;
  b.refs = ex.refs;
  b.queries = ex.queries;
  b.filter_exact = ex.filter_exact;
  if (std::isinf(r)) return b;
  b.r2 = r * r;
  b.lower = ex.err.certain_inside(b.r2);
  b.upper = ex.err.reach(b.r2);
  return b;
}

}  // namespace pcnn::detail
