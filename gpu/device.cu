// Device discovery and context start-up.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "detail/cuda_try.cuh"
#include "detail/curve_order.cuh"
#include "detail/search.cuh"
#include "pcnn/device.hpp"

namespace pcnn {

DeviceInfo query_device(int ordinal) {
  DeviceInfo info;
  info.ordinal = ordinal;
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state for later calls
    info.reason = std::string(cudaGetErrorString(err));
    if (err == cudaErrorInsufficientDriver && info.driver_version == 0)
      info.reason = "no NVIDIA driver is installed";
    else if (err == cudaErrorInsufficientDriver)
      info.reason += " (driver supports CUDA " + std::to_string(info.driver_version / 1000) + "." +
                     std::to_string(info.driver_version % 1000 / 10) + ", pcnn needs " +
                     std::to_string(info.runtime_version / 1000) + "." +
                     std::to_string(info.runtime_version % 1000 / 10) + ")";
    return info;
  }
  if (ordinal < 0 || ordinal >= count) {
    info.reason =
        "no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(count) + " present)";
    return info;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    info.reason = cudaGetErrorString(err);
    return info;
  }
  info.available = true;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_memory = static_cast<std::int64_t>(prop.totalGlobalMem);
  info.multiprocessors = prop.multiProcessorCount;
  info.integrated = prop.integrated != 0;
  return info;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

double initialize_device(int ordinal) {
  const auto t0 = std::chrono::steady_clock::now();  // the driver's start-up included
  DeviceInfo info = query_device(ordinal);
  if (!info.available) throw no_device_error("no usable CUDA device: " + info.reason);
  PCNN_CUDA_TRY(cudaSetDevice(ordinal));
  PCNN_CUDA_TRY(cudaFree(nullptr));  // forces context creation
  detail::load_sort_kernels(ordinal);
  detail::load_search_kernels(ordinal);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

void release_device(int ordinal) noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (cudaSetDevice(ordinal) == cudaSuccess) {
    PCNN_CUDA_TRY_NO_THROW(cudaDeviceReset());
    detail::forget_sort_kernels(ordinal);
    detail::forget_search_kernels(ordinal);
  }
  cudaGetLastError();
  if (previous != ordinal) static_cast<void>(cudaSetDevice(previous));
  cudaGetLastError();
}

}  // namespace pcnn
