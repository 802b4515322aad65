// Upload and on-device compaction of the points a search takes.
#include <cub/device/device_scan.cuh>

#include "detail/cuda_try.cuh"
#include "detail/finite.cuh"
#include "detail/pack_points.cuh"
#include "detail/prepare.cuh"
#include "detail/upload.cuh"

namespace pcnn::detail {
namespace {

constexpr int kThreads = 256;

/// flags[i] = 1 when point i is finite.
__global__ void finite_flags_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                                    int* __restrict__ flags) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  flags[i] = finite3(p[0], p[1], p[2]) ? 1 : 0;
}

/// Finite point i goes to slot pos[i] (exclusive prefix sum of the flags) of the compacted
/// references, remembering its original index; the last thread writes the count. When `queries`
/// is given (self-search), every point also becomes a query whose w tags its own compacted slot
/// (to skip it, when excluding self) or marks it invalid.
__global__ void compact_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                               const int* __restrict__ pos, const int* __restrict__ flags,
                               float4* __restrict__ refs, int* __restrict__ ref_ids,
                               float4* __restrict__ queries, bool exclude_self,
                               int* __restrict__ count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  bool ok = flags[i] != 0;
  if (i == n - 1) *count = pos[i] + flags[i];
  if (ok) {
    refs[pos[i]] = make_float4(p[0], p[1], p[2], 0.f);
    ref_ids[pos[i]] = i;
  }
  if (queries) {
    int tag = ok ? (exclude_self ? pos[i] : kQueryNoSelf) : kQueryInvalid;
    queries[i] = make_float4(p[0], p[1], p[2], __int_as_float(tag));
  }
}

/// Packs a separate query set; non-finite queries are tagged invalid.
__global__ void pack_queries_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                                    float4* __restrict__ queries) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  int tag = finite3(p[0], p[1], p[2]) ? kQueryNoSelf : kQueryInvalid;
  queries[i] = make_float4(p[0], p[1], p[2], __int_as_float(tag));
}

int blocks_for(int n) { return (n + kThreads - 1) / kThreads; }

}  // namespace

PreparedSearch prepare_search(PointsView refs, const PointsView* queries, bool exclude_self,
                              cudaStream_t stream, cuda_event& uploaded) {
  PreparedSearch out;
  out.n_refs_total = static_cast<int>(refs.count);
  out.n_queries = static_cast<int>(queries ? queries->count : refs.count);
  const int n = out.n_refs_total;

  device_buffer<float> raw_refs, raw_queries;
  upload_points(refs, raw_refs, stream);
  if (queries) upload_points(*queries, raw_queries, stream);
  uploaded.record(stream);

  out.refs.resize(n, stream);
  out.ref_ids.resize(n, stream);
  out.ref_count.resize(1, stream);
  out.queries.resize(out.n_queries, stream);
  PCNN_CUDA_TRY(cudaMemsetAsync(out.ref_count.data(), 0, sizeof(int), stream));

  if (n > 0) {
    device_buffer<int> flags(n, stream), scan(n, stream);
    finite_flags_kernel<<<blocks_for(n), kThreads, 0, stream>>>(raw_refs.data(), refs.stride, n,
                                                                flags.data());
    PCNN_CHECK_LAUNCH();
    std::size_t temp_bytes = 0;
    PCNN_CUDA_TRY(
        cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, flags.data(), scan.data(), n, stream));
    device_buffer<unsigned char> temp(temp_bytes, stream);
    PCNN_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, flags.data(), scan.data(),
                                                n, stream));
    compact_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        raw_refs.data(), refs.stride, n, scan.data(), flags.data(), out.refs.data(),
        out.ref_ids.data(), queries ? nullptr : out.queries.data(), exclude_self,
        out.ref_count.data());
    PCNN_CHECK_LAUNCH();
    // The buffers above are freed when this scope ends; cudaFree waits for the work using them.
  }
  if (queries && out.n_queries > 0) {
    pack_queries_kernel<<<blocks_for(out.n_queries), kThreads, 0, stream>>>(
        raw_queries.data(), queries->stride, out.n_queries, out.queries.data());
    PCNN_CHECK_LAUNCH();
  }
  return out;
}

}  // namespace pcnn::detail
