// pcnn::Index: every argument checked here, once, before a backend sees it; then dispatch.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <string>

#include "backend.hpp"
#include "fresh_pages.hpp"
#include "number_text.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"

namespace pcnn {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::automatic;
  if (name == "cuda") return Backend::cuda;
  if (name == "cpu") return Backend::cpu;
  throw invalid_argument_error("unknown device '" + name + "' (auto, cuda or cpu)");
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::automatic:
      return "auto";
    case Backend::cuda:
      return "cuda";
    case Backend::cpu:
      return "cpu";
  }
  return "?";
}

Staging parse_staging(const std::string& name) {
  if (name == "auto") return Staging::automatic;
  if (name == "pageable") return Staging::pageable;
  if (name == "pinned") return Staging::pinned;
  if (name == "registered") return Staging::registered;
  if (name == "mapped") return Staging::mapped;
  throw invalid_argument_error("unknown staging '" + name +
                               "' (auto, pageable, pinned, registered or mapped)");
}

const char* to_string(Staging staging) {
  switch (staging) {
    case Staging::automatic:
      return "auto";
    case Staging::pageable:
      return "pageable";
    case Staging::pinned:
      return "pinned";
    case Staging::registered:
      return "registered";
    case Staging::mapped:
      return "mapped";
  }
  return "?";
}

std::vector<std::int32_t> row_counts(const KnnResult& r) {
  std::vector<std::int32_t> counts(static_cast<std::size_t>(r.rows), 0);
  for (std::int64_t q = 0; q < r.rows; ++q) {
    int c = 0;
    while (c < r.k && r.indices[static_cast<std::size_t>(q) * r.k + c] >= 0) ++c;
    counts[static_cast<std::size_t>(q)] = c;
  }
  return counts;
}

namespace {

void check_points(const PointsView& v, const char* what) {
  const std::string w(what);
  PCNN_EXPECTS(v.count >= 0, w + ": negative point count");
  PCNN_EXPECTS(v.count <= INT_MAX,
               w + ": more than 2^31-1 points (" + std::to_string(v.count) + ")");
  PCNN_EXPECTS(!(v.data && v.data64), w + ": both float32 and float64 data given");
  PCNN_EXPECTS(v.count == 0 || v.address() != nullptr, w + ": null data with a non-zero count");
  PCNN_EXPECTS(v.stride >= 3,
               w + ": stride must be at least 3 coordinates, got " + std::to_string(v.stride));
}

void check_k(int k, const char* name) {
  PCNN_EXPECTS(k >= 1 && k <= kMaxK, std::string(name) + " must be between 1 and " +
                                         std::to_string(kMaxK) + ", got " + std::to_string(k));
}

// A range of rows that does not lie in an index of `size` points, said without adding the two
// (which may overflow: the caller's values are unchecked).
std::string row_range(std::int64_t first_row, std::int64_t rows, std::int64_t size) {
  return std::to_string(rows) + " rows from row " + std::to_string(first_row) +
         " do not lie in an index of " + std::to_string(size) + " points";
}

void check_radius(double r) {
  PCNN_EXPECTS(std::isfinite(r) && r >= 0,
               "radius must be a finite number >= 0, got " + detail::number_text(r));
}

template <class T>
void check_matrix(const MatrixView<T>& m, std::int64_t rows, int cols, const char* what) {
  PCNN_EXPECTS(m.rows == rows && m.cols == cols,
               std::string(what) + ": the output is " + std::to_string(m.rows) + " x " +
                   std::to_string(m.cols) + ", the search writes " + std::to_string(rows) + " x " +
                   std::to_string(cols));
  PCNN_EXPECTS(rows == 0 || m.data != nullptr, std::string(what) + ": null output");
}

template <class T>
void check_array(const ArrayView<T>& a, std::int64_t size, const char* what) {
  PCNN_EXPECTS(a.size == size, std::string(what) + ": the output holds " + std::to_string(a.size) +
                                   " entries, the search writes " + std::to_string(size));
  PCNN_EXPECTS(size == 0 || a.data != nullptr, std::string(what) + ": null output");
}

}  // namespace

