// pcnn — synthetic clouds for tests, benchmarks and the sample data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pcnn {

/// Kinds of synthetic cloud.
enum class SyntheticKind {
  uniform,    ///< uniform in a 100 m cube centered on the origin
  clustered,  ///< Gaussian blobs of different sizes and weights in the same cube
  lidar,      ///< a spinning 64-beam sensor 1.8 m above a scene of ground, walls, boxes and poles:
              ///< rings, dense near the sensor, sparse far away, with range noise
  hotspot,    ///< uniform, with n / 320 points packed in a ball of 0.5 m radius at the center:
              ///< at 1M points and the radius that gives the uniform part 32 neighbors
              ///< (1.97 m), 0.3% of the queries have ~100x the mean neighborhood
};

/// Parses "uniform", "clustered", "lidar" or "hotspot"; throws pcnn::error otherwise.
SyntheticKind parse_synthetic_kind(const std::string& name);
const char* to_string(SyntheticKind kind);

/// `n` points, packed xyz (3 floats each), in meters; the same seed gives the same cloud.
std::vector<float> make_synthetic_cloud(SyntheticKind kind, std::int64_t n, std::uint64_t seed);

}  // namespace pcnn
