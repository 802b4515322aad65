// Exact kNN over the spatial index (see detail/knn_tree.cuh).
#include "detail/cuda_try.cuh"
#include "detail/knn_tree.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"

namespace pcnn::detail {
namespace {

struct TreeLaunch {
  TreeView tree;
  const float4* queries;
  int n_queries;
  bool self_search;
  KnnParams params;
  std::int32_t* d_idx;
  float* d_dist;
  int* outlier_slots;
  int* outlier_count;
  unsigned long long* evaluations;
};

template <int CAP>
TreeSearchStats launch(const TreeLaunch& a, cudaStream_t stream) {
  constexpr int threads = kTreeWarps * 32;
  const int blocks = (a.n_queries + threads - 1) / threads;
  constexpr int list_bytes = tree_list_bytes<CAP>();
  if (list_bytes > 48 * 1024)  // above the default limit a kernel must opt in
    PCNN_CUDA_TRY(cudaFuncSetAttribute(knn_tree_kernel<CAP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, list_bytes));
  knn_tree_kernel<CAP><<<blocks, threads, tree_list_bytes<CAP>(), stream>>>(
      a.tree, a.queries, a.n_queries, a.self_search, a.params.k, a.params.exclude_self, a.d_idx,
      a.d_dist, a.outlier_slots, a.outlier_count, a.evaluations);
  PCNN_CHECK_LAUNCH();
  int outliers = 0;
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(&outliers, a.outlier_count, sizeof(int), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  cuda_event outliers_start, outliers_end;
  outliers_start.record(stream);
  if (outliers > 0) {
    knn_tree_outlier_kernel<CAP><<<(outliers + kTreeWarps - 1) / kTreeWarps, threads, 0, stream>>>(
        a.tree, a.queries, a.outlier_slots, outliers, a.params.k, a.params.exclude_self, a.d_idx,
        a.d_dist, a.evaluations);
    PCNN_CHECK_LAUNCH();
  }
  outliers_end.record(stream);
  unsigned long long evaluations = 0;
  PCNN_CUDA_TRY(cudaMemcpyAsync(&evaluations, a.evaluations, sizeof(evaluations),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  return {outliers, static_cast<std::int64_t>(evaluations), outliers_end.since(outliers_start)};
}

}  // namespace

TreeSearchStats tree_search(PointsView refs, const PointsView* queries, KnnParams params,
                            std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                            cuda_event& uploaded, cuda_event& built) {
  device_buffer<float> raw_refs, raw_queries;
  upload_points(refs, raw_refs, stream);
  if (queries) upload_points(*queries, raw_queries, stream);
  uploaded.record(stream);
  const PointsView d_refs{raw_refs.data(), refs.count, refs.stride};
  const PointsView d_queries =
      queries ? PointsView{raw_queries.data(), queries->count, queries->stride} : PointsView{};
  return tree_search_device(d_refs, queries ? &d_queries : nullptr, params, d_idx, d_dist, stream,
                            built);
}

TreeSearchStats tree_search_device(PointsView refs, const PointsView* queries, KnnParams params,
                                   std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                                   cuda_event& built) {
  SpatialIndex index =
      build_spatial_index(refs.data, refs.stride, static_cast<int>(refs.count), stream);
  if (!queries) index.keys = device_buffer<std::uint64_t>();  // only separate queries look keys up
  return tree_query(index, queries, params, d_idx, d_dist, stream, built);
}

TreeSearchStats tree_query(const SpatialIndex& index, const PointsView* queries, KnnParams params,
                           std::int32_t* d_idx, float* d_dist, cudaStream_t stream,
                           cuda_event& built) {
  device_buffer<float4> sorted_queries;
  if (queries)
    sorted_queries = sort_queries(index, queries->data, queries->stride,
                                  static_cast<int>(queries->count), stream);

  TreeLaunch a;
  a.tree = index.view();
  a.queries = queries ? sorted_queries.data() : index.points.data();
  a.n_queries = queries ? static_cast<int>(queries->count) : index.n_total;
  a.self_search = queries == nullptr;
  a.params = params;
  a.d_idx = d_idx;
  a.d_dist = d_dist;
  device_buffer<int> outlier_slots(a.n_queries, stream), outlier_count(1, stream);
  device_buffer<unsigned long long> evaluations(1, stream);
  a.outlier_slots = outlier_slots.data();
  a.outlier_count = outlier_count.data();
  a.evaluations = evaluations.data();
  PCNN_CUDA_TRY(cudaMemsetAsync(outlier_count.data(), 0, sizeof(int), stream));
  PCNN_CUDA_TRY(cudaMemsetAsync(evaluations.data(), 0, sizeof(unsigned long long), stream));
  built.record(stream);
  if (a.n_queries == 0) return {};
  TreeSearchStats stats;

  const int k = params.k;
  if (k <= 1)
    stats = launch<1>(a, stream);
  else if (k <= 2)
    stats = launch<2>(a, stream);
  else if (k <= 4)
    stats = launch<4>(a, stream);
  else if (k <= 8)
    stats = launch<8>(a, stream);
  else if (k <= 16)
    stats = launch<16>(a, stream);
  else if (k <= 32)
    stats = launch<32>(a, stream);
  else if (k <= 64)
    stats = launch<64>(a, stream);
  else
    stats = launch<128>(a, stream);
  static_assert(kMaxK == 128, "add a capacity for the new kMaxK");
  stats.refs_finite = index.n;
  return stats;
}

}  // namespace pcnn::detail
