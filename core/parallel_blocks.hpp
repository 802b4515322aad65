// Work over [0, count) in blocks that threads take in order from a shared counter, the caller's
// thread among them: the CPU backend's searches, and the loader's passes over a cloud (reading,
// parsing, bounding, re-centering).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace pcnn::detail {

/// Calls body(begin, end) over [0, count) in blocks of `block` indices, handed out in order to up
/// to `threads` threads (this one included; fewer when no more can be started: slower, not
/// wrong). When bodies throw, the exception of the lowest block is rethrown once every thread has
/// stopped: a block below a failed one was handed out before it and runs to its end, and no block
/// above it is started, so that is the exception a loop over the blocks in order meets first.
template <class Body>
void parallel_blocks(int threads, std::int64_t count, std::int64_t block, Body&& body) {
  if (count <= 0) return;
  const std::int64_t blocks = (count + block - 1) / block;
  const int used = static_cast<int>(std::clamp<std::int64_t>(threads, 1, blocks));
  if (used == 1) {
    for (std::int64_t b = 0; b < blocks; ++b) body(b * block, std::min(count, (b + 1) * block));
    return;
  }
  std::atomic<std::int64_t> next{0}, failed{blocks};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto worker = [&] {
    for (;;) {
      const std::int64_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= blocks || b > failed.load(std::memory_order_relaxed)) return;
      try {
        body(b * block, std::min(count, (b + 1) * block));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (b < failed.load(std::memory_order_relaxed)) {
          failed.store(b, std::memory_order_relaxed);
          error = std::current_exception();
        }
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    pool.reserve(static_cast<std::size_t>(used - 1));
    for (int i = 1; i < used; ++i) pool.emplace_back(worker);
  } catch (const std::system_error&) {
  } catch (const std::bad_alloc&) {
  }
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace pcnn::detail
