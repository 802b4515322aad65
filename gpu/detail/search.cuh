// The algorithms behind pcnn::gpu_knn. Each uploads, prepares and launches its search on
// `stream`, writing rows × k results into device buffers, and records `uploaded` after its
// copies and `built` before its search kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_buffer.cuh"
#include "pcnn/knn.hpp"
#include "spatial_index.cuh"

namespace pcnn::detail {

void brute_force_search(PointsView refs, const PointsView* queries, KnnParams params,
                        std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                        cuda_event& uploaded, cuda_event& built);

struct TreeSearchStats {
  std::int64_t outliers = 0;     // queries searched alone
  std::int64_t evaluations = 0;  // query-point distance computations
  float outlier_ms = 0;          // device time of the outlier search
  std::int64_t refs_finite = 0;  // references with finite coordinates
};

TreeSearchStats tree_search(PointsView refs, const PointsView* queries, KnnParams params,
                            std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                            cuda_event& uploaded, cuda_event& built);

/// The same for points already on the device (`data` are device pointers); no upload.
TreeSearchStats tree_search_device(PointsView refs, const PointsView* queries, KnnParams params,
                                   std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                                   cuda_event& built);

/// A search of an existing index: `queries` (device pointers) or, when null, the index's own
/// points. `built` is recorded after the queries are ordered, before the search kernels.
TreeSearchStats tree_query(const SpatialIndex& index, const PointsView* queries, KnnParams params,
                           std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                           cuda_event& built);

}  // namespace pcnn::detail