Index::Index(IndexOptions options) {
  PCNN_EXPECTS(options.threads >= 0,
               "threads must be >= 0 (0: all), got " + std::to_string(options.threads));
  PCNN_EXPECTS(options.chunk_rows >= 0, "chunk_rows must be >= 0 (0: automatic)");
  Backend b = options.backend;
  if (b == Backend::automatic)
    b = query_device(options.device).available ? Backend::cuda : Backend::cpu;
  impl_ =
      b == Backend::cuda ? detail::make_cuda_backend(options) : detail::make_cpu_backend(options);
  options_ = options;
}

Index::Index(PointsView points, IndexOptions options, cudaStream_t stream)
    : Index(std::move(options)) {
  build(points, stream);
}

Index::~Index() = default;
Index::Index(Index&&) noexcept = default;
Index& Index::operator=(Index&&) noexcept = default;

// Checks shared by every call: a live index, host memory for the CPU backend.
void Index::check_call(const PointsView* queries, bool exclude_self) const {
  PCNN_EXPECTS(impl_ != nullptr, "use of a moved-from pcnn::Index");
  if (queries) {
    check_points(*queries, "queries");
    PCNN_EXPECTS(!exclude_self,
                 "exclude_self applies to self-searches only (self_knn, self_radius, "
                 "self_hybrid)");
  }
  if (impl_->kind() == Backend::cpu && queries)
    PCNN_EXPECTS(queries->memory == Memory::host,
                 "the CPU backend reads host memory only: the queries are in device memory");
}

template <class T>
void Index::check_output(Memory memory) const {
  if (impl_->kind() == Backend::cpu)
    PCNN_EXPECTS(memory == Memory::host,
                 "the CPU backend writes host memory only: an output is in device memory");
}

void Index::build(PointsView points, cudaStream_t stream) {
  PCNN_EXPECTS(impl_ != nullptr, "use of a moved-from pcnn::Index");
  check_points(points, "points");
  if (impl_->kind() == Backend::cpu)
    PCNN_EXPECTS(points.memory == Memory::host,
                 "the CPU backend reads host memory only: the points are in device memory");
  impl_->build(points, stream, timings_);
}

Backend Index::backend() const { return impl_ ? impl_->kind() : Backend::automatic; }
std::int64_t Index::size() const { return impl_ ? impl_->size() : 0; }
std::int64_t Index::finite_size() const { return impl_ ? impl_->finite_size() : 0; }
const IndexOptions& Index::options() const { return options_; }
const SearchTimings& Index::last_timings() const { return timings_; }
IndexMemoryStats Index::memory_stats() const {
  return impl_ ? impl_->memory_stats() : IndexMemoryStats{};
}

void Index::dense(const PointsView* queries, std::int64_t first_row, const KnnParams& params,
                  MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream,
                  bool sync) {
  check_call(queries, params.exclude_self);
  check_k(params.k, "k");
  const std::int64_t rows = queries ? queries->count : first_row < 0 ? size() : indices.rows;
  if (!queries && first_row >= 0)
    PCNN_EXPECTS(indices.rows >= 0 && first_row <= size() - indices.rows,
                 "self_knn_rows: " + row_range(first_row, indices.rows, size()));
  check_matrix(indices, rows, params.k, "indices");
  check_matrix(sqdist, rows, params.k, "sqdist");
  PCNN_EXPECTS(indices.memory == sqdist.memory,
               "indices and sqdist must both be in host memory or both in device memory");
  check_output<std::int32_t>(indices.memory);
  PCNN_EXPECTS(params.max_rows_per_pass >= 0, "max_rows_per_pass must be >= 0");
  impl_->knn(queries, std::max<std::int64_t>(first_row, 0), params, indices, sqdist, stream, sync,
             timings_);
}

void Index::knn(PointsView queries, const KnnParams& params, MatrixView<std::int32_t> indices,
                MatrixView<float> sqdist, cudaStream_t stream) {
  dense(&queries, 0, params, indices, sqdist, stream, true);
}
void Index::knn_async(PointsView queries, const KnnParams& params, MatrixView<std::int32_t> indices,
                      MatrixView<float> sqdist, cudaStream_t stream) {
  dense(&queries, 0, params, indices, sqdist, stream, false);
}
void Index::self_knn(const KnnParams& params, MatrixView<std::int32_t> indices,
                     MatrixView<float> sqdist, cudaStream_t stream) {
  dense(nullptr, -1, params, indices, sqdist, stream, true);
}
void Index::self_knn_async(const KnnParams& params, MatrixView<std::int32_t> indices,
                           MatrixView<float> sqdist, cudaStream_t stream) {
  dense(nullptr, -1, params, indices, sqdist, stream, false);
}

