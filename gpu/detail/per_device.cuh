// Values asked of a CUDA device once a process (attributes, occupancies), and which devices have
// a set of kernels loaded: kept per device.
#pragma once

#include <array>
#include <atomic>
#include <utility>

namespace pcnn::detail {

/// A cache of one value (>= 0) a device, for devices 0 to 63; 0 in it: not asked yet.
using PerDevice = std::array<std::atomic<int>, 64>;

/// `ask()` for `device`, asked once and kept in `cache` (devices past it are asked every time).
/// `ask` returns a value >= 0 that depends on the device alone. Threads that race both ask and
/// store the same value.
template <class Ask>
int asked_once(PerDevice& cache, int device, Ask&& ask) {
  const bool kept = device >= 0 && device < static_cast<int>(cache.size());
  int v = kept ? cache[device].load() : 0;
  if (v == 0) {
    v = std::forward<Ask>(ask)() + 1;
    if (kept) cache[device] = v;
  }
  return v - 1;
}

/// Which devices have a set of kernels loaded. CUDA loads a kernel at its first launch (lazy
/// loading: 0.35-0.5 ms of a 1M-point command's GPU total, H200,
/// bench/results/2026-11-29-round23.md), so kernels that a command's small warm-up does not
/// launch are loaded ahead (cudaFuncGetAttributes) at the device's start.
class KernelsLoaded {
 public:
  /// True the first time for `device` (0 to 63), and again after forget(device).
  bool first_load(int device) {
    return device >= 0 && device < kDevices && !loaded_[device].exchange(true);
  }
  /// After the device's context is reset.
  void forget(int device) {
    if (device >= 0 && device < kDevices) loaded_[device] = false;
  }

 private:
  static constexpr int kDevices = 64;
  std::array<std::atomic<bool>, kDevices> loaded_{};
};

}  // namespace pcnn::detail
