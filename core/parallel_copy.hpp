// Host-to-host copies of results out of the index's page-locked buffers, on several threads when
// they are large enough to repay starting them: one thread copies ~10 GB/s, so the 6.4 MB of a
// 100k-row, k = 8 frame took ~0.6 ms, as long as the whole search (bench/results/
// 2026-11-23-round6.md).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <system_error>
#include <thread>

#include "cpus.hpp"

namespace pcnn::detail {

struct HostCopy {
  void* dst;
  const void* src;
  std::size_t bytes;
};

/// Bytes [begin, end) of the copies laid end to end.
inline void copy_span(std::initializer_list<HostCopy> copies, std::size_t begin, std::size_t end) {
  std::size_t at = 0;
  for (const HostCopy& c : copies) {
    const std::size_t a = std::max(begin, at), b = std::min(end, at + c.bytes);
    if (a < b)
      std::memcpy(static_cast<char*>(c.dst) + (a - at), static_cast<const char*>(c.src) + (a - at),
                  b - a);
    at += c.bytes;
  }
}

/// Does the copies, on up to `max_threads` threads (this one included, at most 8): one per
/// MiB, at least.
inline void parallel_copy(std::initializer_list<HostCopy> copies, int max_threads = 4) {
  constexpr std::size_t kPerThread = std::size_t(1) << 20;
  std::size_t total = 0;
  for (const HostCopy& c : copies) total += c.bytes;
  const std::size_t parts =
      std::min<std::size_t>({static_cast<std::size_t>(std::clamp(max_threads, 1, 8)),
                             static_cast<std::size_t>(usable_cpus()), total / kPerThread});
  if (parts <= 1) return copy_span(copies, 0, total);
  const std::size_t share = (total + parts - 1) / parts;
  std::array<std::thread, 7> others;  // parts 1..7 (no allocation in a frame's path)
  for (std::size_t p = 1; p < parts; ++p) {
    const std::size_t a = p * share, b = std::min(total, a + share);
    try {
      others[p - 1] = std::thread([copies, a, b] { copy_span(copies, a, b); });
    } catch (const std::system_error&) {  // no thread to be had: this one does that part
      copy_span(copies, a, b);
    }
  }
  copy_span(copies, 0, std::min(total, share));
  for (std::thread& t : others)
    if (t.joinable()) t.join();
}

}  // namespace pcnn::detail
