// Statistical and radius outlier removal on the GPU, deciding as PCL decides.
#include <cuda/cmath>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "detail/block_reduce.cuh"
#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/finite.cuh"
#include "detail/upload.cuh"
#include "pcnn/error.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/index.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/stats.hpp"

namespace pcnn {
namespace detail {
namespace {

constexpr int kThreads = 256;

// FLANN's float arithmetic, spelled out so that the compiler cannot fuse it.
__device__ __forceinline__ float flann_d(const float* a, const float* b) {
  const float dx = __fsub_rn(a[0], b[0]), dy = __fsub_rn(a[1], b[1]), dz = __fsub_rn(a[2], b[2]);
  return __fadd_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), __fmul_rn(dz, dz));
}

// PCL's per-point mean distance: sqrt of each neighbor's float squared distance, summed in double
// in ascending order, divided by k, rounded to float. Non-finite points get 0 (and NaN in
// `valid_dist`, so that the statistics skip them, as PCL's count does).
__global__ void sor_mean_distance_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                                         const std::int32_t* __restrict__ idx, int k,
                                         float* __restrict__ dist, float* __restrict__ valid_dist) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  if (!finite3(p[0], p[1], p[2])) {
    dist[i] = 0.f;
    valid_dist[i] = NAN;
    return;
  }
  float d[kMaxK];
  const std::size_t row = static_cast<std::size_t>(i) * k;
  for (int j = 0; j < k; ++j) {
    const float v = flann_d(p, xyz + static_cast<std::int64_t>(idx[row + j]) * stride);
    int m = j;  // insertion sort: the sum runs in ascending order, as PCL's sorted results do
    while (m > 0 && d[m - 1] > v) {
      d[m] = d[m - 1];
      --m;
    }
    d[m] = v;
  }
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += sqrt(static_cast<double>(d[j]));
  const float mean = static_cast<float>(sum / k);
  dist[i] = mean;
  valid_dist[i] = mean;
}

// PCL's sums: the distances (float) and their float squares, in double.
struct SorMoments {
  double n, s, ss;
  static __device__ __forceinline__ SorMoments identity() { return {0, 0, 0}; }
  __device__ __forceinline__ void add(const SorMoments& o) { n += o.n, s += o.s, ss += o.ss; }
  __device__ __forceinline__ SorMoments shfl_down(int offset) const {
    return {__shfl_down_sync(0xffffffffu, n, offset), __shfl_down_sync(0xffffffffu, s, offset),
            __shfl_down_sync(0xffffffffu, ss, offset)};
  }
};
struct SorLoad {
  const float* v;
  __device__ __forceinline__ SorMoments operator()(std::int64_t i) const {
    const float x = v[i];
    if (isnan(x)) return SorMoments::identity();
    return {1.0, double(x), double(__fmul_rn(x, x))};
  }
};

__global__ void sor_classify_kernel(const float* __restrict__ dist, int n, double threshold,
                                    unsigned char* __restrict__ keep,
                                    unsigned long long* __restrict__ borderline) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double d = dist[i];
  keep[i] = d > threshold ? 0 : 1;
  if (fabs(d - threshold) <= 1e-12 * fabs(threshold)) atomicAdd(borderline, 1ull);
}

// 1: keep, 0: remove, 2: undecided within float rounding (settled on the CPU).
__global__ void ror_classify_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                                    const std::int32_t* __restrict__ idx,
                                    const float* __restrict__ sqdist, int k, int m, double r2,
                                    unsigned char* __restrict__ keep) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  if (!finite3(p[0], p[1], p[2])) {
    keep[i] = 0;
    return;
  }
  if (m == 0) {
    keep[i] = 1;
    return;
  }
  const std::size_t row = static_cast<std::size_t>(i) * k;
  int found = 0;
  float farthest = 0.f;
  for (int j = 0; j < m; ++j) {
    const int id = idx[row + j];
    if (id < 0) break;
    ++found;
    farthest = fmaxf(farthest, flann_d(p, xyz + static_cast<std::int64_t>(id) * stride));
  }
  if (found < m) {
    keep[i] = 0;  // fewer than m other points in the whole cloud
    return;
  }
  // The m nearest by pcnn's distance; FLANN's may order near-ties differently, which matters only
  // when the m-th nearest lies within rounding of the radius.
  // (The m-th smallest of FLANN's distances is at most `farthest`, so a pass is certain.)
  const double mth = sqdist[row + m - 1];
  const bool near_edge = mth <= r2 * 1.000001 && mth >= r2 * 0.999999;
  keep[i] = double(farthest) <= r2 ? 1 : (near_edge ? 2 : 0);
}

