// Smoothing on the GPU: stencils over organized clouds (coefficients as kernel parameters, tiles
// with halos in shared memory) and Laplacian / Taubin steps over kNN lists.
//
// Every float operation that the CPU reference also performs is written with explicit rounding
// (__fmul_rn, __fadd_rn: no fused multiply-add), in the same order, so the two agree to the bit
// on the 2-D stencil path and the unorganized steps; the separable path sums in another order.
#include <algorithm>
#include <cuda/cmath>

#include <climits>
#include <cmath>
#include <vector>

#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/upload.cuh"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/smooth.hpp"

namespace pcnn {
namespace detail {
namespace {

constexpr int kSide = 2 * kMaxStencilRadius + 1;
// The coefficients travel with each launch as a __grid_constant__ kernel parameter (at most 900
// bytes, under the 4 KB every CUDA version accepts): every thread of a warp reads the same
// coefficient in the same iteration, an access the constant cache broadcasts in one transaction,
// as it would from __constant__ memory. Unlike a __constant__ symbol (one per device for the
// whole process), a parameter belongs to its launch, so concurrent calls on different streams
// cannot overwrite each other's coefficients and need no lock.
struct GridWeights {
  float w[kSide * kSide];  // 2-D coefficients, row-major (or taps(dy) * taps(dx))
};
struct Taps {
  float w[kSide];  // the separable path's 1-D taps
};
struct DistanceWeights {
  float w[kDistanceTable];  // distance weights (unorganized smoothing)
};

constexpr int kTileX = 32, kTileY = 8;  // a warp per tile row: its 32 lanes read 32 consecutive
                                        // words of a shared row, so no bank conflicts, whatever
                                        // the row pitch

struct OrganizedArgs {
  const float* xyz;
  std::int64_t stride;
  int width, height, radius;
  SmoothValue value;
  float3 sensor;
  float depth_jump, max_move;
  float* out;  // packed xyz
};

__device__ __forceinline__ float value_of(const float* p, const OrganizedArgs& a) {
  if (!(isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]))) return NAN;
  if (a.value == SmoothValue::z) return p[2];
  const float dx = __fsub_rn(p[0], a.sensor.x), dy = __fsub_rn(p[1], a.sensor.y),
              dz = __fsub_rn(p[2], a.sensor.z);
  return __fsqrt_rn(__fadd_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), __fmul_rn(dz, dz)));
}

// Writes the point with its value moved from v0 to v1 (capped by max_move).
__device__ __forceinline__ void write_point(const OrganizedArgs& a, std::int64_t i, float v0,
                                            float v1) {
  const float* p = a.xyz + i * a.stride;
  float* o = a.out + i * 3;
  if (!isfinite(v0)) {
    o[0] = o[1] = o[2] = NAN;
    return;
  }
  if (a.max_move > 0) v1 = fminf(fmaxf(v1, v0 - a.max_move), v0 + a.max_move);
  o[0] = p[0];
  o[1] = p[1];
  o[2] = p[2];
  if (a.value == SmoothValue::z) {
    o[2] = v1;
  } else if (v0 > 0) {
    const float s = __fdiv_rn(v1, v0);
    o[0] = __fadd_rn(a.sensor.x, __fmul_rn(__fsub_rn(p[0], a.sensor.x), s));
    o[1] = __fadd_rn(a.sensor.y, __fmul_rn(__fsub_rn(p[1], a.sensor.y), s));
    o[2] = __fadd_rn(a.sensor.z, __fmul_rn(__fsub_rn(p[2], a.sensor.z), s));
  }
}

