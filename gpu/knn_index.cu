// pcnn::KnnIndex: the spatial index kept between queries.
#include <cmath>

#include "detail/cuda_try.cuh"
#include "detail/knn_to_host.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"
#include "pcnn/error.hpp"
#include "pcnn/knn_index.hpp"

namespace pcnn {

struct KnnIndex::Impl {
  detail::SpatialIndex index;
};

KnnIndex::KnnIndex(PointsView refs, cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  validate_knn_args(refs, nullptr, {1, false});
  detail::device_buffer<float> raw;
  detail::upload_points(refs, raw, stream);
  impl_->index =
      detail::build_spatial_index(raw.data(), refs.stride, static_cast<int>(refs.count), stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  // The index outlives this call, and the caller's stream may be destroyed before the index:
  // free its memory on the default stream (every query synchronizes before it returns).
  impl_->index.detach_streams();
}

KnnIndex::~KnnIndex() = default;
KnnIndex::KnnIndex(KnnIndex&&) noexcept = default;
KnnIndex& KnnIndex::operator=(KnnIndex&&) noexcept = default;

std::int64_t KnnIndex::size() const { return impl_ ? impl_->index.n_total : 0; }
std::int64_t KnnIndex::finite_size() const { return impl_ ? impl_->index.n : 0; }

KnnResult KnnIndex::query(PointsView queries, KnnParams params, GpuKnnTimings* timings,
                          cudaStream_t stream) const {
  PCNN_EXPECTS(impl_ != nullptr, "KnnIndex::query on a moved-from index");
  PCNN_EXPECTS(!params.exclude_self, "KnnIndex::query: exclude_self needs a self-search");
  const PointsView refs_shape{reinterpret_cast<const float*>(1), size(), 3};
  validate_knn_args(refs_shape, &queries, params);
  if (timings) {
    *timings = GpuKnnTimings{};
    timings->algorithm = Algorithm::grid;
  }
  return detail::knn_to_host(
      queries.count, params.k, stream, timings,
      [&](std::int32_t* d_idx, float* d_dist, detail::cuda_event& uploaded,
          detail::cuda_event& built) {
        detail::device_buffer<float> raw;
        detail::upload_points(queries, raw, stream);
        uploaded.record(stream);
        const PointsView d_queries{raw.data(), queries.count, queries.stride};
        return detail::tree_query(impl_->index, &d_queries, params, d_idx, d_dist, stream, built);
      });
}

}  // namespace pcnn
