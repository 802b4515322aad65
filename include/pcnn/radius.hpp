// pcnn — exact radius search (every neighbor within r) and hybrid search (at most max_nn nearest
// within r).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace pcnn {

/// What a radius search looks for: every reference point p with |p - q|² <= radius²
/// (inclusive), the squared distance computed in double precision from the float coordinates.
struct RadiusParams {
  double radius = 0;          ///< finite, >= 0 (0 finds exact duplicates)
  bool exclude_self = false;  ///< self-search only: a point is not its own neighbor
  /// Results go to the host in one pass when they fit in the device memory available, else in
  /// passes over the queries. A value > 0 caps the queries per pass (rounded up to 128).
  std::int64_t max_rows_per_pass = 0;
};

/// Radius results in CSR form: the neighbors of query q are entries offsets[q] .. offsets[q+1]-1
/// of `indices` and `sqdist`, sorted by (squared distance, index). `sqdist` holds the exact
/// double squared distance rounded to float. Queries with non-finite coordinates have no
/// neighbors. Sizes are exact: nothing is truncated.
struct RadiusResult {
  std::int64_t rows = 0;
  std::vector<std::int64_t> offsets;  ///< rows + 1 entries, offsets[0] == 0
  std::vector<std::int32_t> indices;  ///< offsets[rows] entries
  std::vector<float> sqdist;          ///< offsets[rows] entries
  std::int64_t count(std::int64_t q) const { return offsets[q + 1] - offsets[q]; }
};

/// Exact radius search on the GPU over the spatial index; the same neighbors, in the same order,
/// with the same distances as reference_radius(). The count pass sizes the output exactly; when
/// the results do not fit in the device memory available they are produced in passes (see
/// RadiusParams::max_rows_per_pass), and when not even one query's neighbors fit it throws
/// pcnn::out_of_memory_error with the needed and available bytes. `timings`, when given, gets
/// upload, build (index and query ordering), search (count and fill), download.
/// @throws pcnn::error on invalid arguments (radius negative or not finite, plus those of
///         gpu_knn); pcnn::no_device_error, pcnn::out_of_memory_error, pcnn::cuda_error.
RadiusResult gpu_radius_search(PointsView refs, const PointsView* queries, RadiusParams params,
                               GpuKnnTimings* timings = nullptr, cudaStream_t stream = nullptr);

/// What a hybrid search looks for: the `max_nn` nearest neighbors among those within `radius`.
struct HybridParams {
  double radius = 0;
  int max_nn = 8;  ///< 1..kMaxK
  bool exclude_self = false;
  std::int64_t max_rows_per_pass = 0;  ///< as in KnnParams
};

/// Hybrid results: dense rows of `max_nn` (a KnnResult with k = max_nn, -1 / +inf padded, the
/// same conventions and tie-breaking as gpu_knn), and how many entries of each row are filled.
struct HybridResult {
  KnnResult knn;
  std::vector<std::int32_t> counts;  ///< per query, 0..max_nn
};

/// Hybrid search on the GPU: the radius search's walk over the index with a bounded list per
/// query (filled, then kept as a max-heap of the max_nn nearest), so it needs no count pass and
/// its output is dense. Membership (d² <= r²) is decided exactly, as in gpu_radius_search; among
/// the members, the nearest by (float distance, index) as in gpu_knn. Throws as gpu_knn does, and
/// on an invalid radius.
HybridResult gpu_hybrid_search(PointsView refs, const PointsView* queries, HybridParams params,
                               GpuKnnTimings* timings = nullptr, cudaStream_t stream = nullptr);

/// Checks a radius (finite, >= 0); throws pcnn::error naming the problem.
void validate_radius(double radius);

/// Exact references in double precision on all CPU cores (costs queries × references distance
/// evaluations), for tests and --compare-cpu.
RadiusResult reference_radius(PointsView refs, const PointsView* queries, RadiusParams params);
HybridResult reference_hybrid(PointsView refs, const PointsView* queries, HybridParams params);

/// How two radius results for the same inputs agree (e.g. pcnn and PCL, whose float distances
/// can put a point within rounding of r on either side).
struct RadiusAgreement {
  std::int64_t rows = 0;
  std::int64_t identical_rows = 0;   ///< the same neighbors in the same order
  std::int64_t agreeing_rows = 0;    ///< the same neighbors up to points within rounding of r
  std::int64_t boundary_points = 0;  ///< neighbors listed by one side only, within rounding of r
  std::int64_t first_bad_row = -1;
  std::string first_problem;
  bool all_agree() const { return agreeing_rows == rows; }
};

/// Compares row by row: every listed neighbor must be a valid, finite reference (not the query
/// when `exclude_self`) whose exact squared distance is <= r² (1 + rel_tol); a neighbor listed
/// on one side only is accepted when its exact squared distance is within rel_tol of r².
RadiusAgreement compare_radius(PointsView refs, const PointsView* queries, const RadiusResult& a,
                               const RadiusResult& b, double radius, bool exclude_self,
                               double rel_tol = 1e-5);

/// The same for hybrid results (e.g. pcnn and PCL): position by position the neighbors' exact
/// distances must agree within rel_tol (ties may swap indices, as in compare_knn), and where one
/// row is longer its extra neighbors must lie within rounding of r.
RadiusAgreement compare_hybrid(PointsView refs, const PointsView* queries, const HybridResult& a,
                               const HybridResult& b, double radius, bool exclude_self,
                               double rel_tol = 1e-5);

/// Rows that differ between two radius results (the same inputs): both must list exactly the
/// same neighbors with the same distances in the same order. Returns -1 when all agree.
std::int64_t first_radius_difference(const RadiusResult& a, const RadiusResult& b);

/// The count of filled entries of each row of a dense result (entries before the first -1).
std::vector<std::int32_t> row_counts(const KnnResult& r);

}  // namespace pcnn
