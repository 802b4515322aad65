// The header grammars of the input gate: the .pcd and .ply headers pcnn accepts, which are the
// ones PCL reads the way pcnn means them. Anything else is rejected before PCL sees the file
// (PCL trusts headers: keywords out of order, a count that lies or a special PLY element can
// crash it or change the data without a word).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pcnn::io_detail {

/// The value types a field or property may have.
enum class Scalar : std::uint8_t { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 };
std::uint32_t scalar_size(Scalar t);
const char* scalar_name(Scalar t);  ///< "int8", "uint16", "float32", ...
bool is_integer(Scalar t);
bool is_signed(Scalar t);
/// The largest magnitude up to which a double holds every integer: 64-bit values beyond it are
/// refused in ascii files, and as coordinates in binary ones.
inline constexpr std::int64_t kExactInteger = std::int64_t(1) << 53;

/// How the text lines of a file end: one kind throughout a .ply; either, line by line, in a .pcd.
enum class Eol : std::uint8_t { lf, crlf, either };

/// Throws pcnn::input_error "cannot read cloud 'PATH': WHERE: WHY" (WHERE may be empty).
[[noreturn]] void reject(const std::string& path, const std::string& where, const std::string& why);
std::string line_at(std::uint64_t line);  ///< "line N"

struct PcdField {
  std::string name;
  Scalar type;
  std::uint32_t count;  ///< values per point
};

/// A .pcd header that passed the grammar: keywords in PCL's order, each once; FIELDS, SIZE,
/// TYPE and COUNT agreeing; x, y and z present once with one value each; WIDTH × HEIGHT = POINTS.
struct PcdHeader {
  enum class Data { ascii, binary, binary_compressed };
  std::vector<PcdField> fields;
  std::uint64_t width = 0, height = 1, points = 0;
  std::uint64_t point_size = 0;  ///< bytes per point
  Data data = Data::ascii;
  std::uint64_t data_start = 0;  ///< byte offset of the first byte after the DATA line
  std::uint64_t header_lines = 0;
  Eol eol = Eol::lf;
};

struct PlyProperty {
  std::string name;
  Scalar type;        ///< the value type (of a list's items)
  bool list = false;  ///< a list: a count of `count_type`, then that many values
  Scalar count_type = Scalar::u8;
};

struct PlyElement {
  std::string name;
  std::uint64_t count = 0;
  std::vector<PlyProperty> properties;
  std::uint64_t line = 0;  ///< the header line that declares it
  bool has_list() const;
  std::uint64_t fixed_size() const;  ///< bytes per item when there is no list
};

/// A .ply header that passed the grammar: magic, format (line 2), comments, obj_info, elements
/// and properties of known types, and only what PCL's reader handles as pcnn means it (see
/// header_check.cpp for the rules on colors, obj_info, camera and range_grid).
struct PlyHeader {
  enum class Format { ascii, binary_little_endian, binary_big_endian };
  Format format = Format::ascii;
  std::vector<PlyElement> elements;
  std::size_t vertex = 0;  ///< index of the vertex element
  bool grid = false;       ///< obj_info num_cols / num_rows given
  std::uint64_t num_cols = 0, num_rows = 0;
  std::uint64_t data_start = 0;
  std::uint64_t header_lines = 0;
  Eol eol = Eol::lf;
  bool float_coordinates = true;  ///< x, y and z are float32 or float64 (range_grid's NaN fill)
  std::vector<std::string> vertex_fields;  ///< the fields PCL makes of the vertex properties
};

/// Whether `name` is a word a header may hold as a field, property or element name: printable
/// ASCII other than the space, and well-formed UTF-8; the gate also takes at most 128 bytes.
bool name_characters_ok(std::string_view name);

/// The largest point count pcnn reads (results are indexed with int32).
constexpr std::uint64_t kMaxPoints = 2147483647;

/// Reads and checks the header of `fd` (the file named `path` in messages); throws
/// pcnn::input_error naming the file, the line and why.
PcdHeader read_pcd_header(const std::string& path, int fd);
PlyHeader read_ply_header(const std::string& path, int fd);

/// For a file still being written (standard input as it arrives): whether `fd` holds its whole
/// header yet (then checked, as read_pcd_header / read_ply_header check it). Throws as they do
/// where what is there already is wrong, so that a stream that is no cloud is refused at its
/// first lines instead of after its end.
bool header_complete(const std::string& path, int fd, bool ply);

/// Whether binary .pcd data that starts at `data_start` begins with a line PCL's header reader
/// would take for a header line (PCL keeps parsing header lines after DATA). Throws if so.
void check_pcd_binary_start(const std::string& path, int fd, std::uint64_t data_start);

}  // namespace pcnn::io_detail
