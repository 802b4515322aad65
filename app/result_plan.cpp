#include "result_plan.hpp"

#include <algorithm>

#include "pcnn/error.hpp"
#include "pcnn/memory.hpp"

namespace pcnn::app {

std::int64_t host_memory_available() {
  const std::int64_t a = available_host_memory();
  return a >= 0 ? a : INT64_MAX / 4;
}

void fail_host_memory(const std::string& what, std::int64_t needed, std::int64_t available,
                      const std::string& why) {
  throw out_of_memory_error("out of host memory: " + what + " need " + format_bytes(needed) + ", " +
                                format_bytes(available) + " of host memory available" +
                                (why.empty() ? "" : " (" + why + ")"),
                            needed, available);
}

std::int64_t range_budget(std::int64_t host_available) {
  // A quarter of what is left, up to 1 GB; at least 64 MB where that leaves half of it free, and
  // never more than half, so that a tight limit (ulimit -v, a cgroup) gives smaller ranges
  // rather than a range that cannot be held.
  const std::int64_t floor = std::min(std::int64_t(64) << 20, host_available / 2);
  return std::clamp<std::int64_t>(host_available / 4, std::max<std::int64_t>(floor, 1),
                                  std::int64_t(1) << 30);
}

std::vector<std::int64_t> radius_ranges(const std::vector<std::int64_t>& offsets,
                                        std::int64_t chunk_rows, std::int64_t budget,
                                        std::int64_t host_available) {
  const std::int64_t rows = static_cast<std::int64_t>(offsets.size()) - 1;
  std::vector<std::int64_t> ends;
  std::int64_t a = 0;
  while (a < rows) {
    std::int64_t b = a + 1;
    if (chunk_rows > 0) {
      b = std::min(rows, a + chunk_rows);
    } else {
      // The last row whose end keeps the range within the budget (at least row a).
      const std::int64_t limit = offsets[a] + std::max<std::int64_t>(budget / 8, 1);
      b = std::upper_bound(offsets.begin() + a + 1, offsets.end(), limit) - offsets.begin() - 1;
      b = std::max(b, a + 1);
    }
    const std::int64_t bytes = (offsets[b] - offsets[a]) * 8;
    if (bytes > host_available)
      fail_host_memory("the " + std::to_string(offsets[b] - offsets[a]) + " pairs of rows " +
                           std::to_string(a) + " to " + std::to_string(b - 1),
                       bytes, host_available, "a range is held at once before it is written");
    ends.push_back(b);
    a = b;
  }
  return ends;
}

void accumulate(SearchTimings& into, const SearchTimings& part) {
  into.backend = part.backend;
  into.staging = part.staging;
  into.upload_ms += part.upload_ms;
  into.build_ms += part.build_ms;
  into.search_ms += part.search_ms;
  into.download_ms += part.download_ms;
  into.upload_bytes += part.upload_bytes;
  into.download_bytes += part.download_bytes;
  into.distance_evaluations += part.distance_evaluations;
  into.refined_rows += part.refined_rows;
  into.total_ms += part.total_ms;
}

}  // namespace pcnn::app