std::vector<std::int32_t> kept_indices(const std::vector<unsigned char>& keep) {
  std::vector<std::int32_t> kept;
  for (std::size_t i = 0; i < keep.size(); ++i)
    if (keep[i] == 1) kept.push_back(static_cast<std::int32_t>(i));
  return kept;
}

}  // namespace
}  // namespace detail

namespace {

// What both filters share: the points on the device (uploaded when in host memory), an index
// over them, and every buffer from one pool of the call's own.
// The caller's current device: filters run where the caller's stream lives.
int current_device() {
  int device = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  return device;
}

IndexOptions options(std::shared_ptr<DeviceMemoryResource> mr) {
  IndexOptions o;
  o.backend = Backend::cuda;
  o.device = current_device();
  o.memory = std::move(mr);
  return o;
}

struct FilterSearch {
  std::shared_ptr<DeviceMemoryResource> mr = make_pool_resource(current_device());
  detail::device_buffer<float> raw;
  PointsView d_pts;
  Index index;
  detail::device_buffer<std::int32_t> idx;
  detail::device_buffer<float> sq;

  // The k nearest other points of every point, into `idx` / `sq` (device memory).
  FilterSearch(PointsView pts, int k, cudaStream_t stream) : d_pts(pts), index(options(mr)) {
    PCNN_EXPECTS(!pts.is_double(), "outlier removal: the points must be float32");
    if (pts.memory == Memory::host) {
      d_pts = detail::upload_points(pts, raw, stream, *mr);
    }
    index.build(d_pts, stream);
    const std::int64_t n = pts.count;
    idx.resize(static_cast<std::size_t>(n) * k, stream, *mr);
    sq.resize(idx.size(), stream, *mr);
    index.self_knn_async({k, true}, {idx.data(), n, k, Memory::device},
                         {sq.data(), n, k, Memory::device}, stream);
  }
};

}  // namespace

