// Checking .pcd and .ply headers against the file before PCL parses it: PCL trusts headers,
// and a header that lies (counts, sizes) can crash it or make it read past the data.
#pragma once

#include <cstdint>
#include <string>

namespace pcnn::io_detail {

/// What a header promises.
struct HeaderInfo {
  std::uint64_t points = 0;
};

/// Throws pcnn::input_error naming `path` when the header is malformed or promises more data
/// than the file holds. `file_size` is the file's size in bytes.
HeaderInfo check_pcd_header(const std::string& path, std::uint64_t file_size);
HeaderInfo check_ply_header(const std::string& path, std::uint64_t file_size);

}  // namespace pcnn::io_detail
