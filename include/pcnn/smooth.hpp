// pcnn — smoothing: stencils over organized clouds, Laplacian and Taubin smoothing over the k
// nearest neighbors of unorganized ones.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

#include "pcnn/cuda_stream.hpp"

namespace pcnn {

/// The largest stencil radius: stencils are at most (2 * 7 + 1)² = 225 coefficients.
inline constexpr int kMaxStencilRadius = 7;

/// Coefficients of a stencil over the grid of an organized cloud, centered on the point.
/// Separable: `weights` are the 2R + 1 taps w of a 1-D kernel and the stencil is w(dy) * w(dx);
/// otherwise `weights` are the (2R + 1)² coefficients, row-major (dy outer, dx inner). They need
/// not sum to 1: the smoothing divides by the sum over the neighbors it uses.
struct Stencil {
  int radius = 2;
  bool separable = true;
  std::vector<float> weights;
};

/// box:R (all ones), gaussian:R:SIGMA (exp(-d²/2σ²), separable), from a list of 2R + 1 taps
/// (separable) or a grid of (2R + 1)² coefficients.
Stencil box_stencil(int radius);
Stencil gaussian_stencil(int radius, double sigma);
Stencil stencil_from_taps(const std::vector<float>& taps);
Stencil stencil_from_grid(const std::vector<float>& grid);

/// Parses "box:R", "gaussian:R:SIGMA", "list:c0,c1,..." (1-D taps, separable) or
/// "grid:c0,c1,..." (full 2-D, row-major). Throws pcnn::error naming the problem.
Stencil parse_stencil(const std::string& spec);

/// `s` with its coefficients scaled by the power of two that puts the largest magnitude in
/// [0.5, 1): the same ratios exactly, so the same smoothing, bit for bit, as long as nothing
/// overflows or underflows; coefficients such as 1e20 or 1e-24 then do neither (their float
/// products overflowed to NaN points, or underflowed to no smoothing). Both backends smooth with
/// it.
Stencil normalized(Stencil s);

/// Checks a stencil: radius 0..kMaxStencilRadius, the right number of coefficients, all finite,
/// a positive sum (of the taps, or of the grid) and a positive center weight. Throws pcnn::error.
void validate(const Stencil& s);

/// What an organized-cloud smoothing changes: the range (distance from the sensor, moving each
/// point along its ray) or z alone (x and y kept).
enum class SmoothValue { range, z };

/// Smoothing of an organized cloud (a width × height grid; invalid points are NaN).
struct OrganizedSmoothParams {
  Stencil stencil = gaussian_stencil(2, 1.0);
  SmoothValue value = SmoothValue::range;
  /// The sensor (ray origin) in the cloud's coordinates, for SmoothValue::range.
  std::array<float, 3> sensor{0.f, 0.f, 0.f};
  /// > 0: neighbors whose value differs from the point's by more are not used (edges survive).
  float depth_jump = 0;
  /// > 0: no value moves by more than this.
  float max_move = 0;
};

/// Smoothing of an unorganized cloud over each point's k nearest neighbors:
/// p' = p + λ (weighted mean of the neighbors - p), `iterations` times (Laplacian), or each
/// iteration a λ step then a μ step (Taubin, μ < -λ < 0, which undoes the shrinking).
struct UnorganizedSmoothParams {
  int k = 16;
  float lambda = 0.5f;
  float mu = 0.f;  ///< 0: Laplacian; < 0: Taubin
  int iterations = 10;
  /// Neighbor weights: by rank (`rank_weights`, k entries, empty for all 1) or by distance
  /// (a Gaussian of d / h, h the point's mean neighbor distance, from a 64-entry table).
  enum class Weights { rank, distance } weights = Weights::rank;
  std::vector<float> rank_weights;
  /// > 0: no point ends farther than this from where it started.
  float max_move = 0;
};

void validate(const OrganizedSmoothParams& p);
void validate(const UnorganizedSmoothParams& p);

/// The Gaussian table distance weights come from: entry t is exp(-x²/2) at x = t / 16.
inline constexpr int kDistanceTable = 64;
std::array<float, kDistanceTable> distance_weight_table();

/// Device time of a smoothing, in milliseconds (CUDA events).
struct SmoothTimings {
  float upload_ms = 0;
  float knn_ms = 0;     ///< unorganized: the neighbor search (once)
  float smooth_ms = 0;  ///< the smoothing kernels
  float download_ms = 0;
  bool separable = false;  ///< organized: the two-pass path ran
};

/// Smooths an organized cloud on the GPU; returns the new xyz (3 floats per point, NaN where the
/// input was invalid). Calls on different streams (or threads) run concurrently: the coefficients
/// travel with each kernel launch.
/// The separable path runs when the stencil is separable and depth_jump is 0.
std::vector<float> gpu_smooth_organized(PointsView pts, int width, int height,
                                        const OrganizedSmoothParams& params,
                                        SmoothTimings* timings = nullptr,
                                        cudaStream_t stream = nullptr);

/// Smooths an unorganized cloud on the GPU (neighbors from a pcnn::Index on the device, computed
/// once). Returns once the device is idle (the call's memory pool goes: see PoolResource).
std::vector<float> gpu_smooth_unorganized(PointsView pts, const UnorganizedSmoothParams& params,
                                          SmoothTimings* timings = nullptr,
                                          cudaStream_t stream = nullptr);

}  // namespace pcnn
