// Checking every CUDA runtime call and kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "pcnn/error.hpp"

namespace pcnn::detail {

// The message is for users: CUDA's name and reason, and where in pcnn (the source file's name and
// line, for a bug report) -- no build path, no source expression.
// The runtime's last-error state is cleared first: a failed call leaves its error there (an invalid
// argument, an allocation that failed), and the next kernel launch's check (PCNN_CHECK_LAUNCH)
// would report it again, in some later call that did nothing wrong. A sticky error (the context
// is lost) is reported by every later call anyway.
[[noreturn]] inline void throw_cuda(cudaError_t err, const char* file, int line) {
  static_cast<void>(cudaGetLastError());
  const char* slash = std::strrchr(file, '/');
  std::string msg = std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ") at " + (slash ? slash + 1 : file) + ":" +
                    std::to_string(line);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
      err == cudaErrorInvalidDevice || err == cudaErrorCompatNotSupportedOnDevice ||
      err == cudaErrorSystemDriverMismatch || err == cudaErrorNoKernelImageForDevice) {
    throw no_device_error(msg);
  }
  throw cuda_error(msg);
}

}  // namespace pcnn::detail

/// Throws pcnn::cuda_error (CUDA's name and message, and pcnn's file name:line) when `call` fails.
#define PCNN_CUDA_TRY(call)                                                                  \
  do {                                                                                       \
    cudaError_t pcnn_err_ = (call);                                                          \
    if (pcnn_err_ != cudaSuccess) ::pcnn::detail::throw_cuda(pcnn_err_, __FILE__, __LINE__); \
  } while (0)

/// For destructors and cleanup paths, which must not throw: a failing `call` is ignored (its
/// error cleared, so later calls start clean). The library never prints; the failure that
/// matters reaches the caller through the next checked call, which reports the sticky error.
#define PCNN_CUDA_TRY_NO_THROW(call)                                  \
  do {                                                                \
    if ((call) != cudaSuccess) static_cast<void>(cudaGetLastError()); \
  } while (0)

/// After every kernel launch: a bad launch configuration shows up here, not later.
#define PCNN_CHECK_LAUNCH() PCNN_CUDA_TRY(cudaGetLastError())
