// Exact kNN over the spatial index (see detail/knn_tree.cuh).
#include <cuda/cmath>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "detail/cuda_try.cuh"
#include "detail/knn_tree.cuh"
#include "detail/radius_tree.cuh"
#include "detail/refine.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"

namespace pcnn::detail {
namespace {

static_assert(kTreeQueryBlock == kTreeWarps * 32, "a pass must cover whole blocks");

// One launch over the slots [a.slot_begin, a.slot_end), then the outliers it found (no host
// round trip: the outlier kernel reads their count on the device). A hybrid search (a radius
// bound) takes the fixed-radius walk instead, which has no outliers.
template <int CAP>
void launch(const TreeView& tree, TreeKnnArgs a, cudaStream_t stream) {
  constexpr int threads = kTreeWarps * 32;
  const int blocks = cuda::ceil_div(a.slot_end - a.slot_begin, threads);
  constexpr int list_bytes = tree_list_bytes<CAP>();
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
    return;
  }
  PCNN_CUDA_TRY(cudaMemsetAsync(a.outlier_count, 0, sizeof(int), stream));
  knn_tree_kernel<CAP><<<blocks, threads, list_bytes, stream>>>(tree, a);
  PCNN_CHECK_LAUNCH();
  // Outliers are rare (a fraction of a percent): a few waves of warps cover them.
  int device = 0, sms = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int outlier_blocks = std::max(1, std::min(blocks * kTreeWarps, 4 * sms));
  knn_tree_outlier_kernel<CAP><<<outlier_blocks, threads, 0, stream>>>(tree, a);
  PCNN_CHECK_LAUNCH();
}

// Calls f(std::integral_constant<int, CAP>{}) with the smallest list capacity that holds k: the
// one place the capacities are listed.
template <class F>
void with_capacity(int k, F&& f) {
  using std::integral_constant;
  if (k <= 1) return f(integral_constant<int, 1>{});
  if (k <= 2) return f(integral_constant<int, 2>{});
  if (k <= 4) return f(integral_constant<int, 4>{});
  if (k <= 8) return f(integral_constant<int, 8>{});
  if (k <= 16) return f(integral_constant<int, 16>{});
  if (k <= 32) return f(integral_constant<int, 32>{});
  if (k <= 64) return f(integral_constant<int, 64>{});
  static_assert(kMaxK == 128, "add a capacity for the new kMaxK");
  f(integral_constant<int, 128>{});
}

void launch_for_k(const TreeView& tree, const TreeKnnArgs& a, cudaStream_t stream) {
  with_capacity(a.k, [&](auto cap) { launch<decltype(cap)::value>(tree, a, stream); });
}

template <int CAP>
void launch_refine(const TreeView& tree, const RefineArgs& r, cudaStream_t stream) {
  const int slots = r.slot_end - r.slot_begin;
  refine_kernel<CAP><<<cuda::ceil_div(slots, 128), 128, 0, stream>>>(r);
  PCNN_CHECK_LAUNCH();
  int device = 0, sms = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int blocks = std::max(1, std::min(cuda::ceil_div(slots, kTreeWarps * 32), 2 * sms));
  refine_gather_kernel<CAP><<<blocks, kTreeWarps * 32, 0, stream>>>(tree, r);
  PCNN_CHECK_LAUNCH();
}

// The candidates the float search keeps: k + 1, unless lists of that capacity would not fit the
// device's shared memory (consumer GPUs, at k = 32 or 64, where k's lists still fit): then k,
// and the refinement settles every full row by the gather (exact, slower).
int candidate_width(int k) {
  if (k + 1 > kMaxK) return k;
  int cap = 1;
  while (cap < k + 1) cap *= 2;
  int device = 0, optin = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  constexpr int kStatic = kTreeWarps * (kCell * 16 + kTreeStack * 4);  // staged cell, stack
  return cap * kTreeWarps * 32 * 8 + kStatic <= optin ? k + 1 : k;
}

// The float search of a launch's slots with k + 1 candidates into scratch, then the exact
// refinement of every row into the caller's rows (see detail/refine.cuh).
void launch_exact(const TreeView& tree, const TreeKnnArgs& a, const ExactSearch& ex,
                  cudaStream_t stream, DeviceMemoryResource& mr) {
  const int slots = a.slot_end - a.slot_begin;
  if (slots <= 0) return;
  const int width = candidate_width(a.k);
  device_buffer<std::int32_t> cand_idx(static_cast<std::size_t>(slots) * width, stream, mr);
  device_buffer<float> cand_dist(cand_idx.size(), stream, mr);
  device_buffer<int> flagged_slots(slots, stream, mr), flagged_count(1, stream, mr);
  device_buffer<float> flagged_reach(slots, stream, mr);
  TreeKnnArgs s = a;
  s.k = width;
  s.out_idx = cand_idx.data();
  s.out_dist = cand_dist.data();
  s.out_slot_base = a.slot_begin;
  launch_for_k(tree, s, stream);
  PCNN_CUDA_TRY(cudaMemsetAsync(flagged_count.data(), 0, sizeof(int), stream));
  RefineArgs r;
  r.queries = a.queries;
  r.slot_begin = a.slot_begin;
  r.slot_end = a.slot_end;
  r.out_slot_base = a.out_slot_base;
  r.k = a.k;
  r.self_offset = a.exclude_self ? a.query_offset : -1;
  r.bound = a.bound;
  r.cand_idx = cand_idx.data();
  r.cand_dist = cand_dist.data();
  r.width = width;
  r.refs = ex.refs;
  r.queries_exact = ex.queries;
  r.err = ex.err;
  r.out_idx = a.out_idx;
  r.out_dist = a.out_dist;
  r.flagged_slots = flagged_slots.data();
  r.flagged_reach = flagged_reach.data();
  r.flagged_count = flagged_count.data();
  r.refined = a.evaluations ? a.evaluations + 1 : nullptr;
  with_capacity(a.k, [&](auto cap) { launch_refine<decltype(cap)::value>(tree, r, stream); });
}

// Chunked output: the passes, each downloaded and its rows put in place on the host.
void run_passes(const TreeView& tree, TreeKnnArgs a, int n_queries, const KnnOutput& out,
                const ExactSearch& ex, cudaStream_t stream, DeviceMemoryResource& mr,
                TreeSearchStats& stats) {
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
    launch_exact(tree, a, ex, stream, mr);
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
    stats.search_ms += searched.since(start);
    stats.download_ms += downloaded.since(searched);
    ++stats.passes;
  }
}

}  // namespace

