// pcnn — a kNN index built once and queried many times (a map, queried by each new scan).
#pragma once

#include <cstdint>
#include <memory>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"
#include "pcnn/radius.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace pcnn {
namespace detail {
struct RadiusBound;
}

/// The spatial index of a reference cloud, kept on the device. Move-only; owns its device memory
/// (freed on the default stream when the index is destroyed, so the streams passed to the
/// constructor and to query() need only live during those calls). Not safe for concurrent use
/// from several threads; use one index per thread, or serialize.
class KnnIndex {
 public:
  /// Uploads `refs` (host memory) and builds the index on `stream`; synchronizes.
  /// @throws pcnn::error on an invalid view; pcnn::cuda_error / no_device_error from the device.
  explicit KnnIndex(PointsView refs, cudaStream_t stream = nullptr);
  ~KnnIndex();
  KnnIndex(KnnIndex&&) noexcept;
  KnnIndex& operator=(KnnIndex&&) noexcept;
  KnnIndex(const KnnIndex&) = delete;
  KnnIndex& operator=(const KnnIndex&) = delete;

  /// Points indexed (finite or not; indices in results refer to them).
  std::int64_t size() const;
  /// Points with finite coordinates.
  std::int64_t finite_size() const;

  /// Exact kNN of `queries` (host memory) among the indexed points, same conventions as
  /// pcnn::gpu_knn. `params.exclude_self` is not allowed (the queries are another cloud).
  /// Synchronizes with `stream`; `timings` (optional) gets upload, ordering, search, download.
  KnnResult query(PointsView queries, KnnParams params, GpuKnnTimings* timings = nullptr,
                  cudaStream_t stream = nullptr) const;

  /// Every indexed point within `params.radius` of each query (host memory), in CSR form, as
  /// pcnn::gpu_radius_search. `params.exclude_self` is not allowed.
  RadiusResult radius(PointsView queries, RadiusParams params, GpuKnnTimings* timings = nullptr,
                      cudaStream_t stream = nullptr) const;

  /// The `params.max_nn` nearest indexed points within `params.radius`, as
  /// pcnn::gpu_hybrid_search. `params.exclude_self` is not allowed.
  HybridResult hybrid(PointsView queries, HybridParams params, GpuKnnTimings* timings = nullptr,
                      cudaStream_t stream = nullptr) const;

 private:
  KnnResult hybrid_or_knn(PointsView queries, KnnParams params, const detail::RadiusBound& bound,
                          GpuKnnTimings* timings, cudaStream_t stream) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcnn
