// pcnn — surface normals and curvature from the neighborhoods an index finds, as PCL's
// NormalEstimation computes them (principal component analysis of each neighborhood).
//
//   pcnn::Index index(pcnn::host_points(xyz.data(), n));
//   pcnn::NormalParams p;
//   p.k = 16;                                             // or p.radius = 0.05 (p.max_nn = 32)
//   pcnn::NormalsResult r = pcnn::estimate_normals(index, p);   // r.normals: n × 3
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "pcnn/cuda_stream.hpp"
#include "pcnn/index.hpp"
#include "pcnn/points.hpp"

namespace pcnn {

/// Which neighborhood each point's normal comes from, and which way normals face. Give either
/// `k` or `radius`. Neighborhoods include the point itself (as PCL's searches return it); the
/// neighbors are the exact ones of the index (ties to the smaller index).
struct NormalParams {
  int k = 0;          ///< > 0: the k nearest points, 3..kMaxK (PCL's setKSearch)
  double radius = 0;  ///< > 0 (with k = 0): every point within radius (PCL's setRadiusSearch)
  int max_nn = 0;     ///< with radius: only the max_nn nearest within it, 3..kMaxK; 0: all
  /// Normals are turned so that dot(normal, viewpoint - point) >= 0 (PCL's
  /// flipNormalTowardsViewpoint; PCL's default viewpoint is the origin). In the coordinates of
  /// the indexed points (a cloud re-centered on an origin: the viewpoint minus that origin).
  std::array<double, 3> viewpoint{0.0, 0.0, 0.0};
};

/// Where the time of a normal estimation went, in milliseconds.
struct NormalTimings {
  Backend backend = Backend::automatic;  ///< the backend that ran
  double search_ms = 0;    ///< the neighbor search (CUDA: device time; CPU: wall clock)
  double normals_ms = 0;   ///< covariances and eigenvectors (CUDA: device time; CPU: wall clock)
  double download_ms = 0;  ///< CUDA, host outputs: normals and curvature to host memory
  double total_ms = 0;     ///< wall clock of the whole call
  int passes = 1;          ///< passes over the rows (more when the neighbor lists do not fit)
};

/// Owning normals of every indexed point.
struct NormalsResult {
  std::int64_t rows = 0;
  std::vector<float> normals;    ///< rows × 3, row-major (normal_x, normal_y, normal_z)
  std::vector<float> curvature;  ///< rows
  NormalTimings timings;
};

/// Checks the parameters: exactly one of k (3..kMaxK) and radius (finite, > 0); max_nn 0 or
/// 3..kMaxK and only with a radius; a finite viewpoint.
/// @throws pcnn::invalid_argument_error naming the parameter.
void validate(const NormalParams& params);

/// The normal and curvature of every indexed point (index.size() rows, in index order), into
/// the caller's `normals` (size() × 3) and `curvature` (size()), both in host memory or both in
/// device memory (CUDA backend only).
///
/// Per point, the covariance of its neighborhood about the neighborhood's mean is computed in
/// double precision from the indexed coordinates; the normal is the unit eigenvector of its
/// smallest eigenvalue λ0, turned towards the viewpoint; curvature = |λ0| / (λ0 + λ1 + λ2)
/// (the surface variation PCL reports). Both backends compute the same values bit for bit.
/// A point that is not finite, or whose neighborhood holds fewer than 3 points, gets NaN normal
/// and curvature; a neighborhood of coincident points gets a NaN normal and curvature 0 (as PCL).
/// float64 coordinates so large that the covariance overflows (neighbors ~1e154 apart) give NaN
/// too, and so small that its squares vanish (below ~1e-162) the coincident case: at those scales
/// the squared distances of the search overflow or vanish as well, so the neighborhoods are
/// chosen by index alone (bench/results/2026-12-01-round43.md).
/// The neighbor lists are produced and consumed on the device (CUDA) in passes that fit the
/// index's memory. The index's last_timings() describe the (last pass of the) neighbor search.
/// Synchronizes with `stream`.
/// @throws pcnn::invalid_argument_error (parameters, output shapes, device outputs with the CPU
///         backend), pcnn::out_of_memory_error, pcnn::cuda_error.
NormalTimings estimate_normals(Index& index, const NormalParams& params, MatrixView<float> normals,
                               ArrayView<float> curvature, cudaStream_t stream = nullptr);

/// The same into an owning result (host memory). Synchronizes.
NormalsResult estimate_normals(Index& index, const NormalParams& params,
                               cudaStream_t stream = nullptr);

}  // namespace pcnn
