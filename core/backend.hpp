// The interface behind pcnn::Index: one implementation per backend (gpu/cuda_backend.cu,
// cpu/cpu_backend.cpp). core/index.cpp checks every argument before a backend sees it, so a
// backend may assume: views are valid (non-null data where count > 0, stride >= 3, counts
// <= INT32_MAX); output views have exactly the right shape; host-only backends get host memory;
// exclude_self only on self-searches (queries == nullptr); k / max_nn in 1..kMaxK; radius finite
// and >= 0; float64 views only on the CPU backend for now (core/index.cpp refuses them for the
// CUDA one). `queries == nullptr` means the indexed points themselves (self-search).
#pragma once

#include <cstdint>

#include "pcnn/index.hpp"

namespace pcnn {

struct Index::Backend_ {
  virtual ~Backend_() = default;

  /// Replaces the indexed points by `points` (a copy is kept). Synchronizes.
  virtual void build(PointsView points, cudaStream_t stream, SearchTimings& t) = 0;
  virtual Backend kind() const = 0;
  virtual std::int64_t size() const = 0;
  virtual std::int64_t finite_size() const = 0;
  virtual IndexMemoryStats memory_stats() const { return {}; }

  /// Dense kNN rows (queries->count rows, or for a self-search rows [first_row, first_row +
  /// indices.rows) of the indexed points; first_row is 0 with queries) × params.k. `sync`: wait
  /// for the stream and fill `t`; otherwise return once the work is queued (CPU: always
  /// synchronous).
  virtual void knn(const PointsView* queries, std::int64_t first_row, const KnnParams& params,
                   MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream,
                   bool sync, SearchTimings& t) = 0;

  /// Dense hybrid rows (max_nn columns), as knn; always synchronizes.
  virtual void hybrid(const PointsView* queries, const HybridParams& params,
                      MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                      cudaStream_t stream, SearchTimings& t) = 0;

  /// Radius search into an owning CSR result (host). Synchronizes.
  virtual RadiusResult radius(const PointsView* queries, const RadiusParams& params,
                              cudaStream_t stream, SearchTimings& t) = 0;

  /// Count-then-fill: offsets (rows + 1) and the total; then the entries. Both synchronize.
  virtual std::int64_t radius_count(const PointsView* queries, const RadiusParams& params,
                                    ArrayView<std::int64_t> offsets, cudaStream_t stream,
                                    SearchTimings& t) = 0;
  virtual void radius_fill(const PointsView* queries, const RadiusParams& params,
                           ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                           ArrayView<float> sqdist, cudaStream_t stream, SearchTimings& t) = 0;
};

namespace detail {
/// The CPU backend (cpu/cpu_backend.cpp): exact in double precision, multi-threaded.
std::unique_ptr<Index::Backend_> make_cpu_backend(const IndexOptions& options);
/// The CUDA backend (gpu/cuda_backend.cu). Throws pcnn::no_device_error without a usable device.
std::unique_ptr<Index::Backend_> make_cuda_backend(const IndexOptions& options);
}  // namespace detail

}  // namespace pcnn