void Index::self_knn_rows(std::int64_t first_row, const KnnParams& params,
                          MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                          cudaStream_t stream) {
  PCNN_EXPECTS(first_row >= 0, "self_knn_rows: negative first row");
  dense(nullptr, first_row, params, indices, sqdist, stream, true);
}

KnnResult Index::owning_knn(const PointsView* queries, const KnnParams& params,
                            cudaStream_t stream) {
  check_call(queries, params.exclude_self);
  check_k(params.k, "k");
  KnnResult r;
  r.rows = queries ? queries->count : size();
  r.k = params.k;
  const std::size_t n = static_cast<std::size_t>(r.rows) * r.k;
  detail::resize_fresh(r.indices, n);  // mapped in with one call each, then filled
  detail::resize_fresh(r.sqdist, n);
  dense(queries, -1, params, {r.indices.data(), r.rows, r.k}, {r.sqdist.data(), r.rows, r.k},
        stream, true);
  return r;
}
KnnResult Index::knn(PointsView queries, const KnnParams& params, cudaStream_t stream) {
  return owning_knn(&queries, params, stream);
}
KnnResult Index::self_knn(const KnnParams& params, cudaStream_t stream) {
  return owning_knn(nullptr, params, stream);
}

void Index::check_radius_call(const PointsView* queries, const RadiusParams& params) const {
  check_call(queries, params.exclude_self);
  check_radius(params.radius);
  PCNN_EXPECTS(params.max_rows_per_pass >= 0, "max_rows_per_pass must be >= 0");
}

RadiusResult Index::radius(PointsView queries, const RadiusParams& params, cudaStream_t stream) {
  check_radius_call(&queries, params);
  return impl_->radius(&queries, params, stream, timings_);
}
RadiusResult Index::self_radius(const RadiusParams& params, cudaStream_t stream) {
  check_radius_call(nullptr, params);
  return impl_->radius(nullptr, params, stream, timings_);
}

std::int64_t Index::count_rows(const PointsView* queries, const RadiusParams& params,
                               ArrayView<std::int64_t> offsets, cudaStream_t stream) {
  check_radius_call(queries, params);
  check_array(offsets, (queries ? queries->count : size()) + 1, "offsets");
  check_output<std::int64_t>(offsets.memory);
  return impl_->radius_count(queries, params, offsets, stream, timings_);
}

void Index::fill_rows(const PointsView* queries, std::int64_t first_row, const RadiusParams& params,
                      ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                      ArrayView<float> sqdist, cudaStream_t stream) {
  check_radius_call(queries, params);
  if (first_row < 0) {  // every row
    check_array(offsets, (queries ? queries->count : size()) + 1, "offsets");
  } else {
    PCNN_EXPECTS(offsets.size >= 1 && first_row <= size() - (offsets.size - 1),
                 "self_radius_fill_rows: " + row_range(first_row, offsets.size - 1, size()));
  }
  PCNN_EXPECTS(offsets.size >= 1 && offsets.data != nullptr, "offsets: null output");
  PCNN_EXPECTS(indices.size == sqdist.size, "indices and sqdist must have the same size");
  PCNN_EXPECTS(indices.memory == sqdist.memory,
               "indices and sqdist must both be in host memory or both in device memory");
  check_output<std::int32_t>(indices.memory);
  impl_->radius_fill(queries, std::max<std::int64_t>(first_row, 0), params, offsets, indices,
                     sqdist, stream, timings_);
}

