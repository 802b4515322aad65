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

namespace {

// The shape of the indexed points, for the argument checks of a query.
PointsView shape_of(const KnnIndex& index) {
  return {reinterpret_cast<const float*>(1), index.size(), 3};
}

}  // namespace

KnnResult KnnIndex::query(PointsView queries, KnnParams params, GpuKnnTimings* timings,
                          cudaStream_t stream) const {
  return hybrid_or_knn(queries, params, detail::RadiusBound{}, timings, stream);
}

HybridResult KnnIndex::hybrid(PointsView queries, HybridParams params, GpuKnnTimings* timings,
                              cudaStream_t stream) const {
  validate_radius(params.radius);
  HybridResult r;
  r.knn = hybrid_or_knn(queries, {params.max_nn, params.exclude_self, params.max_rows_per_pass},
                        detail::make_radius_bound(params.radius), timings, stream);
  r.counts = row_counts(r.knn);
  return r;
}

KnnResult KnnIndex::hybrid_or_knn(PointsView queries, KnnParams params,
                                  const detail::RadiusBound& bound, GpuKnnTimings* timings,
                                  cudaStream_t stream) const {
  PCNN_EXPECTS(impl_ != nullptr, "KnnIndex: query on a moved-from index");
  PCNN_EXPECTS(!params.exclude_self, "KnnIndex: exclude_self needs a self-search");
  const PointsView refs_shape = shape_of(*this);
  validate_knn_args(refs_shape, &queries, params);
  if (timings) {
    *timings = GpuKnnTimings{};
    timings->algorithm = Algorithm::grid;
  }
  const std::int64_t rows_per_pass = detail::plan_rows_per_pass(
      queries.count, std::int64_t(params.k) * 8,
      detail::tree_working_bytes(refs_shape, &queries, true), params.max_rows_per_pass,
      "a kNN query of " + std::to_string(queries.count) +
          " points with k = " + std::to_string(params.k));
  return detail::knn_to_host(
      queries.count, params.k, rows_per_pass, stream, timings,
      [&](const detail::KnnOutput& out, detail::cuda_event& uploaded, detail::cuda_event& built) {
        detail::device_buffer<float> raw;
        detail::upload_points(queries, raw, stream);
        uploaded.record(stream);
        const PointsView d_queries{raw.data(), queries.count, queries.stride};
        return detail::tree_query(impl_->index, &d_queries, params, bound, out, stream, built);
      });
}

RadiusResult KnnIndex::radius(PointsView queries, RadiusParams params, GpuKnnTimings* timings,
                              cudaStream_t stream) const {
  PCNN_EXPECTS(impl_ != nullptr, "KnnIndex: query on a moved-from index");
  PCNN_EXPECTS(!params.exclude_self, "KnnIndex: exclude_self needs a self-search");
  validate_radius(params.radius);
  validate_knn_args(shape_of(*this), &queries, {1, false});
  if (timings) *timings = GpuKnnTimings{};
  detail::check_radius_fits(detail::tree_working_bytes(shape_of(*this), &queries, true),
                            queries.count);
  detail::cuda_event start, uploaded;
  start.record(stream);
  detail::device_buffer<float> raw;
  detail::upload_points(queries, raw, stream);
  uploaded.record(stream);
  const PointsView d_queries{raw.data(), queries.count, queries.stride};
  return detail::radius_query(impl_->index, &d_queries, params, timings, stream, start, uploaded);
}

}  // namespace pcnn
