// The calling thread's current CUDA device, switched for a scope.
#pragma once

#include <cuda_runtime.h>

#include <new>

#include "cuda_try.cuh"

namespace pcnn::detail {

/// Makes `device` the calling thread's current device for the scope; at its end the device the
/// thread had before is current again (also where the scope's body switched elsewhere).
class DeviceScope {
 public:
  /// For calls: throws pcnn::cuda_error where the device cannot be read or set.
  explicit DeviceScope(int device) {
    PCNN_CUDA_TRY(cudaGetDevice(&previous_));
    known_ = true;
    if (previous_ != device) PCNN_CUDA_TRY(cudaSetDevice(device));
  }
  /// For destructors and frees: never throws. Where the current device cannot be read or set
  /// (the runtime unloading at exit, say), nothing is switched and the failed call's error is
  /// cleared; on success no error is touched (a caller's pending one stays).
  DeviceScope(int device, std::nothrow_t) noexcept {
    known_ = cudaGetDevice(&previous_) == cudaSuccess;
    if (!known_ || (previous_ != device && cudaSetDevice(device) != cudaSuccess))
      static_cast<void>(cudaGetLastError());
  }
  ~DeviceScope() {
    int now = previous_;
    if (!known_) return;
    if (cudaGetDevice(&now) != cudaSuccess ||
        (now != previous_ && cudaSetDevice(previous_) != cudaSuccess))
      static_cast<void>(cudaGetLastError());
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool known_ = false;
};

}  // namespace pcnn::detail