// The values of the block's tile and its halo (hx columns, hy rows each side) in shared memory,
// NaN outside the image or where the point is invalid.
__device__ __forceinline__ void load_tile(float* tile, int pitch, int hx, int hy,
                                          const OrganizedArgs& a) {
  const int x0 = blockIdx.x * kTileX - hx, y0 = blockIdx.y * kTileY - hy;
  const int rows = kTileY + 2 * hy;
  for (int t = threadIdx.y * kTileX + threadIdx.x; t < rows * pitch; t += kTileX * kTileY) {
    const int x = x0 + t % pitch, y = y0 + t / pitch;
    tile[t] = x >= 0 && x < a.width && y >= 0 && y < a.height
                  ? value_of(a.xyz + (std::int64_t(y) * a.width + x) * a.stride, a)
                  : NAN;
  }
  __syncthreads();
}

// The 2-D stencil: every neighbor tested against the point's own value (depth jumps).
__global__ void __launch_bounds__(kTileX* kTileY)
    stencil_2d_kernel(OrganizedArgs a, const __grid_constant__ GridWeights grid) {
  extern __shared__ float tile[];
  const int R = a.radius, pitch = kTileX + 2 * R, side = 2 * R + 1;
  load_tile(tile, pitch, R, R, a);
  const int x = blockIdx.x * kTileX + threadIdx.x, y = blockIdx.y * kTileY + threadIdx.y;
  if (x >= a.width || y >= a.height) return;
  const float v0 = tile[(threadIdx.y + R) * pitch + threadIdx.x + R];
  float sum = 0.f, wsum = 0.f;
  if (isfinite(v0)) {
    for (int dy = 0; dy < side; ++dy) {
      const float* row = tile + (threadIdx.y + dy) * pitch + threadIdx.x;
      for (int dx = 0; dx < side; ++dx) {
        const float v = row[dx];
        const float w = grid.w[dy * side + dx];
        const bool use = isfinite(v) && (a.depth_jump <= 0 || fabsf(v - v0) <= a.depth_jump);
        if (use) {
          sum = __fadd_rn(sum, __fmul_rn(w, v));
          wsum = __fadd_rn(wsum, w);
        }
      }
    }
  }
  write_point(a, std::int64_t(y) * a.width + x, v0, wsum > 0 ? __fdiv_rn(sum, wsum) : v0);
}

// Separable path, first pass: per point, the row sums of weight * value and of weights over
// the valid neighbors (no depth-jump test: that needs the center of the 2-D window).
__global__ void __launch_bounds__(kTileX* kTileY)
    stencil_rows_kernel(OrganizedArgs a, const __grid_constant__ Taps taps,
                        float2* __restrict__ partial) {
  extern __shared__ float tile[];
  const int R = a.radius, pitch = kTileX + 2 * R;
  load_tile(tile, pitch, R, 0, a);
  const int x = blockIdx.x * kTileX + threadIdx.x, y = blockIdx.y * kTileY + threadIdx.y;
  if (x >= a.width || y >= a.height) return;
  const float* row = tile + threadIdx.y * pitch + threadIdx.x;
  float sum = 0.f, wsum = 0.f;
  for (int dx = 0; dx <= 2 * R; ++dx) {
    const float v = row[dx];
    if (isfinite(v)) {
      sum = __fadd_rn(sum, __fmul_rn(taps.w[dx], v));
      wsum = __fadd_rn(wsum, taps.w[dx]);
    }
  }
  partial[std::int64_t(y) * a.width + x] = make_float2(sum, wsum);
}

