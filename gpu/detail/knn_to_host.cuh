// The frame every host-memory kNN entry point shares: planning the passes within the device
// memory available, result buffers on the device, the search, the download, and the timing of
// each part.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_try.cuh"
#include "device_buffer.cuh"
#include "pcnn/device.hpp"
#include "pcnn/knn.hpp"
#include "search.cuh"

namespace pcnn::detail {

/// Rows per pass for `rows` output rows of `row_bytes` each, after `working` bytes of other
/// device memory: 0 when everything fits at once (and no pass size is forced), else a multiple
/// of kTreeQueryBlock. `forced` > 0 caps the pass size (rounded up to that multiple). Throws
/// pcnn::out_of_memory_error, naming `what`, when not even one block of rows fits.
inline std::int64_t plan_rows_per_pass(std::int64_t rows, std::int64_t row_bytes,
                                       std::int64_t working, std::int64_t forced,
                                       const std::string& what) {
  const std::int64_t available = device_memory_available();
  // Keep a tenth back for allocation granularity and what the estimate does not see.
  const std::int64_t usable = available - available / 10 - working;
  std::int64_t per_pass = usable > 0 ? usable / row_bytes / kTreeQueryBlock * kTreeQueryBlock : 0;
  if (per_pass < kTreeQueryBlock && per_pass < rows)
    throw_out_of_memory(what, working + std::min<std::int64_t>(rows, kTreeQueryBlock) * row_bytes,
                        available);
  if (forced > 0)
    per_pass =
        std::min(per_pass, (forced + kTreeQueryBlock - 1) / kTreeQueryBlock * kTreeQueryBlock);
  return per_pass >= rows ? 0 : per_pass;
}

/// Runs `search(const KnnOutput&, uploaded, built) -> TreeSearchStats` for `rows` queries, in
/// one pass (`rows_per_pass` 0) or in passes of that many rows, and returns the results in host
/// memory; fills `timings` (whose `algorithm` the caller sets).
template <class Search>
KnnResult knn_to_host(std::int64_t rows, int k, std::int64_t rows_per_pass, cudaStream_t stream,
                      GpuKnnTimings* timings, Search&& search) {
  KnnResult result;
  result.k = k;
  result.rows = rows;
  const std::size_t cells = static_cast<std::size_t>(rows) * k;
  result.indices.assign(cells, -1);
  result.sqdist.assign(cells, INFINITY);
  if (rows == 0) return result;
  const std::size_t device_cells =
      rows_per_pass > 0 ? static_cast<std::size_t>(rows_per_pass) * k : cells;
  device_buffer<std::int32_t> d_idx(device_cells, stream);
  device_buffer<float> d_dist(device_cells, stream);
  KnnOutput out{d_idx.data(), d_dist.data(), rows_per_pass, result.indices.data(),
                result.sqdist.data()};
  cuda_event start, uploaded, built, searched, downloaded;
  start.record(stream);
  const TreeSearchStats stats = search(out, uploaded, built);
  searched.record(stream);
  if (rows_per_pass == 0) {
    PCNN_CUDA_TRY(cudaMemcpyAsync(result.indices.data(), d_idx.data(), d_idx.bytes(),
                                  cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaMemcpyAsync(result.sqdist.data(), d_dist.data(), d_dist.bytes(),
                                  cudaMemcpyDeviceToHost, stream));
  }
  downloaded.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  if (timings) {
    timings->upload_ms = uploaded.since(start);
    timings->build_ms = built.since(uploaded);
    timings->search_ms = rows_per_pass > 0 ? stats.search_ms : searched.since(built);
    timings->download_ms = rows_per_pass > 0 ? stats.download_ms : downloaded.since(searched);
    timings->passes = stats.passes;
    timings->outlier_queries = stats.outliers;
    timings->distance_evaluations = stats.evaluations;
    timings->outlier_ms = stats.outlier_ms;
  }
  return result;
}

}  // namespace pcnn::detail
