// Exact kNN over the spatial index (see detail/knn_tree.cuh).
#include <cmath>
#include <cstring>
#include <vector>

#include "detail/cuda_try.cuh"
#include "detail/knn_tree.cuh"
#include "detail/radius_tree.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"

namespace pcnn::detail {
namespace {

static_assert(kTreeQueryBlock == kTreeWarps * 32, "a pass must cover whole blocks");

struct LaunchStats {
  int outliers = 0;
  float outlier_ms = 0;
};

// One launch over the slots [a.slot_begin, a.slot_end), then the outliers it found. A hybrid
// search (a radius bound) takes the fixed-radius walk instead, which has no outliers.
template <int CAP>
LaunchStats launch(const TreeView& tree, TreeKnnArgs a, cudaStream_t stream) {
  constexpr int threads = kTreeWarps * 32;
  const int blocks = (a.slot_end - a.slot_begin + threads - 1) / threads;
  constexpr int list_bytes = tree_list_bytes<CAP>();
  static_assert(list_bytes > 0, "lists in shared memory");
  const bool hybrid = std::isfinite(a.bound.r2);
  if (list_bytes > 48 * 1024) {  // above the default limit a kernel must opt in
    PCNN_CUDA_TRY(cudaFuncSetAttribute(knn_tree_kernel<CAP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, list_bytes));
    PCNN_CUDA_TRY(cudaFuncSetAttribute(hybrid_tree_kernel<CAP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, list_bytes));
  }
  if (hybrid) {
    hybrid_tree_kernel<CAP><<<blocks, threads, list_bytes, stream>>>(tree, a);
    PCNN_CHECK_LAUNCH();
    return {};
  }
  PCNN_CUDA_TRY(cudaMemsetAsync(a.outlier_count, 0, sizeof(int), stream));
  knn_tree_kernel<CAP><<<blocks, threads, list_bytes, stream>>>(tree, a);
  PCNN_CHECK_LAUNCH();
  int outliers = 0;
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(&outliers, a.outlier_count, sizeof(int), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  cuda_event outliers_start, outliers_end;
  outliers_start.record(stream);
  if (outliers > 0) {
    knn_tree_outlier_kernel<CAP>
        <<<(outliers + kTreeWarps - 1) / kTreeWarps, threads, 0, stream>>>(tree, a, outliers);
    PCNN_CHECK_LAUNCH();
  }
  outliers_end.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  return {outliers, outliers_end.since(outliers_start)};
}

LaunchStats launch_for_k(const TreeView& tree, const TreeKnnArgs& a, cudaStream_t stream) {
  const int k = a.k;
  if (k <= 1) return launch<1>(tree, a, stream);
  if (k <= 2) return launch<2>(tree, a, stream);
  if (k <= 4) return launch<4>(tree, a, stream);
  if (k <= 8) return launch<8>(tree, a, stream);
  if (k <= 16) return launch<16>(tree, a, stream);
  if (k <= 32) return launch<32>(tree, a, stream);
  if (k <= 64) return launch<64>(tree, a, stream);
  static_assert(kMaxK == 128, "add a capacity for the new kMaxK");
  return launch<128>(tree, a, stream);
}

// Chunked output: the passes, each downloaded and its rows put in place on the host.
void run_passes(const TreeView& tree, TreeKnnArgs a, int n_queries, const KnnOutput& out,
                cudaStream_t stream, TreeSearchStats& stats) {
  const int k = a.k;
  const auto per_pass = static_cast<int>(out.rows_per_pass);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(per_pass) * k), qid(per_pass);
  std::vector<float> dist(idx.size());
  stats.passes = 0;
  for (int begin = 0; begin < n_queries; begin += per_pass) {
    const int end = begin + std::min(per_pass, n_queries - begin);
    const std::size_t cells = static_cast<std::size_t>(end - begin) * k;
    a.slot_begin = begin;
    a.slot_end = end;
    a.out_slot_base = begin;
    cuda_event start, searched, downloaded;
    start.record(stream);
    const LaunchStats ls = launch_for_k(tree, a, stream);
    searched.record(stream);
    PCNN_CUDA_TRY(cudaMemcpyAsync(idx.data(), a.out_idx, cells * sizeof(std::int32_t),
                                  cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaMemcpyAsync(dist.data(), a.out_dist, cells * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
    // The original index of each query of the pass: the w word of its sorted point.
    PCNN_CUDA_TRY(cudaMemcpy2DAsync(qid.data(), sizeof(int), &a.queries[begin].w, sizeof(float4),
                                    sizeof(int), end - begin, cudaMemcpyDeviceToHost, stream));
    downloaded.record(stream);
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    for (int r = 0; r < end - begin; ++r) {
      const std::size_t to = static_cast<std::size_t>(qid[r]) * k, from = std::size_t(r) * k;
      std::memcpy(out.h_idx + to, idx.data() + from, k * sizeof(std::int32_t));
      std::memcpy(out.h_dist + to, dist.data() + from, k * sizeof(float));
    }
    stats.outliers += ls.outliers;
    stats.outlier_ms += ls.outlier_ms;
    stats.search_ms += searched.since(start);
    stats.download_ms += downloaded.since(searched);
    ++stats.passes;
  }
}

}  // namespace

std::int64_t tree_search_range(const SpatialIndex& index, const float4* queries, bool self_search,
                               int slot_begin, int slot_end, KnnParams params, std::int32_t* d_idx,
                               float* d_dist, int* outlier_slots, int* outlier_count,
                               unsigned long long* evaluations, cudaStream_t stream) {
  if (slot_end <= slot_begin) return 0;
  TreeKnnArgs a;
  a.queries = queries;
  a.slot_begin = slot_begin;
  a.slot_end = slot_end;
  a.self_search = self_search;
  a.k = params.k;
  a.exclude_self = params.exclude_self;
  a.out_idx = d_idx;
  a.out_dist = d_dist;
  a.outlier_slots = outlier_slots;
  a.outlier_count = outlier_count;
  a.evaluations = evaluations;
  return launch_for_k(index.view(), a, stream).outliers;
}

std::int64_t tree_working_bytes(PointsView refs, const PointsView* queries, bool index_built) {
  constexpr std::int64_t kSlack = 16 << 20;  // CUB scratch, boxes, counters, pool granularity
  std::int64_t bytes = kSlack;
  // Uploaded coordinates, then the index: sorted points (16), keys (8), and while sorting the
  // key/id pairs twice over (24), plus the boxes (small).
  if (!index_built) bytes += 4 * static_cast<std::int64_t>(span_floats(refs)) + 56 * refs.count;
  const std::int64_t nq = queries ? queries->count : refs.count;
  if (queries)  // uploaded, keyed, sorted (same shape as the index build)
    bytes += 4 * static_cast<std::int64_t>(span_floats(*queries)) + 56 * queries->count;
  return bytes + 4 * nq;  // outlier slots
}

TreeSearchStats tree_search(PointsView refs, const PointsView* queries, KnnParams params,
                            const RadiusBound& bound, const KnnOutput& out, cudaStream_t stream,
                            cuda_event& uploaded, cuda_event& built) {
  device_buffer<float> raw_refs, raw_queries;
  upload_points(refs, raw_refs, stream);
  if (queries) upload_points(*queries, raw_queries, stream);
  uploaded.record(stream);
  SpatialIndex index =
      build_spatial_index(raw_refs.data(), refs.stride, static_cast<int>(refs.count), stream);
  raw_refs = device_buffer<float>();                          // the index holds its own copy
  if (!queries) index.keys = device_buffer<std::uint64_t>();  // only separate queries use keys
  const PointsView d_queries =
      queries ? PointsView{raw_queries.data(), queries->count, queries->stride} : PointsView{};
  return tree_query(index, queries ? &d_queries : nullptr, params, bound, out, stream, built);
}

TreeSearchStats tree_search_device(PointsView refs, const PointsView* queries, KnnParams params,
                                   const KnnOutput& out, cudaStream_t stream, cuda_event& built) {
  SpatialIndex index =
      build_spatial_index(refs.data, refs.stride, static_cast<int>(refs.count), stream);
  if (!queries) index.keys = device_buffer<std::uint64_t>();
  return tree_query(index, queries, params, RadiusBound{}, out, stream, built);
}

TreeSearchStats tree_query(const SpatialIndex& index, const PointsView* queries, KnnParams params,
                           const RadiusBound& bound, const KnnOutput& out, cudaStream_t stream,
                           cuda_event& built) {
  device_buffer<float4> sorted_queries;
  if (queries)
    sorted_queries = sort_queries(index, queries->data, queries->stride,
                                  static_cast<int>(queries->count), stream);
  const int n_queries = queries ? static_cast<int>(queries->count) : index.n_total;

  TreeKnnArgs a;
  a.queries = queries ? sorted_queries.data() : index.points.data();
  a.slot_begin = 0;
  a.slot_end = n_queries;
  a.self_search = queries == nullptr;
  a.k = params.k;
  a.exclude_self = params.exclude_self;
  a.bound = bound;
  a.out_idx = out.d_idx;
  a.out_dist = out.d_dist;
  a.query_offset = out.query_offset;
  const std::int64_t per_pass = out.rows_per_pass > 0 ? out.rows_per_pass : n_queries;
  device_buffer<int> outlier_slots(per_pass, stream), outlier_count(1, stream);
  device_buffer<unsigned long long> evaluations(1, stream);
  a.outlier_slots = outlier_slots.data();
  a.outlier_count = outlier_count.data();
  a.evaluations = evaluations.data();
  PCNN_CUDA_TRY(cudaMemsetAsync(evaluations.data(), 0, sizeof(unsigned long long), stream));
  built.record(stream);
  TreeSearchStats stats;
  stats.refs_finite = index.n;
  if (n_queries == 0) return stats;

  const TreeView tree = index.view();
  if (out.rows_per_pass > 0) {
    run_passes(tree, a, n_queries, out, stream, stats);
  } else {
    const LaunchStats ls = launch_for_k(tree, a, stream);
    stats.outliers = ls.outliers;
    stats.outlier_ms = ls.outlier_ms;
  }
  unsigned long long evals = 0;
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(&evals, evaluations.data(), sizeof(evals), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  stats.evaluations = static_cast<std::int64_t>(evals);
  return stats;
}

}  // namespace pcnn::detail
