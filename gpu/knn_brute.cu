// Exact brute-force kNN: shared-memory tiles of references, one query per thread.
#include "detail/cuda_try.cuh"
#include "detail/knn_brute.cuh"
#include "detail/prepare.cuh"
#include "detail/search.cuh"

namespace pcnn::detail {
namespace {

template <int CAP>
void launch(const PreparedSearch& ps, int k, std::int32_t* d_idx, float* d_dist,
            cudaStream_t stream) {
  const int blocks = (ps.n_queries + kBruteBlock - 1) / kBruteBlock;
  knn_brute_kernel<CAP><<<blocks, kBruteBlock, 0, stream>>>(ps.refs.data(), ps.ref_count.data(),
                                                            ps.ref_ids.data(), ps.queries.data(),
                                                            ps.n_queries, k, d_idx, d_dist);
  PCNN_CHECK_LAUNCH();
}

}  // namespace

void brute_force_search(PointsView refs, const PointsView* queries, KnnParams params,
                        std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                        cuda_event& uploaded, cuda_event& built) {
  const PreparedSearch ps = prepare_search(refs, queries, params.exclude_self, stream, uploaded);
  built.record(stream);
  if (ps.n_queries == 0) return;
  // The list capacity is the next power of two >= k, so a few compiled variants cover every k;
  // the threshold is always the k-th best, so the spare capacity costs registers, not work.
  const int k = params.k;
  if (k <= 1) return launch<1>(ps, k, d_idx, d_dist, stream);
  if (k <= 2) return launch<2>(ps, k, d_idx, d_dist, stream);
  if (k <= 4) return launch<4>(ps, k, d_idx, d_dist, stream);
  if (k <= 8) return launch<8>(ps, k, d_idx, d_dist, stream);
  if (k <= 16) return launch<16>(ps, k, d_idx, d_dist, stream);
  if (k <= 32) return launch<32>(ps, k, d_idx, d_dist, stream);
  if (k <= 64) return launch<64>(ps, k, d_idx, d_dist, stream);
  static_assert(kMaxK == 128, "add a capacity for the new kMaxK");
  return launch<128>(ps, k, d_idx, d_dist, stream);
}

}  // namespace pcnn::detail
