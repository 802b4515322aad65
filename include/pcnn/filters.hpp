// pcnn — outlier filters with PCL's semantics, on the GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "pcnn/points.hpp"

#include "pcnn/cuda_stream.hpp"

namespace pcnn {

/// Statistical outlier removal, as pcl::StatisticalOutlierRemoval: a point's mean distance to
/// its mean_k nearest neighbors (itself excluded) is compared with mean + std_mul * stddev of
/// those means over the finite points; points above are removed. As in PCL, points with a
/// non-finite coordinate get a mean distance of 0 and are kept.
struct SorParams {
  int mean_k = 16;
  double std_mul = 1.0;
};

/// Radius outlier removal, as pcl::RadiusOutlierRemoval on a dense cloud: a point is kept when
/// at least `min_neighbors` other points lie within `radius` (the min_neighbors-th nearest other
/// point at squared distance <= radius^2, with PCL's float distances). Points with a non-finite
/// coordinate are removed. (PCL itself aborts on a cloud with such points — an assertion in its
/// radius search — so the comparison is with PCL on the cloud without them, which is what a PCL
/// user has to run.)
struct RorParams {
  double radius = 0;
  int min_neighbors = 1;
};

struct FilterResult {
  std::vector<std::int32_t> kept;  ///< indices of the points kept, ascending
  /// SOR: the statistics of the per-point mean distances and the resulting threshold.
  double mean = 0, stddev = 0, threshold = 0;
  /// SOR: points whose mean distance lies within 1e-12 (relative) of the threshold, where the
  /// order of a sum could decide; ROR: points whose neighbor count was settled exactly on the
  /// CPU because a neighbor lay within float rounding of the radius. Both are rare.
  std::int64_t borderline = 0;
  float search_ms = 0;  ///< device time of the neighbor search (index build + query)
  float filter_ms = 0;  ///< device time of the distance statistics and classification
};

/// Throw pcnn::error naming the bad parameter: mean_k outside 1..128, std_mul not finite;
/// radius not positive and finite, min_neighbors outside 0..128.
void validate(const SorParams& params);
void validate(const RorParams& params);

/// @param[in] pts points in host memory
/// @throws pcnn::error for mean_k outside 1..128 or a cloud of no more than mean_k finite
///         points; pcnn::cuda_error on device failures. Synchronizes with `stream`, and
///         returns once the device is idle (the call's memory pool goes: see PoolResource).
FilterResult gpu_statistical_outlier_removal(PointsView pts, SorParams params,
                                             cudaStream_t stream = nullptr);

/// @throws pcnn::error for radius <= 0 or not finite, or min_neighbors outside 0..128.
/// Synchronizes as gpu_statistical_outlier_removal does.
FilterResult gpu_radius_outlier_removal(PointsView pts, RorParams params,
                                        cudaStream_t stream = nullptr);

/// Squared distance as FLANN (and so PCL) computes it: ((dx*dx + dy*dy) + dz*dz) in float with
/// no fused multiply-add. The filters use it where PCL's decisions depend on the last bit.
inline float flann_sqdist(const float* a, const float* b) {
  const float dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  float r = dx * dx;
  r = r + dy * dy;
  return r + dz * dz;
}

}  // namespace pcnn
