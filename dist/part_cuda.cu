// A CUDA part's home search with its neighbor indices made global on the device: the part's
// index table lives on the device, so the one random read per neighbor (local index -> global
// index) runs at device memory speed instead of host memory latency. Rows come back through
// page-locked chunks into the caller's host rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "dist/part.hpp"
#include "gpu/detail/cuda_try.cuh"

namespace pcnn::dist {
namespace {

__global__ void map_to_global(std::int32_t* idx, std::int64_t n, const std::int32_t* gid) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int32_t v = idx[i];
    if (v >= 0) idx[i] = gid[v];
  }
}

// The calling thread's device for the length of a scope.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    PCNN_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) PCNN_CUDA_TRY(cudaSetDevice(device));
  }
  ~OnDevice() { PCNN_CUDA_TRY_NO_THROW(cudaSetDevice(previous_)); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = 0;
};

// Device or page-locked host memory freed on every way out.
template <class T, bool Host>
class Buffer {
 public:
  explicit Buffer(std::int64_t count) {
    if (count <= 0) return;
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
    if (Host)
      PCNN_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&p_), bytes, cudaHostAllocDefault));
    else
      PCNN_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&p_), bytes));
  }
  ~Buffer() {
    if (!p_) return;
    if (Host)
      PCNN_CUDA_TRY_NO_THROW(cudaFreeHost(p_));
    else
      PCNN_CUDA_TRY_NO_THROW(cudaFree(p_));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

class Stream {
 public:
  Stream() { PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(s_));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(s_));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace

void knn_global_cuda(Part& part, const Coords* q, std::int64_t m, const KnnParams& params,
                     int threads, std::int32_t* out_idx, float* out_d) {
  if (m <= 0) return;
  const int k = params.k;
  const OnDevice on(part.index->options().device);
  const Stream stream;
  const cudaStream_t s = stream.get();
  // Rows per chunk: 32 MB of indices (and as much of distances) on the device and page-locked,
  // and no more than a device memory cap allows (tiles).
  const std::int64_t chunk = queries_per_call(
      *part.index, std::min<std::int64_t>(m, std::max<std::int64_t>(1, (1 << 23) / k)));
  const Buffer<std::int32_t, false> gid(part.size()), d_idx(chunk * k);
  const Buffer<float, false> d_d(chunk * k);
  const Buffer<std::int32_t, true> h_idx(chunk * k);
  const Buffer<float, true> h_d(chunk * k);
  PCNN_CUDA_TRY(cudaMemcpyAsync(gid.get(), part.ids.data(), part.ids.size() * sizeof(std::int32_t),
                                cudaMemcpyHostToDevice, s));
  for (std::int64_t a = 0; a < m; a += chunk) {
    const std::int64_t c = std::min(chunk, m - a);
    const MatrixView<std::int32_t> iv{d_idx.get(), c, k, Memory::device};
    const MatrixView<float> dv{d_d.get(), c, k, Memory::device};
    if (q)
      part.index->knn(q->from(a).view(c), params, iv, dv, s);
    else
      part.index->self_knn_rows(a, params, iv, dv, s);
    const std::int64_t cells = c * k;
    const int blocks = static_cast<int>(std::min<std::int64_t>((cells + 255) / 256, 65536));
    map_to_global<<<blocks, 256, 0, s>>>(d_idx.get(), cells, gid.get());
    PCNN_CHECK_LAUNCH();
    PCNN_CUDA_TRY(cudaMemcpyAsync(h_idx.get(), d_idx.get(), cells * sizeof(std::int32_t),
                                  cudaMemcpyDeviceToHost, s));
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(h_d.get(), d_d.get(), cells * sizeof(float), cudaMemcpyDeviceToHost, s));
    PCNN_CUDA_TRY(cudaStreamSynchronize(s));
    parallel_for(cells, threads, [&](std::int64_t b, std::int64_t e) {
      std::memcpy(out_idx + a * k + b, h_idx.get() + b, (e - b) * sizeof(std::int32_t));
      std::memcpy(out_d + a * k + b, h_d.get() + b, (e - b) * sizeof(float));
    });
  }
}

PortableLock::PortableLock(const void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return;
  cudaPointerAttributes attr{};
  const cudaError_t q = cudaPointerGetAttributes(&attr, ptr);
  if (q != cudaSuccess) static_cast<void>(cudaGetLastError());
  if (q == cudaSuccess && attr.type == cudaMemoryTypeHost) return;  // the caller's own lock
  PCNN_CUDA_TRY(cudaHostRegister(const_cast<void*>(ptr), bytes, cudaHostRegisterPortable));
  ptr_ = const_cast<void*>(ptr);
}

PortableLock::~PortableLock() {
  if (ptr_) PCNN_CUDA_TRY_NO_THROW(cudaHostUnregister(ptr_));
}

}  // namespace pcnn::dist
