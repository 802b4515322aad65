// pcnn — exact k-nearest-neighbor search.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pcnn/points.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace pcnn {

/// The largest k any search supports.
inline constexpr int kMaxK = 128;

/// What to search for.
struct KnnParams {
  int k = 8;                  ///< neighbors per query, 1..kMaxK
  bool exclude_self = false;  ///< self-search only: a point is not its own neighbor
  /// Results are produced in one pass when they fit in the device memory available (see
  /// pcnn::set_device_memory_limit), else in passes over the queries, each brought to the host
  /// before the next. A value > 0 caps the queries per pass (rounded up to a multiple of 128).
  std::int64_t max_rows_per_pass = 0;
};

/// Dense kNN results for `rows` queries: row q holds `k` neighbor indices into the reference
/// points and their squared distances (units of the coordinates, squared), sorted by
/// (squared distance, index) so that ties go to the smaller index. Where fewer than k
/// neighbors exist (or the query is not finite) the row is padded with index -1 and
/// distance +infinity.
struct KnnResult {
  std::int64_t rows = 0;
  int k = 0;
  std::vector<std::int32_t> indices;  ///< rows × k, row-major
  std::vector<float> sqdist;          ///< rows × k, row-major, squared distances
};

/// How the GPU finds neighbors.
enum class Algorithm {
  automatic,    ///< brute force for small problems, the spatial index otherwise
  brute_force,  ///< every query against every point, shared-memory tiles; O(n * m)
  grid,         ///< Morton-sorted cells of 32 points with a box hierarchy; scales to 10^7+
};

/// Parses "auto", "brute" or "grid"; throws pcnn::error otherwise.
Algorithm parse_algorithm(const std::string& name);
const char* to_string(Algorithm algorithm);

/// What `automatic` picks for these sizes: brute force while references × queries is small
/// enough that building an index does not pay (see bench/results for the measurement).
Algorithm choose_algorithm(std::int64_t n_refs, std::int64_t n_queries);

/// Device time of the parts of one GPU search, in milliseconds (CUDA events).
struct GpuKnnTimings {
  Algorithm algorithm = Algorithm::automatic;  ///< the one that ran
  float upload_ms = 0;                         ///< host → device copies of references and queries
  float build_ms = 0;     ///< brute force: removing non-finite points; grid: building the index
                          ///< and ordering the queries
  float search_ms = 0;    ///< the search kernel(s)
  float download_ms = 0;  ///< device → host copies of the results
  std::int64_t outlier_queries = 0;  ///< grid: queries searched alone (far from their neighbors)
  float outlier_ms = 0;              ///< grid: the part of search_ms spent on them
  std::int64_t distance_evaluations = 0;  ///< query-point distances computed
  int passes = 1;  ///< passes over the queries (more than one when the results did not fit)
};

/// Exact kNN on the GPU. Every algorithm returns the same neighbors as the double-precision
/// reference (ties broken by the smaller index).
///
/// @param[in] refs      reference points in host memory (indices in the result refer to these)
/// @param[in] queries   query points in host memory, or nullptr to query the references themselves
/// @param[in] params    k and exclude_self (which needs queries == nullptr)
/// @param[in] algorithm how to search
/// @param[out] timings  optional device timings of the parts
/// @param[in] stream    CUDA stream for the work
/// @return owning results, one row per query point (all queries, finite or not)
/// @throws pcnn::error on invalid arguments (k out of range, null data with a non-zero count,
///         stride < 3, exclude_self with a separate query set, more than 2^31-1 points);
///         pcnn::no_device_error when no CUDA device is usable; pcnn::out_of_memory_error
///         (needed and available bytes) when even a pass of 128 queries does not fit;
///         pcnn::cuda_error on other device failures.
/// Synchronizes with `stream` before returning.
KnnResult gpu_knn(PointsView refs, const PointsView* queries, KnnParams params,
                  Algorithm algorithm = Algorithm::automatic, GpuKnnTimings* timings = nullptr,
                  cudaStream_t stream = nullptr);

/// Checks the arguments every kNN entry point takes; throws pcnn::error naming what is wrong.
void validate_knn_args(PointsView refs, const PointsView* queries, KnnParams params);

}  // namespace pcnn