// Second pass: the column sums of the row sums; then the point moves.
__global__ void __launch_bounds__(kTileX* kTileY)
    stencil_columns_kernel(OrganizedArgs a, const __grid_constant__ Taps taps,
                           const float2* __restrict__ partial) {
  __shared__ float2 tile[(kTileY + 2 * kMaxStencilRadius) * kTileX];
  const int R = a.radius;
  const int x0 = blockIdx.x * kTileX, y0 = blockIdx.y * kTileY - R;
  for (int t = threadIdx.y * kTileX + threadIdx.x; t < (kTileY + 2 * R) * kTileX;
       t += kTileX * kTileY) {
    const int x = x0 + t % kTileX, y = y0 + t / kTileX;
    tile[t] = x < a.width && y >= 0 && y < a.height ? partial[std::int64_t(y) * a.width + x]
                                                    : make_float2(0.f, 0.f);
  }
  __syncthreads();
  const int x = x0 + threadIdx.x, y = blockIdx.y * kTileY + threadIdx.y;
  if (x >= a.width || y >= a.height) return;
  float sum = 0.f, wsum = 0.f;
  for (int dy = 0; dy <= 2 * R; ++dy) {
    const float2 s = tile[(threadIdx.y + dy) * kTileX + threadIdx.x];
    sum = __fadd_rn(sum, __fmul_rn(taps.w[dy], s.x));
    wsum = __fadd_rn(wsum, __fmul_rn(taps.w[dy], s.y));
  }
  const std::int64_t i = std::int64_t(y) * a.width + x;
  const float v0 = value_of(a.xyz + i * a.stride, a);
  write_point(a, i, v0, wsum > 0 ? __fdiv_rn(sum, wsum) : v0);
}

// Unorganized: edge weights from the initial neighbor lists (rank table or distance table).
__global__ void edge_weights_kernel(const std::int32_t* __restrict__ idx,
                                    const float* __restrict__ sqdist, int n, int k,
                                    bool by_distance, const float* __restrict__ rank_weights,
                                    const __grid_constant__ DistanceWeights table,
                                    float* __restrict__ w) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::size_t row = std::size_t(i) * k;
  float h = 0.f;
  int valid = 0;
  for (int j = 0; j < k; ++j)
    if (idx[row + j] >= 0) {
      h = __fadd_rn(h, __fsqrt_rn(sqdist[row + j]));
      ++valid;
    }
  if (valid > 0) h = __fdiv_rn(h, float(valid));
  for (int j = 0; j < k; ++j) {
    float wj = 0.f;
    if (idx[row + j] >= 0) {
      if (!by_distance) {
        wj = rank_weights ? rank_weights[j] : 1.f;
      } else {
        const float x = h > 0 ? __fdiv_rn(__fsqrt_rn(sqdist[row + j]), h) : 0.f;
        wj = table.w[min(static_cast<int>(__fmul_rn(x, 16.f)), kDistanceTable - 1)];
      }
    }
    w[row + j] = wj;
  }
}

// One step: next = cur + f (weighted mean of the neighbors - cur), capped around `start`.
__global__ void laplacian_step_kernel(const float* __restrict__ cur,
                                      const float* __restrict__ start,
                                      const std::int32_t* __restrict__ idx,
                                      const float* __restrict__ w, int n, int k, float f,
                                      float max_move, float* __restrict__ next) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float p[3] = {cur[3 * i], cur[3 * i + 1], cur[3 * i + 2]};
  float* q = next + 3 * std::size_t(i);
  q[0] = p[0];
  q[1] = p[1];
  q[2] = p[2];
  if (!(isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]))) return;
  const std::size_t row = std::size_t(i) * k;
  float s[3] = {0.f, 0.f, 0.f}, ws = 0.f;
  for (int j = 0; j < k; ++j) {
    const int nb = idx[row + j];
    if (nb < 0) continue;
    const float wj = w[row + j];
#pragma unroll
    for (int c = 0; c < 3; ++c) s[c] = __fadd_rn(s[c], __fmul_rn(wj, cur[3 * std::size_t(nb) + c]));
    ws = __fadd_rn(ws, wj);
  }
  if (ws <= 0.f) return;
#pragma unroll
  for (int c = 0; c < 3; ++c)
    q[c] = __fadd_rn(p[c], __fmul_rn(f, __fsub_rn(__fdiv_rn(s[c], ws), p[c])));
  if (max_move > 0) {
    const float* o = start + 3 * std::size_t(i);
    const float d[3] = {__fsub_rn(q[0], o[0]), __fsub_rn(q[1], o[1]), __fsub_rn(q[2], o[2])};
    const float len = __fsqrt_rn(
        __fadd_rn(__fadd_rn(__fmul_rn(d[0], d[0]), __fmul_rn(d[1], d[1])), __fmul_rn(d[2], d[2])));
    if (len > max_move)
      for (int c = 0; c < 3; ++c) q[c] = __fadd_rn(o[c], __fmul_rn(d[c], __fdiv_rn(max_move, len)));
  }
}