FilterResult gpu_statistical_outlier_removal(PointsView pts, SorParams params,
                                             cudaStream_t stream) {
  validate(params);
  FilterResult r;
  const int n = static_cast<int>(pts.count);
  detail::cuda_event t0, t1, t2;
  t0.record(stream);
  FilterSearch fs(pts, params.mean_k, stream);
  PCNN_EXPECTS(fs.index.finite_size() > params.mean_k,
               "SOR: the cloud has " + std::to_string(fs.index.finite_size()) +
                   " finite points; mean_k needs more than " + std::to_string(params.mean_k));
  DeviceMemoryResource& mr = *fs.mr;
  const float* raw = fs.d_pts.data;
  const detail::device_buffer<std::int32_t>& idx = fs.idx;
  t1.record(stream);
  detail::device_buffer<float> dist(n, stream, mr), valid(n, stream, mr);
  detail::sor_mean_distance_kernel<<<cuda::ceil_div(n, detail::kThreads), detail::kThreads, 0,
                                     stream>>>(raw, pts.stride, n, idx.data(), params.mean_k,
                                               dist.data(), valid.data());
  PCNN_CHECK_LAUNCH();
  const int blocks = detail::reduce_blocks(n);
  detail::device_buffer<detail::SorMoments> partials(blocks, stream, mr), total(1, stream, mr);
  detail::reduce_partials_kernel<detail::SorMoments><<<blocks, detail::kReduceThreads, 0, stream>>>(
      detail::SorLoad{valid.data()}, n, partials.data());
  PCNN_CHECK_LAUNCH();
  detail::reduce_final_kernel<detail::SorMoments>
      <<<1, detail::kReduceThreads, 0, stream>>>(partials.data(), blocks, total.data());
  PCNN_CHECK_LAUNCH();
  detail::SorMoments m;
  PCNN_CUDA_TRY(cudaMemcpyAsync(&m, total.data(), sizeof(m), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  // PCL's formulas, in PCL's order.
  r.mean = m.s / m.n;
  r.stddev = std::sqrt((m.ss - m.s * m.s / m.n) / (m.n - 1));
  r.threshold = r.mean + params.std_mul * r.stddev;

  detail::device_buffer<unsigned char> keep(n, stream, mr);
  detail::device_buffer<unsigned long long> borderline(1, stream, mr);
  PCNN_CUDA_TRY(cudaMemsetAsync(borderline.data(), 0, sizeof(unsigned long long), stream));
  detail::sor_classify_kernel<<<cuda::ceil_div(n, detail::kThreads), detail::kThreads, 0, stream>>>(
      dist.data(), n, r.threshold, keep.data(), borderline.data());
  PCNN_CHECK_LAUNCH();
  t2.record(stream);
  std::vector<unsigned char> host(n);
  unsigned long long border = 0;
  PCNN_CUDA_TRY(cudaMemcpyAsync(host.data(), keep.data(), n, cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(&border, borderline.data(), sizeof(border), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  r.kept = detail::kept_indices(host);
  r.borderline = static_cast<std::int64_t>(border);
  r.search_ms = t1.since(t0);
  r.filter_ms = t2.since(t1);
  return r;
}

FilterResult gpu_radius_outlier_removal(PointsView pts, RorParams params, cudaStream_t stream) {
  validate(params);
  const int k = params.min_neighbors > 0 ? params.min_neighbors : 1;
  PCNN_EXPECTS(pts.memory == Memory::host, "ROR: the points must be in host memory");
  PCNN_EXPECTS(!pts.is_double(), "ROR: the points must be float32");
  FilterResult r;
  const int n = static_cast<int>(pts.count);
  detail::cuda_event t0, t1, t2;
  t0.record(stream);
  FilterSearch fs(pts, k, stream);
  t1.record(stream);
  DeviceMemoryResource& mr = *fs.mr;
  const double r2 = params.radius * params.radius;
  detail::device_buffer<unsigned char> keep(n, stream, mr);
  if (n > 0) {
    detail::
        ror_classify_kernel<<<cuda::ceil_div(n, detail::kThreads), detail::kThreads, 0, stream>>>(
            fs.d_pts.data, pts.stride, n, fs.idx.data(), fs.sq.data(), k, params.min_neighbors, r2,
            keep.data());
    PCNN_CHECK_LAUNCH();
  }
  t2.record(stream);
  std::vector<unsigned char> host(n);
  if (n > 0)
    PCNN_CUDA_TRY(cudaMemcpyAsync(host.data(), keep.data(), n, cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  // Settle the undecided points exactly, by PCL's rule over every point.
  for (int i = 0; i < n; ++i) {
    if (host[i] != 2) continue;
    ++r.borderline;
    const float* p = pts.data + static_cast<std::int64_t>(i) * pts.stride;
    std::vector<float> d;
    for (int j = 0; j < n; ++j) {
      const float* o = pts.data + static_cast<std::int64_t>(j) * pts.stride;
      if (j == i || !(std::isfinite(o[0]) && std::isfinite(o[1]) && std::isfinite(o[2]))) continue;
      d.push_back(flann_sqdist(p, o));
    }
    const int m = params.min_neighbors;
    if (static_cast<int>(d.size()) < m) {
      host[i] = 0;
      continue;
    }
    std::nth_element(d.begin(), d.begin() + (m - 1), d.end());
    host[i] = double(d[m - 1]) <= r2 ? 1 : 0;
  }
  r.kept = detail::kept_indices(host);
  r.search_ms = t1.since(t0);
  r.filter_ms = t2.since(t1);
  return r;
}

}  // namespace pcnn
