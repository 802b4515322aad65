// The input gate: before PCL sees a file, pcnn accepts only what it and PCL read identically —
// a whitelist of header grammar (header_check), ascii numbers (number_grammar) and data layouts,
// with point counts that the file's size can hold. Everything else is rejected, naming the file,
// the line or byte offset, and why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "header_check.hpp"

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

/// Where an ascii file's values go besides x, y and z: a pcl::PCLPointCloud2's records as PCL's
/// ascii reader fills them, `rows` of them. Column c (.pcd: the header's fields in order, `count`
/// values each; .ply: the vertex element's properties) of row r at data + r * point_step +
/// offset[c], stored as type[c]; nowhere where offset[c] < 0 (a .pcd's '_' fields, which PCL
/// skips). The records were sized from a first reading of the header: where the header read
/// again promises other rows or columns (the file changed), nothing is stored and `filled` stays
/// false.
/// `dense` as PCL sets is_dense by `rule`: its .pcd reader clears it for the literal "nan" (any
/// case, no sign; other non-finite literals it does not), its .ply reader for a value stored as
/// float32 or float64 that is not finite. `filled`: the file had as many columns as `offset`
/// holds, and every row was stored.
struct RowValues {
  enum class Dense { no_nan_literal, finite_floats };
  unsigned char* data = nullptr;
  std::uint64_t point_step = 0;
  std::uint64_t rows = 0;
  std::vector<std::int64_t> offset;
  std::vector<Scalar> type;
  Dense rule = Dense::no_nan_literal;
  bool dense = true;
  bool filled = false;
  /// Whether the records hold `r` rows of `columns` columns.
  bool fits(std::uint64_t r, std::uint64_t columns) const {
    return rows == r && offset.size() == columns && type.size() == columns;
  }
};

/// Checks a .pcd (`ply` false) or .ply file of `file_size` bytes, open as `fd` (every read goes
/// through it; `path` names it in messages): its header, every byte of its data, and that the
/// data holds exactly what the header promises (no more, no less).
/// With `xyz`, for the layouts pcnn reads itself, also gathers every point's x, y and z (as
/// stored, the same values PCL reads) and the field names as PCL gives them, and sets
/// xyz->gathered: ascii .pcd and .ply (each value parsed once, by the check's own grammar), binary
/// .pcd, and binary_little_endian .ply whose vertex element comes first, without range_grid or
/// obj_info grid. Compressed .pcd, big-endian .ply and the rest are left to PCL (gathered false).
/// @throws pcnn::input_error naming the file, where (line or byte offset) and why
/// With `rows`, every value of an ascii .pcd, or of an ascii .ply's vertices when `xyz` is
/// gathered, is stored there too (RowValues).
InputShape check_input(const std::string& path, int fd, bool ply, std::uint64_t file_size,
                       Coordinates* xyz = nullptr, RowValues* rows = nullptr);

/// Blank lines after an ascii file's last row that largest_accepted_size allows for.
inline constexpr std::uint64_t kBlankLinesAfterRows = std::uint64_t(1) << 20;

/// The most bytes a file whose (complete) header `fd` holds can have and pass check_input, with
/// no more than kBlankLinesAfterRows bytes of blank lines after an ascii file's last row;
/// ~0 where no bound fits 64 bits. Standard input is read no further (cloud_reader.cpp): a valid
/// header followed by an endless stream is refused instead of held to its end.
std::uint64_t largest_accepted_size(const std::string& path, int fd, bool ply);

/// Walks LZF-compressed data as PCL's lzfDecompress does, without writing the output: true when
/// it decodes to exactly `expected` bytes without reading or referring outside the data.
/// `why` receives the reason otherwise.
bool check_lzf(const unsigned char* in, std::uint64_t in_len, std::uint64_t expected,
               std::string* why);

}  // namespace pcnn::io_detail
