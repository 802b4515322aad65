// Cloud and value statistics by GPU reductions (see detail/block_reduce.cuh).
#include <cmath>

#include "detail/block_reduce.cuh"
#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/finite.cuh"
#include "detail/upload.cuh"
#include "pcnn/error.hpp"
#include "pcnn/stats.hpp"

namespace pcnn {
namespace detail {
namespace {

__device__ __forceinline__ double shfl_down(double v, int offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ float shfl_down(float v, int offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}

/// Count, bounds, sums and sums of products of the finite points, in double.
struct Moments {
  double n, s[3], ss[6];
  float lo[3], hi[3];

  static __device__ __forceinline__ Moments identity() {
    Moments m;
    m.n = 0;
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      m.s[a] = 0;
      m.lo[a] = INFINITY;
      m.hi[a] = -INFINITY;
    }
#pragma unroll
    for (int a = 0; a < 6; ++a) m.ss[a] = 0;
    return m;
  }
  __device__ __forceinline__ void add_point(float x, float y, float z) {
    if (!finite3(x, y, z)) return;
    const double p[3] = {x, y, z};
    n += 1;
#pragma unroll
    for (int a = 0; a < 3; ++a) s[a] += p[a];
    ss[0] = fma(p[0], p[0], ss[0]);
    ss[1] = fma(p[0], p[1], ss[1]);
    ss[2] = fma(p[0], p[2], ss[2]);
    ss[3] = fma(p[1], p[1], ss[3]);
    ss[4] = fma(p[1], p[2], ss[4]);
    ss[5] = fma(p[2], p[2], ss[5]);
    lo[0] = fminf(lo[0], x), lo[1] = fminf(lo[1], y), lo[2] = fminf(lo[2], z);
    hi[0] = fmaxf(hi[0], x), hi[1] = fmaxf(hi[1], y), hi[2] = fmaxf(hi[2], z);
  }
  __device__ __forceinline__ void add(const Moments& o) {
    n += o.n;
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      s[a] += o.s[a];
      lo[a] = fminf(lo[a], o.lo[a]);
      hi[a] = fmaxf(hi[a], o.hi[a]);
    }
#pragma unroll
    for (int a = 0; a < 6; ++a) ss[a] += o.ss[a];
  }
  __device__ __forceinline__ Moments shfl_down(int offset) const {
    Moments o;
    o.n = detail::shfl_down(n, offset);
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      o.s[a] = detail::shfl_down(s[a], offset);
      o.lo[a] = detail::shfl_down(lo[a], offset);
      o.hi[a] = detail::shfl_down(hi[a], offset);
    }
#pragma unroll
    for (int a = 0; a < 6; ++a) o.ss[a] = detail::shfl_down(ss[a], offset);
    return o;
  }
};

/// Packed xyz (stride 3) read four points at a time as three 16-byte loads; item i covers
/// points 4i..4i+3. The base must be 16-byte aligned (device allocations are).
struct PackedXyz4 {
  const float* xyz;
  std::int64_t n;
  __device__ __forceinline__ Moments operator()(std::int64_t i) const {
    Moments m = Moments::identity();
    const std::int64_t first = 4 * i;
    if (first + 4 <= n) {
      const float4* v = reinterpret_cast<const float4*>(xyz) + 3 * i;
      const float4 a = v[0], b = v[1], c = v[2];
      m.add_point(a.x, a.y, a.z);
      m.add_point(a.w, b.x, b.y);
      m.add_point(b.z, b.w, c.x);
      m.add_point(c.y, c.z, c.w);
    } else {
      for (std::int64_t j = first; j < n; ++j)
        m.add_point(xyz[3 * j], xyz[3 * j + 1], xyz[3 * j + 2]);
    }
    return m;
  }
};

/// Any stride, one point per item.
struct StridedXyz {
  const float* xyz;
  std::int64_t stride;
  __device__ __forceinline__ Moments operator()(std::int64_t i) const {
    Moments m = Moments::identity();
    const float* p = xyz + i * stride;
    m.add_point(p[0], p[1], p[2]);
    return m;
  }
};

/// Count, min, max, sum and sum of squares of finite values.
struct ValueMoments {
  double n, s, ss, lo, hi;
  static __device__ __forceinline__ ValueMoments identity() {
    return {0, 0, 0, INFINITY, -INFINITY};
  }
  __device__ __forceinline__ void add(const ValueMoments& o) {
    n += o.n, s += o.s, ss += o.ss;
    lo = fmin(lo, o.lo), hi = fmax(hi, o.hi);
  }
  __device__ __forceinline__ ValueMoments shfl_down(int offset) const {
    return {detail::shfl_down(n, offset), detail::shfl_down(s, offset),
            detail::shfl_down(ss, offset), detail::shfl_down(lo, offset),
            detail::shfl_down(hi, offset)};
  }
};

struct FloatValues {
  const float* v;
  __device__ __forceinline__ ValueMoments operator()(std::int64_t i) const {
    const double x = v[i];
    if (!isfinite(x)) return ValueMoments::identity();
    return {1, x, x * x, x, x};
  }
};

template <class Acc, class Load>
Acc reduce(Load load, std::int64_t items, cudaStream_t stream, float* ms) {
  const int blocks = reduce_blocks(items);
  DeviceMemoryResource& mr = async_resource();
  device_buffer<Acc> partials(blocks, stream, mr), out(1, stream, mr);
  cuda_event start, stop;
  start.record(stream);
  reduce_partials_kernel<Acc><<<blocks, kReduceThreads, 0, stream>>>(load, items, partials.data());
  PCNN_CHECK_LAUNCH();
  reduce_final_kernel<Acc><<<1, kReduceThreads, 0, stream>>>(partials.data(), blocks, out.data());
  PCNN_CHECK_LAUNCH();
  stop.record(stream);
  Acc host;
  PCNN_CUDA_TRY(cudaMemcpyAsync(&host, out.data(), sizeof(Acc), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  if (ms) *ms = stop.since(start);
  return host;
}

void check_view(const PointsView& pts) {
  PCNN_EXPECTS(pts.count >= 0, "cloud statistics: negative point count");
  PCNN_EXPECTS(pts.count == 0 || pts.data != nullptr,
               "cloud statistics: null data with a non-zero count");
  PCNN_EXPECTS(pts.stride >= 3, "cloud statistics: stride must be at least 3 floats");
  PCNN_EXPECTS(!pts.is_double(), "cloud statistics: the points must be float32");
}

}  // namespace
}  // namespace detail

namespace {
CloudStats stats_of_device_points(PointsView pts, cudaStream_t stream) {
  CloudStats r;
  r.count = pts.count;
  if (pts.count == 0) return r;
  const bool packed = pts.stride == 3 && reinterpret_cast<std::uintptr_t>(pts.data) % 16 == 0;
  const detail::Moments m =
      packed ? detail::reduce<detail::Moments>(detail::PackedXyz4{pts.data, pts.count},
                                               (pts.count + 3) / 4, stream, &r.device_ms)
             : detail::reduce<detail::Moments>(detail::StridedXyz{pts.data, pts.stride}, pts.count,
                                               stream, &r.device_ms);
  r.finite = static_cast<std::int64_t>(m.n);
  if (r.finite == 0) return r;
  const double n = m.n;
  for (int a = 0; a < 3; ++a) {
    r.min[a] = m.lo[a];
    r.max[a] = m.hi[a];
    r.centroid[a] = m.s[a] / n;
  }
  const int pair[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 2}};
  for (int i = 0; i < 6; ++i)
    r.covariance[i] = m.ss[i] / n - r.centroid[pair[i][0]] * r.centroid[pair[i][1]];
  return r;
}

}  // namespace

CloudStats gpu_cloud_stats(PointsView pts, cudaStream_t stream) {
  detail::check_view(pts);
  if (pts.memory == Memory::device) return stats_of_device_points(pts, stream);
  detail::device_buffer<float> d;
  return stats_of_device_points(detail::upload_points(pts, d, stream, detail::async_resource()),
                                stream);
}

ValueStats gpu_value_stats_device(const float* values, std::int64_t n, cudaStream_t stream) {
  PCNN_EXPECTS(n >= 0 && (n == 0 || values), "value statistics: invalid array");
  ValueStats r;
  if (n == 0) return r;
  const detail::ValueMoments m =
      detail::reduce<detail::ValueMoments>(detail::FloatValues{values}, n, stream, nullptr);
  r.count = static_cast<std::int64_t>(m.n);
  if (r.count == 0) return r;
  r.min = m.lo;
  r.max = m.hi;
  r.mean = m.s / m.n;
  r.stddev = r.count > 1 ? std::sqrt(std::max(0.0, (m.ss - m.s * m.s / m.n) / (m.n - 1))) : 0.0;
  return r;
}

}  // namespace pcnn
