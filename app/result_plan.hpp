// Planning where a search's results go before any is computed: held in host memory, or streamed
// to the outputs range by range; refused at once when they fit nowhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pcnn/index.hpp"

namespace pcnn::app {

/// Host memory for results: pcnn::available_host_memory(), or a very large figure where the
/// system says nothing.
std::int64_t host_memory_available();

/// Throws pcnn::out_of_memory_error: "out of host memory: WHAT need X, Y of host memory
/// available" and, when given, why they must be held at once.
[[noreturn]] void fail_host_memory(const std::string& what, std::int64_t needed,
                                   std::int64_t available, const std::string& why = "");

/// Bytes of results a streamed range may hold: a quarter of the host memory available, between
/// 64 MiB (or half of what is available, when that is less) and 1 GiB.
std::int64_t range_budget(std::int64_t host_available);

/// Ends of consecutive row ranges of CSR results (`offsets`: rows + 1): `chunk_rows` rows each
/// when > 0, else as many rows as keep a range's pairs (8 bytes each) within `budget` bytes (at
/// least one row). A row alone over `host_available` fails (fail_host_memory).
std::vector<std::int64_t> radius_ranges(const std::vector<std::int64_t>& offsets,
                                        std::int64_t chunk_rows, std::int64_t budget,
                                        std::int64_t host_available);

/// Adds a range's timings to the whole search's (parts and counters; passes counted apart).
void accumulate(SearchTimings& into, const SearchTimings& part);

}  // namespace pcnn::app
