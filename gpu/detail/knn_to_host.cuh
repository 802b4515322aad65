// The frame every host-memory kNN entry point shares: result buffers on the device, the search,
// the download, and the timing of each part.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda_try.cuh"
#include "device_buffer.cuh"
#include "pcnn/knn.hpp"
#include "search.cuh"

namespace pcnn::detail {

/// Runs `search(d_idx, d_dist, uploaded, built) -> TreeSearchStats` for `rows` queries and
/// returns the results in host memory; fills `timings` (whose `algorithm` the caller sets).
template <class Search>
KnnResult knn_to_host(std::int64_t rows, int k, cudaStream_t stream, GpuKnnTimings* timings,
                      Search&& search) {
  KnnResult result;
  result.k = k;
  result.rows = rows;
  const std::size_t cells = static_cast<std::size_t>(rows) * k;
  result.indices.assign(cells, -1);
  result.sqdist.assign(cells, INFINITY);
  if (rows == 0) return result;
  device_buffer<std::int32_t> d_idx(cells, stream);
  device_buffer<float> d_dist(cells, stream);
  cuda_event start, uploaded, built, searched, downloaded;
  start.record(stream);
  const TreeSearchStats stats = search(d_idx.data(), d_dist.data(), uploaded, built);
  searched.record(stream);
  PCNN_CUDA_TRY(cudaMemcpyAsync(result.indices.data(), d_idx.data(), d_idx.bytes(),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaMemcpyAsync(result.sqdist.data(), d_dist.data(), d_dist.bytes(),
                                cudaMemcpyDeviceToHost, stream));
  downloaded.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  if (timings) {
    timings->upload_ms = uploaded.since(start);
    timings->build_ms = built.since(uploaded);
    timings->search_ms = searched.since(built);
    timings->download_ms = downloaded.since(searched);
    timings->outlier_queries = stats.outliers;
    timings->distance_evaluations = stats.evaluations;
    timings->outlier_ms = stats.outlier_ms;
  }
  return result;
}

}  // namespace pcnn::detail
