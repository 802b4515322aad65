// Fresh host memory that is about to be written whole (a loaded cloud's coordinates): mapped in
// with one call instead of one page fault per 4 KiB page. On a virtual machine each fault is a
// trap to the hypervisor; measured on the 2-vCPU development VM, first-touching 120 MB took
// 0.6-0.9 s in 4 KiB faults, 20-60 ms as transparent huge pages mapped by MADV_POPULATE_WRITE
// (bench/results/2026-11-22-loading.md). Advice only: where the kernel declines (no THP, a
// kernel before 5.14), the pages fault in as before and nothing else changes.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "parallel_blocks.hpp"

namespace pcnn::detail {

// Asks for transparent huge pages over the whole 2 MiB pages of [data, data + bytes).
inline void advise_huge_pages(void* data, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t huge = std::uintptr_t(2) << 20;
  const std::uintptr_t huge_begin = (begin + huge - 1) & ~(huge - 1);
  const std::uintptr_t huge_end = (begin + bytes) & ~(huge - 1);
  if (huge_end > huge_begin)
    ::madvise(reinterpret_cast<void*>(huge_begin), huge_end - huge_begin, MADV_HUGEPAGE);
}

// Maps in the whole 4 KiB pages of [data, data + bytes), writable, with one call.
inline void populate_pages(void* data, std::size_t bytes) {
#ifndef MADV_POPULATE_WRITE
#define PCNN_MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL
#else
#define PCNN_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#endif
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t page = 4096;
  const std::uintptr_t page_begin = (begin + page - 1) & ~(page - 1);
  const std::uintptr_t page_end = (begin + bytes) & ~(page - 1);
  if (page_end > page_begin)
    ::madvise(reinterpret_cast<void*>(page_begin), page_end - page_begin, PCNN_MADV_POPULATE_WRITE);
#undef PCNN_MADV_POPULATE_WRITE
}

constexpr std::size_t kFreshPagesMin = std::size_t(4) << 20;  // below this, faults cost little

inline void prepare_fresh_pages(void* data, std::size_t bytes) {
  if (!data || bytes < kFreshPagesMin) return;
  advise_huge_pages(data, bytes);
  populate_pages(data, bytes);
}

/// prepare_fresh_pages on up to `threads` threads, 8 MiB a call: the kernel zeroes the pages it
/// maps in, which for a 120 MB cloud on the H200 host's virtual machine took most of the 25 ms
/// its madvise calls took on one thread (strace, bench/results/2026-12-01-round41.md).
inline void prepare_fresh_pages_parallel(void* data, std::size_t bytes, int threads) {
  if (!data || bytes < kFreshPagesMin) return;
  advise_huge_pages(data, bytes);
  constexpr std::int64_t kSlice = std::int64_t(8) << 20;  // a multiple of 2 MiB
  auto* base = static_cast<char*>(data);
  parallel_blocks(threads, static_cast<std::int64_t>(bytes), kSlice,
                  [&](std::int64_t b, std::int64_t e) {
                    populate_pages(base + b, static_cast<std::size_t>(e - b));
                  });
}

/// `v` resized to `n` elements (value-initialized), its fresh pages mapped in first.
template <class T>
void resize_fresh(std::vector<T>& v, std::size_t n) {
  v.reserve(n);
  prepare_fresh_pages(v.data(), n * sizeof(T));
  v.resize(n);
}

/// resize_fresh, the pages mapped in on up to `threads` threads.
template <class T>
void resize_fresh_parallel(std::vector<T>& v, std::size_t n, int threads) {
  v.reserve(n);
  prepare_fresh_pages_parallel(v.data(), n * sizeof(T), threads);
  v.resize(n);
}

/// `v` resized to hold `n` elements (value-initialized) from a 128-byte line of host memory on,
/// its fresh pages mapped in first: returns where the elements begin (v.data() + the result;
/// the fewer than 128 bytes before them are unused). A large std::vector's storage begins 16
/// bytes past a page (malloc's header), which rows that the GPU writes a line at a time would
/// straddle (gpu/detail/row_forward.cuh).
template <class T>
std::size_t resize_fresh_on_line(std::vector<T>& v, std::size_t n) {
  constexpr std::size_t kLine = 128;
  static_assert(kLine % sizeof(T) == 0, "elements that tile a line");
  resize_fresh(v, n + kLine / sizeof(T));
  const auto at = reinterpret_cast<std::uintptr_t>(v.data()) % kLine;
  return at % sizeof(T) ? 0 : (kLine - at) % kLine / sizeof(T);
}

}  // namespace pcnn::detail
