// Exact brute-force kNN: shared-memory tiles of references, one query per thread.
#include <climits>
#include <cmath>
#include <string>

#include "detail/cuda_try.cuh"
#include "detail/knn_brute.cuh"
#include "detail/prepare.cuh"
#include "pcnn/device.hpp"
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

namespace detail {

template <int CAP>
void launch_knn_brute(const PreparedSearch& ps, int k, std::int32_t* d_idx, float* d_dist,
                      cudaStream_t stream) {
  const int blocks = (ps.n_queries + kBruteBlock - 1) / kBruteBlock;
  knn_brute_kernel<CAP><<<blocks, kBruteBlock, 0, stream>>>(ps.refs.data(), ps.ref_count.data(),
                                                            ps.ref_ids.data(), ps.queries.data(),
                                                            ps.n_queries, k, d_idx, d_dist);
  PCNN_CHECK_LAUNCH();
}

// The list capacity is the next power of two >= k: a few compiled variants cover every k, and a
// list at most twice as long as needed only raises the insertion threshold a little.
void dispatch_knn_brute(const PreparedSearch& ps, int k, std::int32_t* d_idx, float* d_dist,
                        cudaStream_t stream) {
  if (k <= 1) return launch_knn_brute<1>(ps, k, d_idx, d_dist, stream);
  if (k <= 2) return launch_knn_brute<2>(ps, k, d_idx, d_dist, stream);
  if (k <= 4) return launch_knn_brute<4>(ps, k, d_idx, d_dist, stream);
  if (k <= 8) return launch_knn_brute<8>(ps, k, d_idx, d_dist, stream);
  if (k <= 16) return launch_knn_brute<16>(ps, k, d_idx, d_dist, stream);
  if (k <= 32) return launch_knn_brute<32>(ps, k, d_idx, d_dist, stream);
  if (k <= 64) return launch_knn_brute<64>(ps, k, d_idx, d_dist, stream);
  static_assert(kMaxK == 128, "add a capacity for the new kMaxK");
  return launch_knn_brute<128>(ps, k, d_idx, d_dist, stream);
}

}  // namespace detail

KnnResult gpu_knn_brute_force(PointsView refs, const PointsView* queries, KnnParams params,
                              GpuKnnTimings* timings, cudaStream_t stream) {
  validate_knn_args(refs, queries, params);
  KnnResult result;
  result.k = params.k;
  result.rows = queries ? queries->count : refs.count;
  const std::size_t cells = static_cast<std::size_t>(result.rows) * params.k;
  result.indices.assign(cells, -1);
  result.sqdist.assign(cells, INFINITY);
  if (timings) *timings = GpuKnnTimings{};
  if (result.rows == 0) return result;

  detail::cuda_event start, uploaded, prepared, searched, downloaded;
  start.record(stream);
  detail::PreparedSearch ps =
      detail::prepare_search(refs, queries, params.exclude_self, stream, uploaded);
  prepared.record(stream);

  detail::device_buffer<std::int32_t> d_idx(cells);
  detail::device_buffer<float> d_dist(cells);
  // Allocation synchronizes in some drivers; record the search start after it.
  detail::cuda_event search_start;
  search_start.record(stream);
  detail::dispatch_knn_brute(ps, params.k, d_idx.data(), d_dist.data(), stream);
  searched.record(stream);

  PCNN_CUDA_TRY(cudaMemcpyAsync(result.indices.data(), d_idx.data(), d_idx.bytes(),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaMemcpyAsync(result.sqdist.data(), d_dist.data(), d_dist.bytes(),
                                cudaMemcpyDeviceToHost, stream));
  downloaded.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));

  if (timings) {
    timings->upload_ms = uploaded.since(start);
    timings->prepare_ms = prepared.since(uploaded);
    timings->search_ms = searched.since(search_start);
    timings->download_ms = downloaded.since(searched);
  }
  return result;
}

}  // namespace pcnn
