// A stream of the caller's own, for one step of work on the current device.
#pragma once

#include <cuda_runtime.h>

#include "cuda_try.cuh"

namespace pcnn::detail {

/// A non-blocking stream on the current device; synchronized and destroyed with its owner.
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

}  // namespace pcnn::detail
