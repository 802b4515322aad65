// pcnn::gpu_knn: argument checks, algorithm choice, result buffers and timing.
#include <climits>
#include <cmath>
#include <string>

#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/knn_to_host.cuh"
#include "detail/search.cuh"
#include "pcnn/error.hpp"
#include "pcnn/knn.hpp"

namespace pcnn {

void validate_knn_args(PointsView refs, const PointsView* queries, KnnParams params) {
  PCNN_EXPECTS(
      params.k >= 1 && params.k <= kMaxK,
      "k must be between 1 and " + std::to_string(kMaxK) + ", got " + std::to_string(params.k));
  auto check = [](const PointsView& v, const char* what) {
    PCNN_EXPECTS(v.count >= 0, std::string(what) + ": negative point count");
    PCNN_EXPECTS(v.count <= INT_MAX,
                 std::string(what) + ": more than 2^31-1 points (" + std::to_string(v.count) + ")");
    PCNN_EXPECTS(v.count == 0 || v.data != nullptr,
                 std::string(what) + ": null data with a non-zero count");
    PCNN_EXPECTS(v.stride >= 3, std::string(what) + ": stride must be at least 3 floats, got " +
                                    std::to_string(v.stride));
  };
  check(refs, "references");
  if (queries) check(*queries, "queries");
  PCNN_EXPECTS(!(params.exclude_self && queries),
               "exclude_self applies to a self-search only (no separate query set)");
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::automatic;
  if (name == "brute") return Algorithm::brute_force;
  if (name == "grid") return Algorithm::grid;
  throw error("unknown algorithm '" + name + "' (auto, brute or grid)");
}

const char* to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::brute_force:
      return "brute";
    case Algorithm::grid:
      return "grid";
  }
  return "?";
}

Algorithm choose_algorithm(std::int64_t n_refs, std::int64_t n_queries) {
  // Below this many distance evaluations brute force finishes before the index is built and
  // searched: on an H200, 10k self-search points (1e8) took 0.22 ms brute force vs 0.27 ms grid
  // at k = 1 and 0.45 vs 0.35 ms at k = 8 (bench/results/2026-11-22-knn-grid-h200.md).
  constexpr double kBruteForceEvaluations = 5e7;
  return double(n_refs) * double(n_queries) <= kBruteForceEvaluations ? Algorithm::brute_force
                                                                      : Algorithm::grid;
}

KnnResult gpu_knn(PointsView refs, const PointsView* queries, KnnParams params, Algorithm algorithm,
                  GpuKnnTimings* timings, cudaStream_t stream) {
  validate_knn_args(refs, queries, params);
  const std::int64_t rows = queries ? queries->count : refs.count;
  if (algorithm == Algorithm::automatic) algorithm = choose_algorithm(refs.count, rows);
  const std::int64_t rows_per_pass = detail::plan_rows_per_pass(
      rows, std::int64_t(params.k) * 8, detail::tree_working_bytes(refs, queries, false),
      params.max_rows_per_pass,
      "a kNN search of " + std::to_string(rows) + " queries with k = " + std::to_string(params.k));
  // Only the index search works in passes; brute force is for problems small enough for one.
  if (rows_per_pass > 0) algorithm = Algorithm::grid;
  if (timings) {
    *timings = GpuKnnTimings{};
    timings->algorithm = algorithm;
  }
  return detail::knn_to_host(
      rows, params.k, rows_per_pass, stream, timings,
      [&](const detail::KnnOutput& out, detail::cuda_event& uploaded, detail::cuda_event& built) {
        if (algorithm == Algorithm::grid)
          return detail::tree_search(refs, queries, params, detail::RadiusBound{}, out, stream,
                                     uploaded, built);
        detail::brute_force_search(refs, queries, params, out.d_idx, out.d_dist, stream, uploaded,
                                   built);
        detail::TreeSearchStats stats;
        stats.evaluations = refs.count * rows;
        return stats;
      });
}

}  // namespace pcnn