__global__ void pack_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                            float* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int c = 0; c < 3; ++c) out[3 * std::size_t(i) + c] = xyz[i * stride + c];
}

}  // namespace
}  // namespace detail

std::vector<float> gpu_smooth_organized(PointsView pts, int width, int height,
                                        const OrganizedSmoothParams& params, SmoothTimings* timings,
                                        cudaStream_t stream) {
  validate(params);
  PCNN_EXPECTS(pts.count >= 0 && pts.stride >= 3 && (pts.count == 0 || pts.data != nullptr),
               "organized smoothing: invalid points view");
  PCNN_EXPECTS(pts.memory == Memory::host,
               "organized smoothing: the points must be in host memory");
  PCNN_EXPECTS(!pts.is_double(), "organized smoothing: the points must be float32");
  PCNN_EXPECTS(width > 0 && height > 0 && std::int64_t(width) * height == pts.count,
               "organized smoothing: width x height (" + std::to_string(width) + " x " +
                   std::to_string(height) + ") must equal the point count (" +
                   std::to_string(pts.count) + ")");
  const Stencil st = normalized(params.stencil);
  const int R = st.radius, side = 2 * R + 1;
  const bool separable = st.separable && params.depth_jump <= 0;
  detail::GridWeights grid{};
  detail::Taps taps{};
  for (int dy = 0; dy < side; ++dy)
    for (int dx = 0; dx < side; ++dx)
      grid.w[dy * side + dx] =
          st.separable ? st.weights[dy] * st.weights[dx] : st.weights[dy * side + dx];
  if (st.separable) std::copy(st.weights.begin(), st.weights.begin() + side, taps.w);

  DeviceMemoryResource& mr = detail::async_resource();
  detail::device_buffer<float> raw, out(pts.count * 3, stream, mr);
  detail::device_buffer<float2> partial(separable ? pts.count : 0, stream, mr);
  detail::cuda_event start, uploaded, smoothed, downloaded;
  start.record(stream);
  detail::upload_points(pts, raw, stream, mr);
  uploaded.record(stream);
  detail::OrganizedArgs a{raw.data(),
                          pts.stride,
                          width,
                          height,
                          R,
                          params.value,
                          make_float3(params.sensor[0], params.sensor[1], params.sensor[2]),
                          params.depth_jump,
                          params.max_move,
                          out.data()};
  const dim3 block(detail::kTileX, detail::kTileY);
  const dim3 blocks(cuda::ceil_div(width, detail::kTileX), cuda::ceil_div(height, detail::kTileY));
  if (separable) {
    const std::size_t shared = sizeof(float) * detail::kTileY * (detail::kTileX + 2 * R);
    detail::stencil_rows_kernel<<<blocks, block, shared, stream>>>(a, taps, partial.data());
    PCNN_CHECK_LAUNCH();
    detail::stencil_columns_kernel<<<blocks, block, 0, stream>>>(a, taps, partial.data());
    PCNN_CHECK_LAUNCH();
  } else {
    const std::size_t shared = sizeof(float) * (detail::kTileY + 2 * R) * (detail::kTileX + 2 * R);
    detail::stencil_2d_kernel<<<blocks, block, shared, stream>>>(a, grid);
    PCNN_CHECK_LAUNCH();
  }
  smoothed.record(stream);
  std::vector<float> result(pts.count * 3);
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(result.data(), out.data(), out.bytes(), cudaMemcpyDeviceToHost, stream));
  downloaded.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  if (timings) {
    *timings = SmoothTimings{};
    timings->upload_ms = uploaded.since(start);
    timings->smooth_ms = smoothed.since(uploaded);
    timings->download_ms = downloaded.since(smoothed);
    timings->separable = separable;
  }
  return result;
}

