// Host-to-host copies of results out of the index's page-locked buffers, on several threads when
// they are large enough to repay starting them: one thread copies ~10 GB/s, so the 6.4 MB of a
// 100k-row, k = 8 frame took ~0.6 ms, as long as the whole search (bench/results/
// 2026-11-23-round6.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

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

/// Does the copies, on up to four threads (this one included): one per MiB, at least.
inline void parallel_copy(std::initializer_list<HostCopy> copies) {
  constexpr std::size_t kPerThread = std::size_t(1) << 20;
  std::size_t total = 0;
  for (const HostCopy& c : copies) total += c.bytes;
  const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t parts = std::min<std::size_t>({4, hw, total / kPerThread});
  if (parts <= 1) return copy_span(copies, 0, total);
  const std::size_t share = (total + parts - 1) / parts;
  std::vector<std::thread> others;
  try {
    others.reserve(parts - 1);  // no reallocation once threads run
  } catch (const std::bad_alloc&) {
    return copy_span(copies, 0, total);
  }
  for (std::size_t p = 1; p < parts; ++p) {
    const std::size_t a = p * share, b = std::min(total, a + share);
    try {
      others.emplace_back([copies, a, b] { copy_span(copies, a, b); });
    } catch (const std::system_error&) {  // no thread to be had: this one does that part
      copy_span(copies, a, b);
    }
  }
  copy_span(copies, 0, std::min(total, share));
  for (std::thread& t : others) t.join();
}

}  // namespace pcnn::detail
