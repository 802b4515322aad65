// pcnn Python module — cloud statistics on the CPU, for machines without a usable GPU.
#pragma once

#include "pcnn/points.hpp"
#include "pcnn/stats.hpp"

namespace pcnn_python {

/// What pcnn::gpu_cloud_stats computes (count, finite, bounds, centroid, population covariance
/// of the finite points), on the CPU: sums in long double, the covariance in a second pass over
/// deviations from the centroid (no cancellation for clouds far from the origin). `pts` is in
/// host memory, float32 or float64. Called without the GIL.
pcnn::CloudStats host_cloud_stats(const pcnn::PointsView& pts);

}  // namespace pcnn_python
