// The interface behind pcnn::Index: one implementation per backend (gpu/cuda_backend.cu,
// cpu/cpu_backend.cpp). core/index.cpp checks every argument before a backend sees it, so a
// backend may assume: views are valid (non-null data where count > 0, stride >= 3, counts
// <= INT32_MAX); output views have exactly the right shape; host-only backends get host memory;
// exclude_self only on self-searches (queries == nullptr); k / max_nn in 1..kMaxK; radius finite
// and >= 0. `queries == nullptr` means the indexed points themselves (self-search).
#pragma once

#include <cstdint>

#include "core/row_shares.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/normals.hpp"

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

  /// Dense hybrid rows (max_nn columns), as knn (first_row likewise); always synchronizes.
  virtual void hybrid(const PointsView* queries, std::int64_t first_row, const HybridParams& params,
                      MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                      cudaStream_t stream, SearchTimings& t) = 0;

  /// Radius search into an owning CSR result (host). Synchronizes.
  virtual RadiusResult radius(const PointsView* queries, const RadiusParams& params,
                              cudaStream_t stream, SearchTimings& t) = 0;

  /// Count-then-fill: offsets (rows + 1) and the total, counting only; then the entries. The
  /// fill takes a range of rows: queries->count rows (first_row 0), or for a self-search rows
  /// [first_row, first_row + offsets.size - 1); `offsets` is that range's slice of the count's
  /// offsets (offsets[0] may be non-zero: row q goes at offsets[q] - offsets[0]), which the
  /// backend checks against its own count. Both synchronize.
  virtual std::int64_t radius_count(const PointsView* queries, const RadiusParams& params,
                                    ArrayView<std::int64_t> offsets, cudaStream_t stream,
                                    SearchTimings& t) = 0;
  virtual void radius_fill(const PointsView* queries, std::int64_t first_row,
                           const RadiusParams& params, ArrayView<const std::int64_t> offsets,
                           ArrayView<std::int32_t> indices, ArrayView<float> sqdist,
                           cudaStream_t stream, SearchTimings& t) = 0;

  /// Replicas of one cloud on several devices (dist/part_cuda.cu): the dense self-search rows of
  /// the indexed points at positions [begin, end) of the index's own order (0 <= begin <= end <=
  /// size()), each row written where `to` puts its original index (device memory of this
  /// device, or of peers this device may access). Replicas built from the same points order them
  /// the same, so positions cut the cloud into pieces of the curve, each searched as coherently
  /// as the whole. `radius` bounds a hybrid search (+infinity: kNN). Synchronizes. CUDA only.
  virtual void self_dense_positions(std::int64_t begin, std::int64_t end, const KnnParams& params,
                                    double radius, const detail::RowShares& to, cudaStream_t stream,
                                    SearchTimings& t) {
    static_cast<void>(begin), static_cast<void>(end), static_cast<void>(params);
    static_cast<void>(radius), static_cast<void>(to), static_cast<void>(stream);
    static_cast<void>(t);
    throw invalid_argument_error("searches by position need the CUDA backend");
  }
  /// How far the shares of `shares` (row = original index) are from runs of the index's order:
  /// the fraction of pairs of neighboring finite positions, sampled evenly (up to 2^20 pairs),
  /// whose original indices fall in different shares. Near 0 for a cloud stored in spatial order
  /// (each share a few pieces of the curve), 1 - 1/count for one stored in random order.
  /// Synchronizes `stream`. CUDA only.
  virtual double order_breaks(const detail::RowShares& shares, cudaStream_t stream) {
    static_cast<void>(shares), static_cast<void>(stream);
    throw invalid_argument_error("positions need the CUDA backend");
  }
  /// The original index of the indexed point at position `pos` of the index's order. CUDA only.
  virtual std::int64_t original_index_at(std::int64_t pos) {
    static_cast<void>(pos);
    throw invalid_argument_error("positions need the CUDA backend");
  }

  /// Normals and curvature of every indexed point (core/normals.cpp has checked the parameters
  /// and that the outputs are size() × 3 and size(), both in one memory the backend can write).
  /// The neighbor search's timings go to `search`. Synchronizes.
  virtual void normals(const NormalParams& params, MatrixView<float> normals,
                       ArrayView<float> curvature, cudaStream_t stream, SearchTimings& search,
                       NormalTimings& t) = 0;
};

namespace detail {
/// What features built on an index (core/normals.cpp) may reach: its backend and the timings
/// its last_timings() returns. Throws for a moved-from index.
struct IndexAccess {
  static Index::Backend_& backend(Index& index) {
    PCNN_EXPECTS(index.impl_ != nullptr, "use of a moved-from pcnn::Index");
    return *index.impl_;
  }
  static SearchTimings& timings(Index& index) { return index.timings_; }
};

/// The CPU backend (cpu/cpu_backend.cpp): exact in double precision, multi-threaded.
std::unique_ptr<Index::Backend_> make_cpu_backend(const IndexOptions& options);
/// The CUDA backend (gpu/cuda_backend.cu). Throws pcnn::no_device_error without a usable device.
std::unique_ptr<Index::Backend_> make_cuda_backend(const IndexOptions& options);
}  // namespace detail

}  // namespace pcnn
