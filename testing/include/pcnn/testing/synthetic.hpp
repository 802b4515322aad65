// pcnn testing — synthetic clouds for tests, benchmarks and the sample data.
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
  noreturns,  ///< the LiDAR-like sweep with its missed rays stored at the origin, as organized
              ///< scans store no-returns (so n points cover less of a revolution): 5-10 % of
              ///< the points identical
  repeated,   ///< n / 50 uniform points, each stored 50 times
  identical,  ///< every point the same
  line,       ///< uniform on a segment through the cube
  plane,      ///< uniform on a tilted plane through the cube
};

/// The kinds' names, comma-separated, as parse_synthetic_kind takes them.
std::string synthetic_kind_names();

/// Parses a kind's name (synthetic_kind_names()); throws pcnn::error otherwise.
SyntheticKind parse_synthetic_kind(const std::string& name);
const char* to_string(SyntheticKind kind);

/// `n` points, packed xyz (3 floats each), in meters; the same seed gives the same cloud.
std::vector<float> make_synthetic_cloud(SyntheticKind kind, std::int64_t n, std::uint64_t seed);

/// An organized depth-camera scene, `width` × `height` points row-major (pinhole camera at the
/// origin looking along +z, focal length 0.8 × width): a tilted wall about 4 m away and a box face
/// at 2 m covering the middle third (sharp depth edges), depth noise of `noise` meters (Gaussian),
/// and a fraction `holes` of the pixels invalid (NaN), in small blobs. `truth`, when given,
/// receives the noise-free points (NaN at the holes).
std::vector<float> make_depth_scene(int width, int height, double noise, double holes,
                                    std::uint64_t seed, std::vector<float>* truth = nullptr);

}  // namespace pcnn