std::int64_t Index::radius_count(PointsView queries, const RadiusParams& params,
                                 ArrayView<std::int64_t> offsets, cudaStream_t stream) {
  return count_rows(&queries, params, offsets, stream);
}
void Index::radius_fill(PointsView queries, const RadiusParams& params,
                        ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                        ArrayView<float> sqdist, cudaStream_t stream) {
  fill_rows(&queries, -1, params, offsets, indices, sqdist, stream);
}
std::int64_t Index::self_radius_count(const RadiusParams& params, ArrayView<std::int64_t> offsets,
                                      cudaStream_t stream) {
  return count_rows(nullptr, params, offsets, stream);
}
void Index::self_radius_fill(const RadiusParams& params, ArrayView<const std::int64_t> offsets,
                             ArrayView<std::int32_t> indices, ArrayView<float> sqdist,
                             cudaStream_t stream) {
  fill_rows(nullptr, -1, params, offsets, indices, sqdist, stream);
}
void Index::self_radius_fill_rows(std::int64_t first_row, const RadiusParams& params,
                                  ArrayView<const std::int64_t> offsets,
                                  ArrayView<std::int32_t> indices, ArrayView<float> sqdist,
                                  cudaStream_t stream) {
  PCNN_EXPECTS(first_row >= 0, "self_radius_fill_rows: negative first row");
  fill_rows(nullptr, first_row, params, offsets, indices, sqdist, stream);
}

void Index::hybrid_rows(const PointsView* queries, std::int64_t first_row,
                        const HybridParams& params, MatrixView<std::int32_t> indices,
                        MatrixView<float> sqdist, cudaStream_t stream) {
  check_call(queries, params.exclude_self);
  check_k(params.max_nn, "max_nn");
  check_radius(params.radius);
  const std::int64_t rows = queries ? queries->count : first_row < 0 ? size() : indices.rows;
  if (!queries && first_row >= 0)
    PCNN_EXPECTS(indices.rows >= 0 && first_row <= size() - indices.rows,
                 "self_hybrid_rows: " + row_range(first_row, indices.rows, size()));
  check_matrix(indices, rows, params.max_nn, "indices");
  check_matrix(sqdist, rows, params.max_nn, "sqdist");
  PCNN_EXPECTS(indices.memory == sqdist.memory,
               "indices and sqdist must both be in host memory or both in device memory");
  check_output<std::int32_t>(indices.memory);
  PCNN_EXPECTS(params.max_rows_per_pass >= 0, "max_rows_per_pass must be >= 0");
  impl_->hybrid(queries, std::max<std::int64_t>(first_row, 0), params, indices, sqdist, stream,
                timings_);
}

HybridResult Index::owning_hybrid(const PointsView* queries, const HybridParams& params,
                                  cudaStream_t stream) {
  check_call(queries, params.exclude_self);
  check_k(params.max_nn, "max_nn");
  HybridResult r;
  KnnResult& d = r.knn;
  d.rows = queries ? queries->count : size();
  d.k = params.max_nn;
  d.indices.resize(static_cast<std::size_t>(d.rows) * d.k);
  d.sqdist.resize(d.indices.size());
  hybrid_rows(queries, -1, params, {d.indices.data(), d.rows, d.k}, {d.sqdist.data(), d.rows, d.k},
              stream);
  r.counts = row_counts(d);
  return r;
}

void Index::hybrid(PointsView queries, const HybridParams& params, MatrixView<std::int32_t> indices,
                   MatrixView<float> sqdist, cudaStream_t stream) {
  hybrid_rows(&queries, -1, params, indices, sqdist, stream);
}
HybridResult Index::hybrid(PointsView queries, const HybridParams& params, cudaStream_t stream) {
  return owning_hybrid(&queries, params, stream);
}
void Index::self_hybrid(const HybridParams& params, MatrixView<std::int32_t> indices,
                        MatrixView<float> sqdist, cudaStream_t stream) {
  hybrid_rows(nullptr, -1, params, indices, sqdist, stream);
}
void Index::self_hybrid_rows(std::int64_t first_row, const HybridParams& params,
                             MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                             cudaStream_t stream) {
  PCNN_EXPECTS(first_row >= 0, "self_hybrid_rows: negative first row");
  hybrid_rows(nullptr, first_row, params, indices, sqdist, stream);
}
HybridResult Index::self_hybrid(const HybridParams& params, cudaStream_t stream) {
  return owning_hybrid(nullptr, params, stream);
}

}  // namespace pcnn
