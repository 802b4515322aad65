// A non-throwing switch of the calling thread's current CUDA device, for destructors and frees.
#pragma once

#include <cuda_runtime.h>

namespace pcnn::detail {

/// Makes `device` the calling thread's current device for the scope, then restores the previous
/// one. Never throws: where the current device cannot be read or set (the runtime unloading at
/// exit, say), nothing is switched and that error is cleared (a caller's pending error is not).
class DeviceScope {
 public:
  explicit DeviceScope(int device) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return;
    }
    if (previous_ == device) return;
    switched_ = cudaSetDevice(device) == cudaSuccess;
    if (!switched_) static_cast<void>(cudaGetLastError());
  }
  ~DeviceScope() {
    if (switched_) static_cast<void>(cudaSetDevice(previous_));
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace pcnn::detail
