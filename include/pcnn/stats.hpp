// pcnn — cloud statistics by GPU reductions.
#pragma once

#include <array>
#include <cstdint>

#include "pcnn/points.hpp"

#include "pcnn/cuda_stream.hpp"

namespace pcnn {

/// Bounds, centroid and covariance of the finite points of a cloud (coordinates in the units
/// of the input, covariance in units squared).
struct CloudStats {
  std::int64_t count = 0;   ///< all points
  std::int64_t finite = 0;  ///< points with finite x, y and z
  std::array<double, 3> min{}, max{}, centroid{};
  /// Population covariance (divided by `finite`): xx, xy, xz, yy, yz, zz.
  std::array<double, 6> covariance{};
  float device_ms = 0;  ///< GPU time of the reduction (CUDA events), without transfers
};

/// Statistics of a per-point value; non-finite values are skipped.
struct ValueStats {
  std::int64_t count = 0;  ///< finite values
  double min = 0, max = 0, mean = 0;
  double stddev = 0;  ///< sample standard deviation (divided by count - 1), 0 below 2 values
};

/// Cloud statistics on the GPU: one pass of warp-shuffle reductions, accumulated in double,
/// deterministic (the same result run to run). Points with a non-finite coordinate are skipped.
/// @param[in] pts points in host memory (uploaded first) or device memory (reduced in place,
///            for pipelines that keep clouds on the GPU)
/// @throws pcnn::invalid_argument_error on an invalid view; pcnn::cuda_error on device failures.
/// Synchronizes with `stream`.
CloudStats gpu_cloud_stats(PointsView pts, cudaStream_t stream = nullptr);

/// Statistics of `n` values in device memory. Synchronizes with `stream`.
ValueStats gpu_value_stats_device(const float* values, std::int64_t n,
                                  cudaStream_t stream = nullptr);

}  // namespace pcnn
