// Planning a search within the device memory available: how many result rows fit at once.
#pragma once

#include <cuda/cmath>

#include <algorithm>
#include <cstdint>
#include <string>

#include "device_buffer.cuh"
#include "search.cuh"

namespace pcnn::detail {

/// What a plan holds back for device memory it does not count (temporaries of sorts and scans,
/// the pool's granularity): 16 MB, or a quarter of a smaller budget (a cap such as
/// --max-device-memory 1M, whose tiles are tiny: their allocations are too).
inline std::int64_t working_reserve(std::int64_t available) {
  return std::min<std::int64_t>(16 << 20, std::max<std::int64_t>(available, 0) / 4);
}

/// Rows of `row_bytes` each that fit after `working` bytes of other device memory, out of
/// `available`: a multiple of kTreeQueryBlock (0 when none do).
inline std::int64_t rows_that_fit(std::int64_t row_bytes, std::int64_t working,
                                  std::int64_t available) {
  // Keep a tenth back for allocation granularity and what the estimate does not see.
  const std::int64_t usable = available - available / 10 - working;
  return usable > 0 ? usable / row_bytes / kTreeQueryBlock * kTreeQueryBlock : 0;
}

/// Rows per pass for `rows` output rows of `row_bytes` each, after `working` bytes of other
/// device memory, out of `available`: 0 when everything fits at once (and no pass size is
/// forced), else a multiple of kTreeQueryBlock. `forced` > 0 caps the pass size (rounded up to
/// that multiple). Throws pcnn::out_of_memory_error, naming `what`, when not even one block of
/// rows fits.
inline std::int64_t plan_rows_per_pass(std::int64_t rows, std::int64_t row_bytes,
                                       std::int64_t working, std::int64_t forced,
                                       const std::string& what, std::int64_t available) {
  std::int64_t per_pass = rows_that_fit(row_bytes, working, available);
  if (per_pass < kTreeQueryBlock && per_pass < rows)
    throw_out_of_memory(what, working + std::min<std::int64_t>(rows, kTreeQueryBlock) * row_bytes,
                        available);
  if (forced > 0)
    per_pass = std::min<std::int64_t>(per_pass, cuda::round_up(forced, kTreeQueryBlock));
  return per_pass >= rows ? 0 : per_pass;
}

}  // namespace pcnn::detail
