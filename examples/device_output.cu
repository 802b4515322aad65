// A GPU pipeline that never leaves the device between pcnn and the caller's own kernel:
//   points in device memory -> Index (CUDA backend) -> self_knn_async writes neighbor indices and
//   squared distances into the caller's cudaMalloc'd buffers on the caller's stream -> the
//   caller's kernel turns them into each point's mean neighbor distance -> one copy back.
// Everything is queued on one stream, so stream order alone makes each step wait for the one
// before; the host waits once, at the end. Without a usable GPU the program says why and exits 0.
#include <cuda_runtime.h>
#include <pcnn/device.hpp>
#include <pcnn/error.hpp>
#include <pcnn/index.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Every CUDA call of this program goes through here: a failure becomes an exception naming the
// call, so that no error goes unnoticed and the buffers below are still freed.
void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}
#define CUDA_CHECK(call) check((call), #call)

// A stream and device memory owned by the caller (not by pcnn), released when they go out of
// scope; a destructor has no one to report a failure to.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(std::size_t count) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), count * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The caller's own kernel: one thread per point, reading the rows pcnn wrote. A row holds k
// neighbors sorted by squared distance; -1 marks the end when fewer than k exist.
__global__ void mean_neighbor_distance(const std::int32_t* indices, const float* sqdist,
                                       std::int64_t n, int k, float* mean) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.f;
  int found = 0;
  for (int j = 0; j < k && indices[i * k + j] >= 0; ++j, ++found) sum += sqrtf(sqdist[i * k + j]);
  mean[i] = found > 0 ? sum / static_cast<float>(found) : NAN;
}

}  // namespace

int main() {
  const pcnn::DeviceInfo dev = pcnn::query_device();
  if (!dev.available) {
    std::printf("skipped: no usable CUDA device (%s)\n", dev.reason.c_str());
    return 0;
  }
  const std::int64_t n = 200000;
  const int k = 8;

  try {
    // A cloud made on the host here; in a real pipeline it would already be on the device (from
    // a camera driver, a previous kernel...). 200k points in a 10 m cube.
    std::vector<float> host_xyz(3 * static_cast<std::size_t>(n));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(0.f, 10.f);
    for (float& c : host_xyz) c = u(rng);
    std::vector<float> host_mean(static_cast<std::size_t>(n));

    const Stream stream;
    DeviceBuffer<float> xyz(host_xyz.size());
    DeviceBuffer<std::int32_t> indices(static_cast<std::size_t>(n) * k);
    DeviceBuffer<float> sqdist(static_cast<std::size_t>(n) * k);
    DeviceBuffer<float> mean(static_cast<std::size_t>(n));
    CUDA_CHECK(cudaMemcpyAsync(xyz.ptr, host_xyz.data(), host_xyz.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream.s));

    // The index reads the points where they are (device memory), on our stream; building
    // synchronizes with the stream, so the upload above is complete before it starts. Declared
    // after the stream and the buffers, it is destroyed before them.
    pcnn::IndexOptions options;
    options.backend = pcnn::Backend::cuda;
    pcnn::Index index(pcnn::device_points(xyz.ptr, n), options, stream.s);

    // The search writes straight into our buffers and returns without waiting.
    pcnn::KnnParams params;
    params.k = k;
    params.exclude_self = true;
    index.self_knn_async(params, {indices.ptr, n, k, pcnn::Memory::device},
                         {sqdist.ptr, n, k, pcnn::Memory::device}, stream.s);

    // Our kernel, queued behind the search on the same stream: it reads the neighbors in device
    // memory, with no host round trip in between.
    const int block = 256;
    const auto grid = static_cast<unsigned>((n + block - 1) / block);
    mean_neighbor_distance<<<grid, block, 0, stream.s>>>(indices.ptr, sqdist.ptr, n, k, mean.ptr);
    CUDA_CHECK(cudaGetLastError());

    // The one copy back, then the one wait.
    CUDA_CHECK(cudaMemcpyAsync(host_mean.data(), mean.ptr, host_mean.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream.s));
    CUDA_CHECK(cudaStreamSynchronize(stream.s));

    double sum = 0;
    for (const float m : host_mean) sum += m;
    std::printf(
        "%s: %lld points, mean distance to the %d nearest neighbors %.4f m (point 0: "
        "%.4f m)\n",
        dev.name.c_str(), static_cast<long long>(n), k, sum / double(n), host_mean[0]);
  } catch (const pcnn::no_device_error& e) {  // present, but not usable by pcnn
    std::printf("skipped: %s\n", e.what());
    return 0;
  } catch (const std::exception& e) {  // other pcnn::errors and our own CUDA failures
    std::fprintf(stderr, "device_output: %s\n", e.what());
    return 1;
  }
  return 0;
}