std::vector<float> gpu_smooth_unorganized(PointsView pts, const UnorganizedSmoothParams& params,
                                          SmoothTimings* timings, cudaStream_t stream) {
  validate(params);
  PCNN_EXPECTS(pts.memory == Memory::host, "smoothing: the points must be in host memory");
  PCNN_EXPECTS(!pts.is_double(), "smoothing: the points must be float32");
  PCNN_EXPECTS(pts.count >= 0 && pts.count <= INT_MAX, "smoothing: invalid point count");
  const int n = static_cast<int>(pts.count), k = params.k;
  // One pool for the index and the smoothing's own buffers.
  int device = 0;  // the caller's current device, where its stream lives
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  const std::shared_ptr<DeviceMemoryResource> pool = make_pool_resource(device);
  DeviceMemoryResource& mr = *pool;
  detail::cuda_event start, uploaded, searched, smoothed, downloaded;
  start.record(stream);
  detail::device_buffer<float> raw, a(std::size_t(n) * 3, stream, mr),
      b(std::size_t(n) * 3, stream, mr), first(std::size_t(n) * 3, stream, mr),
      sq(std::size_t(n) * k, stream, mr), w(std::size_t(n) * k, stream, mr),
      rank(params.rank_weights.size(), stream, mr);
  detail::device_buffer<std::int32_t> idx(std::size_t(n) * k, stream, mr);
  detail::upload_points(pts, raw, stream, mr);
  if (rank.size() > 0)
    PCNN_CUDA_TRY(cudaMemcpyAsync(rank.data(), params.rank_weights.data(), rank.bytes(),
                                  cudaMemcpyHostToDevice, stream));
  detail::DistanceWeights table{};
  const auto weights = distance_weight_table();
  std::copy(weights.begin(), weights.end(), table.w);
  uploaded.record(stream);
  // The neighbors, once, kept on the device.
  IndexOptions on_gpu;
  on_gpu.backend = Backend::cuda;
  on_gpu.device = device;
  on_gpu.memory = pool;
  Index index(device_points(raw.data(), pts.count, pts.stride), on_gpu, stream);
  index.self_knn_async({k, true}, {idx.data(), n, k, Memory::device},
                       {sq.data(), n, k, Memory::device}, stream);
  searched.record(stream);
  std::vector<float> result(std::size_t(n) * 3);
  if (n > 0) {
    detail::pack_kernel<<<cuda::ceil_div(n, 256), 256, 0, stream>>>(raw.data(), pts.stride, n,
                                                                    first.data());
    PCNN_CHECK_LAUNCH();
    detail::edge_weights_kernel<<<cuda::ceil_div(n, 256), 256, 0, stream>>>(
        idx.data(), sq.data(), n, k, params.weights == UnorganizedSmoothParams::Weights::distance,
        rank.size() > 0 ? rank.data() : nullptr, table, w.data());
    PCNN_CHECK_LAUNCH();
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(a.data(), first.data(), a.bytes(), cudaMemcpyDeviceToDevice, stream));
    for (int it = 0; it < params.iterations; ++it) {
      for (const float f : {params.lambda, params.mu}) {
        if (f == 0.f) continue;
        detail::laplacian_step_kernel<<<cuda::ceil_div(n, 256), 256, 0, stream>>>(
            a.data(), first.data(), idx.data(), w.data(), n, k, f, params.max_move, b.data());
        PCNN_CHECK_LAUNCH();
        std::swap(a, b);
      }
    }
  }
  smoothed.record(stream);
  if (n > 0)
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(result.data(), a.data(), a.bytes(), cudaMemcpyDeviceToHost, stream));
  downloaded.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  if (timings) {
    *timings = SmoothTimings{};
    timings->upload_ms = uploaded.since(start);
    timings->knn_ms = searched.since(uploaded);
    timings->smooth_ms = smoothed.since(searched);
    timings->download_ms = downloaded.since(smoothed);
  }
  return result;
}

}  // namespace pcnn
