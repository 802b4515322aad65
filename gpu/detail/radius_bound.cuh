// The exact "within radius r" test (d² <= r², inclusive) of radius and hybrid searches.
//
// Squared distances are computed in float for speed, and a float distance can differ from the
// exact one by a few units in the last place. Points whose float distance lies clearly inside or
// outside are decided by it; the few within rounding of r² are decided by recomputing the
// distance in double exactly as the CPU reference does (same operations, same order, no fused
// multiply-add), so that GPU and reference agree on every boundary point.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace pcnn::detail {

/// The reference's squared distance, bit for bit: ((dx*dx + dy*dy) + dz*dz) in double.
__device__ __forceinline__ double exact_dist2(float4 q, float4 p) {
  const double dx = __dsub_rn(double(q.x), double(p.x)), dy = __dsub_rn(double(q.y), double(p.y)),
               dz = __dsub_rn(double(q.z), double(p.z));
  return __dadd_rn(__dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)), __dmul_rn(dz, dz));
}

struct RadiusBound {
  float lower = INFINITY;  // float distance below this: inside for certain
  float upper = INFINITY;  // float distance above this: outside for certain
  double r2 = INFINITY;    // the exact test in between

  __device__ __forceinline__ bool contains(float4 q, float4 p, float d) const {
    return d < lower || (d <= upper && exact_dist2(q, p) <= r2);
  }
};

/// The bound for radius `r` (>= 0; infinity for no bound). The float distance's relative error
/// is below 1e-6 (three roundings in the differences, three in the squares and sums), so a band
/// of 1e-5 around r² holds every point the float test could misjudge; the absolute term covers
/// distances that underflow.
inline RadiusBound make_radius_bound(double r) {
  RadiusBound b;
  if (std::isinf(r)) return b;
  b.r2 = r * r;
  const double lo = b.r2 * (1 - 1e-5) - 1e-30, hi = b.r2 * (1 + 1e-5) + 1e-30;
  b.lower = lo > 0 ? std::nextafter(static_cast<float>(lo), 0.f) : 0.f;
  b.upper = std::nextafter(static_cast<float>(hi), INFINITY);
  return b;
}

}  // namespace pcnn::detail
