// A non-throwing switch of the calling thread's current CUDA device, for destructors and frees.
#pragma once

#include <cuda_runtime.h>

namespace pcnn::detail {

/// Makes `device` the calling thread's current device for the scope, then restores the previous
/// one. Never throws: where the current device cannot be read or set (the runtime unloading at
/// exit, say), nothing is switched and the failed call's error is cleared; on success no error
/// is touched (a caller's pending one stays).
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
    if (switched_ && cudaSetDevice(previous_) != cudaSuccess) static_cast<void>(cudaGetLastError());
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace pcnn::detail
