// The one formula for squared distances on the device: (a-b)^2 summed, with explicit roundings
// so that every kernel (and every place in a kernel) computes bit-identical values: a threshold
// test and the insertion it guards can never disagree, and all algorithms rank ties the same.
#pragma once

#include <cuda_runtime.h>

namespace pcnn::detail {

__device__ __forceinline__ float point_dist2(float4 q, float4 p) {
  const float dx = __fsub_rn(p.x, q.x), dy = __fsub_rn(p.y, q.y), dz = __fsub_rn(p.z, q.z);
  return __fmaf_rn(dz, dz, __fmaf_rn(dy, dy, __fmul_rn(dx, dx)));
}

/// The gap along one axis from v to [lo, hi] (0 inside). Rounding is monotonic, so for a point p
/// in the box, gap <= |p - v| as computed by point_dist2's subtraction.
__device__ __forceinline__ float axis_gap(float v, float lo, float hi) {
  return fmaxf(fmaxf(__fsub_rn(lo, v), __fsub_rn(v, hi)), 0.f);
}

/// Squared distance from a point to a box (0 inside): a lower bound of point_dist2 to any point
/// in the box, up to the last-bit effect of the fused multiply-adds (covered by the callers'
/// pruning slack).
__device__ __forceinline__ float box_dist2(float4 q, float4 lo, float4 hi) {
  const float gx = axis_gap(q.x, lo.x, hi.x), gy = axis_gap(q.y, lo.y, hi.y),
              gz = axis_gap(q.z, lo.z, hi.z);
  return __fmaf_rn(gz, gz, __fmaf_rn(gy, gy, __fmul_rn(gx, gx)));
}

}  // namespace pcnn::detail
