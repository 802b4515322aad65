// The input gate: before PCL sees a file, pcnn accepts only what it and PCL read identically —
// a whitelist of header grammar (header_check), ascii numbers (number_grammar) and data layouts,
// with point counts that the file's size can hold. Everything else is rejected, naming the file,
// the line or byte offset, and why.
#pragma once

#include <cstdint>
#include <string>

namespace pcnn::io_detail {

/// The cloud a file that passed the gate holds, as PCL will read it.
struct InputShape {
  std::uint64_t points = 0;
  std::uint64_t width = 0;   ///< columns (organized) or the point count
  std::uint64_t height = 1;  ///< rows (> 1: organized)
  /// A binary .pcd of points: the offset of its records, which hold exactly points x
  /// `point_size` bytes (0: another layout).
  std::uint64_t binary_pcd_records = 0;
  std::uint64_t point_size = 0;
};

struct Coordinates;

/// Checks a .pcd (`ply` false) or .ply file of `file_size` bytes, open as `fd` (every read goes
/// through it; `path` names it in messages): its header, every byte of its data, and that the
/// data holds exactly what the header promises (no more, no less).
/// With `xyz`, for the layouts pcnn reads itself, also gathers every point's x, y and z (as
/// stored, the same values PCL reads) and the field names as PCL gives them, and sets
/// xyz->gathered: ascii .pcd and .ply (each value parsed once, by the check's own grammar), binary
/// .pcd, and binary_little_endian .ply whose vertex element comes first, without range_grid or
/// obj_info grid. Compressed .pcd, big-endian .ply and the rest are left to PCL (gathered false).
/// @throws pcnn::input_error naming the file, where (line or byte offset) and why
InputShape check_input(const std::string& path, int fd, bool ply, std::uint64_t file_size,
                       Coordinates* xyz = nullptr);

/// Walks LZF-compressed data as PCL's lzfDecompress does, without writing the output: true when
/// it decodes to exactly `expected` bytes without reading or referring outside the data.
/// `why` receives the reason otherwise.
bool check_lzf(const unsigned char* in, std::uint64_t in_len, std::uint64_t expected,
               std::string* why);

}  // namespace pcnn::io_detail
