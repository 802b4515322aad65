// Checking every CUDA runtime call and kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "pcnn/error.hpp"

namespace pcnn::detail {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  std::string msg = std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ") in " + call + " at " + file + ":" +
                    std::to_string(line);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
      err == cudaErrorInvalidDevice || err == cudaErrorCompatNotSupportedOnDevice ||
      err == cudaErrorSystemDriverMismatch || err == cudaErrorNoKernelImageForDevice) {
    throw no_device_error(msg);
  }
  throw cuda_error(msg);
}

}  // namespace pcnn::detail

/// Throws pcnn::cuda_error (with file:line and CUDA's message) when `call` fails.
#define PCNN_CUDA_TRY(call)                                             \
  do {                                                                  \
    cudaError_t pcnn_err_ = (call);                                     \
    if (pcnn_err_ != cudaSuccess)                                       \
      ::pcnn::detail::throw_cuda(pcnn_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// For destructors: reports a failing `call` on stderr instead of throwing.
#define PCNN_CUDA_TRY_NO_THROW(call)                                                              \
  do {                                                                                            \
    cudaError_t pcnn_err_ = (call);                                                               \
    if (pcnn_err_ != cudaSuccess)                                                                 \
      std::fprintf(stderr, "pcnn: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(pcnn_err_), \
                   __FILE__, __LINE__);                                                           \
  } while (0)

/// After every kernel launch: a bad launch configuration shows up here, not later.
#define PCNN_CHECK_LAUNCH() PCNN_CUDA_TRY(cudaGetLastError())