void tree_search_range(const SpatialIndex& index, const float4* queries, bool self_search,
                       int slot_begin, int slot_end, KnnParams params, const RadiusBound& bound,
                       std::int32_t* d_idx, float* d_dist, int* outlier_slots, int* outlier_count,
                       unsigned long long* evaluations, int query_offset, const ExactSearch& ex,
                       cudaStream_t stream, DeviceMemoryResource& mr) {
  if (slot_end <= slot_begin) return;
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
  a.bound = bound;
  a.evaluations = evaluations;
  a.query_offset = query_offset;
  launch_exact(index.view(), a, ex, stream, mr);
}

TreeSearchStats tree_query(const SpatialIndex& index, const PointsView* queries, KnnParams params,
                           const RadiusBound& bound, const KnnOutput& out, const ExactSearch& ex,
                           cudaStream_t stream, cuda_event& built, DeviceMemoryResource& mr,
                           bool read_stats) {
  device_buffer<float4> sorted_queries;
  if (queries)
    sorted_queries = sort_queries(index, queries->data, queries->stride,
                                  static_cast<int>(queries->count), stream, mr);
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
  device_buffer<int> outlier_slots(per_pass, stream, mr), outlier_count(1, stream, mr);
  device_buffer<unsigned long long> evaluations(2, stream, mr);  // evaluations, refined rows
  a.outlier_slots = outlier_slots.data();
  a.outlier_count = outlier_count.data();
  a.evaluations = evaluations.data();
  PCNN_CUDA_TRY(cudaMemsetAsync(evaluations.data(), 0, evaluations.bytes(), stream));
  built.record(stream);
  TreeSearchStats stats;
  if (n_queries == 0) return stats;

  const TreeView tree = index.view();
  if (out.rows_per_pass > 0)
    run_passes(tree, a, n_queries, out, ex, stream, mr, stats);
  else
    launch_exact(tree, a, ex, stream, mr);
  if (!read_stats) return stats;
  unsigned long long counts[2] = {0, 0};
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(counts, evaluations.data(), sizeof counts, cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  stats.evaluations = static_cast<std::int64_t>(counts[0]);
  stats.refined_rows = static_cast<std::int64_t>(counts[1]);
  return stats;
}

}  // namespace pcnn::detail
