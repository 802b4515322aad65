// Values asked of a CUDA device once a process (attributes, occupancies): kept per device.
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

}  // namespace pcnn::detail
