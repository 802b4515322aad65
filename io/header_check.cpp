#include "header_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "../core/utf8.hpp"
#include "byte_source.hpp"
#include "number_grammar.hpp"
#include "pcnn/io.hpp"

namespace pcnn::io_detail {

std::uint32_t scalar_size(Scalar t) {
  switch (t) {
    case Scalar::i8:
    case Scalar::u8:
      return 1;
    case Scalar::i16:
    case Scalar::u16:
      return 2;
    case Scalar::i32:
    case Scalar::u32:
    case Scalar::f32:
      return 4;
    default:
      return 8;
  }
}

const char* scalar_name(Scalar t) {
  static const char* names[] = {"int8",   "uint8", "int16",  "uint16",  "int32",
                                "uint32", "int64", "uint64", "float32", "float64"};
  return names[static_cast<int>(t)];
}

bool is_integer(Scalar t) { return t != Scalar::f32 && t != Scalar::f64; }
bool is_signed(Scalar t) {
  return t == Scalar::i8 || t == Scalar::i16 || t == Scalar::i32 || t == Scalar::i64;
}

void reject(const std::string& path, const std::string& where, const std::string& why) {
  throw input_error(
      "cannot read cloud '" + path + "': " + (where.empty() ? "" : where + ": ") + why, path);
}

std::string line_at(std::uint64_t line) { return "line " + std::to_string(line); }

bool PlyElement::has_list() const {
  return std::any_of(properties.begin(), properties.end(),
                     [](const PlyProperty& p) { return p.list; });
}

std::uint64_t PlyElement::fixed_size() const {
  std::uint64_t s = 0;
  for (const auto& p : properties) s += scalar_size(p.type);
  return s;
}

namespace {

constexpr std::uint64_t kMaxHeaderLines = 4096;
constexpr std::size_t kMaxLineLength = 1 << 16;

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 60)) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + (s.size() > 60 ? "...'" : "'");
}

// Header lines hold printable ASCII, spaces, tabs and well-formed UTF-8 (names in other
// languages); free text (comments) any byte from 0x20 up. Other control characters (\v, \f, a
// stray \r, NUL) are where PCL's tokenizers and ours differ.
void check_characters(const std::string& path, std::uint64_t n, std::string_view line,
                      bool free_text) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    std::size_t utf8 = 0;
    if (c >= 0x80 && !free_text && (utf8 = detail::utf8_length(line, i)) > 0) {
      i += utf8 - 1;
      continue;
    }
    const bool ok = (c >= 0x20 && c != 0x7f && (c < 0x80 || free_text)) || c == '\t';
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      reject(path, line_at(n),
             std::string("a ") + (c == '\r' ? "carriage return" : "character") + " (" + hex +
                 ") that the header may not hold");
    }
  }
}

// A header line without the blanks before its first word (PCL's readers skip them).
std::string_view trim_front(std::string_view line) {
  const std::size_t i = line.find_first_not_of(" \t");
  return i == std::string_view::npos ? std::string_view() : line.substr(i);
}

// A field, property or element name: a word of up to 128 bytes, printable ASCII or well-formed
// UTF-8, as PCL's readers and writers and pcnn's pass it through unchanged: CloudCompare names
// its scalar fields 'scalar_Roughness_(0.1)', 'scalar_Scalar_field_#1'.
bool valid_name(std::string_view s) { return s.size() <= 128 && name_characters_ok(s); }

}  // namespace

bool name_characters_ok(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c > 0x20 && c < 0x7f) continue;
    const std::size_t n = c >= 0x80 ? detail::utf8_length(name, i) : 0;
    if (n == 0) return false;
    i += n - 1;
  }
  return true;
}

namespace {

// Thrown instead of rejecting a header that ends where the bytes written so far end
// (header_complete).
struct HeaderIncomplete {};

// Set while header_complete reads a file still being written.
thread_local bool reading_partial_file = false;

// Reads header lines one at a time, checking the line ending against the first line's (.ply:
// PCL's reader takes the magic line's for every line; .pcd: either, as PCL's tokenizer drops a
// CR, and eol() is Eol::either).
class HeaderLines {
 public:
  HeaderLines(const std::string& path, int fd, const char* format)
      : path_(path), format_(format), src_(path, fd, 0), either_(std::string(format) == "PCD") {}

  // The next line; throws at the end of the file, on a long line, a line ending that differs
  // from the first line's (.ply), or a line with no ending.
  std::string_view next() {
    ++n_;
    if (n_ > kMaxHeaderLines)
      reject(path_, "",
             std::string("the ") + format_ + " header has more than " +
                 std::to_string(kMaxHeaderLines) + " lines");
    bool too_long = false;
    std::string_view ending;
    if (!src_.line(line_, ending, too_long, kMaxLineLength)) {
      if (reading_partial_file) throw HeaderIncomplete{};
      reject(path_, "",
             std::string("the ") + format_ + " header has no end (" +
                 (std::string(format_) == "PCD" ? "DATA" : "end_header") + " line missing)");
    }
    if (too_long)
      reject(path_, line_at(n_), "longer than " + std::to_string(kMaxLineLength) + " bytes");
    if (ending.empty()) {
      if (reading_partial_file) throw HeaderIncomplete{};  // the rest of the line may follow
      reject(path_, line_at(n_),
             std::string("the file ends inside the ") + format_ + " header (no line ending)");
    }
    const Eol eol = ending == "\r\n" ? Eol::crlf : Eol::lf;
    last_eol_ = eol;
    if (n_ == 1) eol_ = either_ ? Eol::either : eol;
    if (eol_ != Eol::either && eol != eol_)
      reject(path_, line_at(n_),
             std::string("ends with ") + (eol == Eol::crlf ? "CR LF" : "LF") + " but line 1 with " +
                 (eol_ == Eol::crlf ? "CR LF" : "LF") + " (one kind of line ending per file)");
    return line_;
  }
  std::uint64_t number() const { return n_; }
  std::uint64_t offset() const { return src_.offset(); }
  Eol eol() const { return eol_; }
  Eol last_eol() const { return last_eol_; }  ///< how the line next() gave ends

 private:
  const std::string& path_;
  const char* format_;
  ByteSource src_;
  bool either_;
  std::string line_;
  std::uint64_t n_ = 0;
  Eol eol_ = Eol::lf, last_eol_ = Eol::lf;
};

// ---- PCD ----

// PCL's order; each keyword at most once, and never one that comes earlier in this list after a
// later one (SIZE or COUNT after POINTS makes PCL size its buffer with the wrong point size).
const char* const kPcdOrder[] = {"VERSION", "FIELDS", "SIZE",      "TYPE",   "COUNT",
                                 "WIDTH",   "HEIGHT", "VIEWPOINT", "POINTS", "DATA"};
enum PcdKey {
  kVersion,
  kFields,
  kSize,
  kType,
  kCount,
  kWidth,
  kHeight,
  kViewpoint,
  kPoints,
  kData
};
constexpr int kPcdKeys = 10;

std::string pcd_order() {
  std::string s;
  for (int i = 0; i < kPcdKeys; ++i) s += std::string(i ? ", " : "") + kPcdOrder[i];
  return s;
}

Scalar pcd_type(char type, std::uint64_t size, bool& ok) {
  ok = true;
  if (type == 'F' && size == 4) return Scalar::f32;
  if (type == 'F' && size == 8) return Scalar::f64;
  if (type == 'I' || type == 'U') {
    const bool u = type == 'U';
    switch (size) {
      case 1:
        return u ? Scalar::u8 : Scalar::i8;
      case 2:
        return u ? Scalar::u16 : Scalar::i16;
      case 4:
        return u ? Scalar::u32 : Scalar::i32;
      case 8:
        return u ? Scalar::u64 : Scalar::i64;
    }
  }
  ok = false;
  return Scalar::u8;
}

}  // namespace

PcdHeader read_pcd_header(const std::string& path, int fd) {
  HeaderLines lines(path, fd, "PCD");
  std::vector<std::string> values[kPcdKeys];
  std::uint64_t at[kPcdKeys] = {};  // the line of each keyword, 0: absent
  int last = -1;
  for (;;) {
    const std::string_view whole = lines.next();
    const std::uint64_t n = lines.number();
    // PCL skips an empty line, but takes a lone CR (an empty CR LF line) or blanks for a line of
    // no keyword, and can then crash or read no point.
    if (whole.empty() && lines.last_eol() == Eol::lf) continue;
    const std::string_view line = trim_front(whole);
    if (line.empty())
      reject(path, line_at(n),
             whole.empty() ? "an empty line ending in CR LF in the PCD header"
                           : "a line of only white space in the PCD header");
    const bool comment = line[0] == '#';
    check_characters(path, n, line, comment);
    if (comment) continue;
    const auto w = words(line);
    int key = -1;
    for (int k = 0; k < kPcdKeys; ++k)
      if (w[0] == kPcdOrder[k]) key = k;
    if (w[0] == "COLUMNS") key = kFields;  // PCL's older name for FIELDS
    if (key < 0)
      reject(path, line_at(n), quote(w[0]) + " is not a PCD header keyword (" + pcd_order() + ")");
    if (at[key])
      reject(path, line_at(n),
             "a second " + std::string(kPcdOrder[key]) + " line (line " + std::to_string(at[key]) +
                 " was the first)");
    if (key < last)
      reject(path, line_at(n),
             std::string(kPcdOrder[key]) + " after " + kPcdOrder[last] +
                 ": pcnn reads the header keywords in the order PCL writes them (" + pcd_order() +
                 "), each once (in other orders PCL misreads some)");
    at[key] = n;
    last = key;
    for (std::size_t i = 1; i < w.size(); ++i) values[key].emplace_back(w[i]);
    if (key == kData) break;
  }

  PcdHeader h;
  h.data_start = lines.offset();
  h.header_lines = lines.number();
  h.eol = lines.eol();
  for (int k : {kFields, kSize, kType, kWidth, kPoints})
    if (!at[k]) reject(path, "", std::string("the PCD header has no ") + kPcdOrder[k] + " line");

  auto one_word = [&](int k) -> const std::string& {
    if (values[k].size() != 1)
      reject(
          path, line_at(at[k]),
          std::string(kPcdOrder[k]) + " takes one value, got " + std::to_string(values[k].size()));
    return values[k][0];
  };
  if (at[kVersion]) {
    const std::string& v = one_word(kVersion);
    if (v.find_first_not_of("0123456789.") != std::string::npos ||
        v.find_first_of("0123456789") == std::string::npos)
      reject(path, line_at(at[kVersion]), "VERSION " + quote(v) + " is not a version number");
  }

  const auto& names = values[kFields];
  const std::size_t nf = names.size();
  if (nf == 0) reject(path, line_at(at[kFields]), "FIELDS lists no fields");
  if (nf > 1024) reject(path, line_at(at[kFields]), "more than 1024 fields");
  for (int k : {kSize, kType, kCount}) {
    if (!at[k] || values[k].size() == nf) continue;
    reject(path, line_at(at[k]),
           std::string(kPcdOrder[k]) + " has " + std::to_string(values[k].size()) +
               " entries for the " + std::to_string(nf) + " FIELDS");
  }
  bool has_padding = false;
  for (std::size_t i = 0; i < nf; ++i) {
    PcdField f;
    f.name = names[i];
    if (!valid_name(f.name))
      reject(path, line_at(at[kFields]), "field name " + quote(f.name) + " (at most 128 bytes)");
    if (f.name != "_" && std::find(names.begin(), names.begin() + i, f.name) != names.begin() + i)
      reject(path, line_at(at[kFields]), "field '" + f.name + "' appears twice");
    has_padding = has_padding || f.name == "_";
    std::uint64_t size = 0;
    const std::string& type = values[kType][i];
    bool ok = parse_count(values[kSize][i], 8, &size) && type.size() == 1;
    if (ok) f.type = pcd_type(type[0], size, ok);
    if (!ok)
      reject(path, line_at(at[kType]),
             "field '" + f.name + "' has unsupported TYPE " + quote(type) + " with SIZE " +
                 quote(values[kSize][i]) + " (F 4, F 8, I or U 1, 2, 4, 8)");
    std::uint64_t count = 1;
    if (at[kCount] && (!parse_count(values[kCount][i], 1 << 20, &count) || count == 0))
      reject(path, line_at(at[kCount]),
             "field '" + f.name + "' has COUNT " + quote(values[kCount][i]) + " (1 to 2^20)");
    f.count = static_cast<std::uint32_t>(count);
    h.point_size += count * scalar_size(f.type);
    h.fields.push_back(f);
  }
  if (h.point_size > (1u << 24))
    reject(path, line_at(at[kCount] ? at[kCount] : at[kSize]),
           "a point record of " + std::to_string(h.point_size) + " bytes (at most 16 MiB)");
  for (const char* axis : {"x", "y", "z"}) {
    const auto it = std::find_if(h.fields.begin(), h.fields.end(),
                                 [&](const PcdField& f) { return f.name == axis; });
    if (it == h.fields.end())
      reject(path, line_at(at[kFields]),
             std::string("no '") + axis + "' field (x, y and z are required)");
    if (it->count != 1)
      reject(path, line_at(at[kCount]),
             std::string("field '") + axis + "' has COUNT " + std::to_string(it->count) +
                 ", expected 1");
  }

  const std::uint64_t u32max = 0xffffffffull;
  if (!parse_count(one_word(kWidth), u32max, &h.width))
    reject(path, line_at(at[kWidth]), "WIDTH " + quote(values[kWidth][0]) + " is not a count");
  if (at[kHeight] && !parse_count(one_word(kHeight), u32max, &h.height))
    reject(path, line_at(at[kHeight]), "HEIGHT " + quote(values[kHeight][0]) + " is not a count");
  if (!parse_count(one_word(kPoints), std::numeric_limits<std::uint64_t>::max() / 2, &h.points))
    reject(path, line_at(at[kPoints]), "POINTS " + quote(values[kPoints][0]) + " is not a count");
  if (h.points > kMaxPoints)
    reject(path, line_at(at[kPoints]),
           "POINTS " + std::to_string(h.points) + ": at most 2^31-1 points are supported");
  if (h.width * h.height != h.points)  // both < 2^32: the product cannot wrap
    reject(path, line_at(at[kPoints]),
           "WIDTH x HEIGHT (" + std::to_string(h.width) + " x " + std::to_string(h.height) +
               ") does not equal POINTS (" + std::to_string(h.points) + ")");
  if (at[kViewpoint]) {
    if (values[kViewpoint].size() != 7)
      reject(path, line_at(at[kViewpoint]),
             "VIEWPOINT takes 7 numbers (tx ty tz qw qx qy qz), got " +
                 std::to_string(values[kViewpoint].size()));
    for (const auto& v : values[kViewpoint]) {
      Number n;
      std::string why = check_number(v, Scalar::f32, Dialect::pcd, &n);
      // PCL reads VIEWPOINT with >> float, which stops at nan and inf and leaves garbage.
      if (why.empty() && !std::isfinite(n.f)) why = "not finite (PCL would read garbage)";
      if (!why.empty())
        reject(path, line_at(at[kViewpoint]), "VIEWPOINT value " + quote(v) + " is " + why);
    }
  }
  const std::string& data = one_word(kData);
  if (data == "ascii")
    h.data = PcdHeader::Data::ascii;
  else if (data == "binary")
    h.data = PcdHeader::Data::binary;
  else if (data == "binary_compressed")
    h.data = PcdHeader::Data::binary_compressed;
  else
    reject(path, line_at(at[kData]),
           "unknown PCD DATA kind " + quote(data) + " (ascii, binary or binary_compressed)");
  // PCL unpacks compressed data without the padding fields but with their offsets: every field
  // after one lands in the wrong place.
  if (has_padding && h.data == PcdHeader::Data::binary_compressed)
    reject(path, line_at(at[kFields]),
           "a '_' (padding) field in binary_compressed data, which PCL unpacks into the wrong "
           "places");
  return h;
}

// PCL's PCD reader keeps reading header lines after DATA: it skips empty lines and comments and
// parses any line whose first word starts with a header keyword, until some other line. Binary
// data that happens to begin like "COLUMNS..." is then parsed as a header (found by fuzzing:
// PCL went on to allocate a string of terabytes). Reject what PCL would misread.
void check_pcd_binary_start(const std::string& path, int fd, std::uint64_t data_start) {
  ByteSource src(path, fd, data_start);
  for (;;) {
    std::string head;  // the line's first word, after leading white space (as >> reads it)
    char ch;
    bool word_done = false, any = false;
    while (src.read(&ch, 1) == 1 && ch != '\n') {
      any = true;
      const bool space = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
      if (space) {
        if (!head.empty()) word_done = true;
      } else if (!word_done && head.size() < 16) {
        head.push_back(ch);
      }
    }
    if (!any && src.at_end()) return;  // end of file
    if (head.empty()) continue;        // an empty line: PCL skips it
    if (head[0] == '#') continue;      // a comment: PCL skips it
    for (const char* k : kPcdOrder)
      if (head.compare(0, std::strlen(k), k) == 0)
        reject(path, "byte " + std::to_string(data_start),
               "the binary data begins like a header line (" + quote(head) +
                   "...), which PCL would read as one");
    if (head.compare(0, 7, "COLUMNS") == 0)
      reject(path, "byte " + std::to_string(data_start),
             "the binary data begins like a header line (" + quote(head) +
                 "...), which PCL would read as one");
    return;
  }
}

// ---- PLY ----

namespace {

bool ply_type(std::string_view s, Scalar& t) {
  static const struct {
    const char* a;
    const char* b;
    Scalar t;
  } types[] = {{"char", "int8", Scalar::i8},      {"uchar", "uint8", Scalar::u8},
               {"short", "int16", Scalar::i16},   {"ushort", "uint16", Scalar::u16},
               {"int", "int32", Scalar::i32},     {"uint", "uint32", Scalar::u32},
               {"float", "float32", Scalar::f32}, {"double", "float64", Scalar::f64}};
  for (const auto& e : types)
    if (s == e.a || s == e.b) {
      t = e.t;
      return true;
    }
  return false;
}

const char* ply_color_names[] = {"red",         "green",         "blue",
                                 "diffuse_red", "diffuse_green", "diffuse_blue"};

bool is_color(const PlyProperty& p) {
  if (p.type != Scalar::u8) return false;
  for (const char* c : ply_color_names)
    if (p.name == c) return true;
  return false;
}

// The field names PCL's PLY reader makes of the vertex properties: red, green, blue (uchar)
// become one packed "rgb" float (with alpha: "rgba"), nx/ny/nz become normal_x/y/z. PCL writes
// the colors with offsets kept between callbacks, so they must be three consecutive properties
// in that order (otherwise later properties are written over the wrong bytes).
std::vector<std::string> ply_vertex_fields(const std::string& path, const PlyElement& v) {
  std::vector<std::string> out;
  const auto& p = v.properties;
  // PCL gives alpha to the first field named "rgb" it finds, whichever properties made it, and
  // packs every color group at its own red: with two groups, or a property named rgb or rgba
  // beside one, its fields are not those of the properties (a uchar rgb became a 4-byte rgba over
  // the next field).
  const auto colors = std::count_if(p.begin(), p.end(), [](const PlyProperty& q) {
    return q.type == Scalar::u8 && (q.name == "red" || q.name == "diffuse_red");
  });
  if (colors > 1)
    reject(path, line_at(v.line),
           "two vertex color groups (red and diffuse_red): PCL packs both into fields named rgb");
  for (const auto& q : p)
    if (colors > 0 && (q.name == "rgb" || q.name == "rgba"))
      reject(path, line_at(v.line),
             "a vertex property '" + q.name +
                 "' beside uchar colors, which PCL packs into a field of that name");
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i].list)
      reject(path, line_at(v.line),
             "the vertex element has a list property ('" + p[i].name + "'), not supported");
    if (is_color(p[i])) {
      const std::string prefix = p[i].name.compare(0, 8, "diffuse_") == 0 ? "diffuse_" : "";
      const bool group = p[i].name == prefix + "red" && i + 2 < p.size() &&
                         p[i + 1].type == Scalar::u8 && p[i + 1].name == prefix + "green" &&
                         p[i + 2].type == Scalar::u8 && p[i + 2].name == prefix + "blue";
      if (!group)
        reject(path, line_at(v.line),
               "vertex colors (uchar) must be three consecutive properties " + prefix + "red, " +
                   prefix + "green, " + prefix + "blue (PCL packs them into one field)");
      i += 2;
      if (i + 1 < p.size() && p[i + 1].type == Scalar::u8 && p[i + 1].name == "alpha") {
        ++i;
        out.push_back("rgba");
      } else {
        out.push_back("rgb");
      }
      continue;
    }
    if (p[i].type == Scalar::u8 && p[i].name == "alpha")
      reject(path, line_at(v.line),
             "a vertex 'alpha' (uchar) that does not follow red, green, blue (PCL adds it to "
             "their packed field)");
    if (p[i].name == "nx" || p[i].name == "ny" || p[i].name == "nz")
      out.push_back(std::string("normal_") + p[i].name[1]);
    else
      out.push_back(p[i].name);
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (std::find(out.begin(), out.begin() + i, out[i]) != out.begin() + i)
      reject(path, line_at(v.line),
             "the vertex properties give two fields named '" + out[i] + "' (as PCL names them)");
  return out;
}

}  // namespace

PlyHeader read_ply_header(const std::string& path, int fd) {
  HeaderLines lines(path, fd, "PLY");
  PlyHeader h;
  if (lines.next() != "ply") reject(path, "", "not a PLY file (no 'ply' line first)");
  {
    const std::string_view line = trim_front(lines.next());
    check_characters(path, 2, line, false);
    const auto w = words(line);
    if (w.size() != 3 || w[0] != "format" || w[2] != "1.0")
      reject(path, line_at(2),
             "expected 'format ascii|binary_little_endian|binary_big_endian 1.0'");
    if (w[1] == "ascii")
      h.format = PlyHeader::Format::ascii;
    else if (w[1] == "binary_little_endian")
      h.format = PlyHeader::Format::binary_little_endian;
    else if (w[1] == "binary_big_endian")
      h.format = PlyHeader::Format::binary_big_endian;
    else
      reject(path, line_at(2), "unknown PLY format " + quote(w[1]));
  }
  std::uint64_t cols_line = 0, rows_line = 0;
  for (;;) {
    const std::string_view whole = lines.next();
    const std::string_view line = trim_front(whole);
    const std::uint64_t n = lines.number();
    if (line.empty()) continue;  // PCL ignores a line of only white space (with a warning)
    const bool free_text = line.compare(0, 7, "comment") == 0;
    check_characters(path, n, line, free_text);
    const auto w = words(line);
    if (w[0] == "comment") continue;
    // PCL hands an obj_info line to its reader whole, which splits it at the blanks: after a
    // leading one the words are shifted, and num_cols / num_rows ignored.
    if (line.size() != whole.size() && w[0] == "obj_info")
      reject(path, line_at(n), "an obj_info line may not start with white space (PCL ignores it)");
    if (w[0] == "end_header") {
      if (w.size() != 1) reject(path, line_at(n), "end_header takes nothing after it");
      break;
    }
    if (w[0] == "obj_info") {
      // PCL sets the cloud's width and height from these (atoi), and sizes the cloud by them
      // when they come before the vertex element; after it they disagree with the data.
      if (w.size() < 2 || (w[1] != "num_cols" && w[1] != "num_rows")) continue;
      std::uint64_t& v = w[1] == "num_cols" ? h.num_cols : h.num_rows;
      std::uint64_t& seen = w[1] == "num_cols" ? cols_line : rows_line;
      if (seen)
        reject(path, line_at(n),
               "a second obj_info " + std::string(w[1]) + " (line " + std::to_string(seen) +
                   " was the first)");
      if (!h.elements.empty())
        reject(path, line_at(n),
               "obj_info " + std::string(w[1]) +
                   " after an element (PCL sizes the cloud by it only before)");
      if (w.size() != 3 || !parse_count(w[2], 2147483647, &v) || v == 0)
        reject(path, line_at(n),
               "obj_info " + std::string(w[1]) + " takes one count from 1 to 2^31-1");
      seen = n;
      continue;
    }
    if (w[0] == "element") {
      if (w.size() != 3) reject(path, line_at(n), "expected 'element NAME COUNT'");
      PlyElement e;
      e.name = std::string(w[1]);
      e.line = n;
      if (!valid_name(e.name))
        reject(path, line_at(n), "element name " + quote(e.name) + " (at most 128 bytes)");
      for (const auto& o : h.elements)
        if (o.name == e.name) reject(path, line_at(n), "a second element '" + e.name + "'");
      if (!parse_count(w[2], std::uint64_t(1) << 40, &e.count))
        reject(path, line_at(n), "element " + e.name + " count " + quote(w[2]) + " is not a count");
      h.elements.push_back(e);
      continue;
    }
    if (w[0] == "property") {
      if (h.elements.empty()) reject(path, line_at(n), "a property before any element");
      PlyElement& e = h.elements.back();
      PlyProperty p;
      if (w.size() == 5 && w[1] == "list") {
        p.list = true;
        p.name = std::string(w[4]);
        if (!ply_type(w[2], p.count_type) || !ply_type(w[3], p.type))
          reject(path, line_at(n), "list property '" + p.name + "' has an unknown type");
        if (p.count_type != Scalar::u8 && p.count_type != Scalar::u16 &&
            p.count_type != Scalar::u32 && p.count_type != Scalar::i32)
          reject(path, line_at(n),
                 "list property '" + p.name + "' has a count of type " + scalar_name(p.count_type) +
                     " (PCL reads uchar, ushort, uint or int)");
      } else if (w.size() == 3) {
        p.name = std::string(w[2]);
        if (!ply_type(w[1], p.type))
          reject(path, line_at(n), "property '" + p.name + "' has unknown type " + quote(w[1]));
      } else {
        reject(path, line_at(n),
               "expected 'property TYPE NAME' or 'property list COUNT_TYPE TYPE NAME'");
      }
      if (!valid_name(p.name))
        reject(path, line_at(n), "property name " + quote(p.name) + " (at most 128 bytes)");
      for (const auto& o : e.properties)
        if (o.name == p.name)
          reject(path, line_at(n), "property '" + p.name + "' appears twice in element " + e.name);
      e.properties.push_back(p);
      continue;
    }
    if (w[0] == "format") reject(path, line_at(n), "a second format line");
    reject(path, line_at(n), quote(w[0]) + " is not a PLY header keyword");
  }
  h.data_start = lines.offset();
  h.header_lines = lines.number();
  h.eol = lines.eol();

  const PlyElement* vertex = nullptr;
  const PlyElement* camera = nullptr;
  const PlyElement* range_grid = nullptr;
  for (std::size_t i = 0; i < h.elements.size(); ++i) {
    const PlyElement& e = h.elements[i];
    // Items without properties take no bytes, so the file's size does not bound them, but PCL
    // loops over each (found by fuzzing: 2e10 of them kept it busy for minutes).
    if (e.properties.empty() && e.count > 0 && e.name != "vertex")  // (vertex: no x, y, z)
      reject(path, line_at(e.line),
             "element " + e.name + " has " + std::to_string(e.count) +
                 " items but no properties (only an empty element, count 0, may have none)");
    if (e.name == "vertex") {
      vertex = &e;
      h.vertex = i;
    }
    if (e.name == "camera") camera = &e;
    if (e.name == "range_grid") range_grid = &e;
  }
  if (!vertex) reject(path, "", "the PLY file has no vertex element");
  if (vertex->count > kMaxPoints)
    reject(path, line_at(vertex->line),
           "element vertex " + std::to_string(vertex->count) +
               ": at most 2^31-1 points are supported");
  h.vertex_fields = ply_vertex_fields(path, *vertex);
  const auto& fields = h.vertex_fields;
  for (const char* axis : {"x", "y", "z"}) {
    if (std::find(fields.begin(), fields.end(), axis) == fields.end())
      reject(path, line_at(vertex->line),
             std::string("the vertex element has no '") + axis + "' property");
    for (const auto& p : vertex->properties)
      if (p.name == axis && p.type != Scalar::f32 && p.type != Scalar::f64)
        h.float_coordinates = false;
  }
  if (cols_line || rows_line) {
    if (!cols_line || !rows_line)
      reject(path, line_at(cols_line ? cols_line : rows_line),
             "obj_info num_cols and num_rows go together");
    h.grid = true;
  }
  // camera: PCL takes the cloud's width and height from its int viewportx / viewporty values
  // (checked against the data later); nothing else in it matters to pcnn.
  bool viewport = false;
  if (camera) {
    int found = 0;
    for (const auto& p : camera->properties)
      if ((p.name == "viewportx" || p.name == "viewporty") && p.type == Scalar::i32 && !p.list)
        ++found;
    if (found == 1)
      reject(path, line_at(camera->line), "camera has one of viewportx and viewporty (int)");
    viewport = found == 2;
    if (camera->count > 1)
      reject(path, line_at(camera->line), "more than one camera (PCL keeps the last one's size)");
    if (viewport && h.grid)
      reject(path, line_at(camera->line),
             "both obj_info num_cols/num_rows and a camera viewport give the cloud's size");
  }
  // range_grid: PCL rebuilds the cloud from it (one vertex index or none per grid cell).
  if (range_grid) {
    const auto& p = range_grid->properties;
    if (p.size() != 1 || !p[0].list || p[0].count_type != Scalar::u8 || p[0].type != Scalar::i32 ||
        (p[0].name != "vertex_indices" && p[0].name != "vertex_index"))
      reject(path, line_at(range_grid->line),
             "range_grid must hold exactly 'property list uchar int vertex_indices'");
    if (!h.grid)
      reject(path, line_at(range_grid->line), "range_grid without obj_info num_cols and num_rows");
    if (range_grid->count != h.num_cols * h.num_rows)
      reject(path, line_at(range_grid->line),
             "range_grid has " + std::to_string(range_grid->count) + " cells for a " +
                 std::to_string(h.num_cols) + " x " + std::to_string(h.num_rows) + " grid");
    // PCL sizes the vertices' buffer by the grid before reading them (found by fuzzing: one
    // vertex more than cells, and PCL asserted writing past it).
    if (vertex->count > h.num_cols * h.num_rows)
      reject(path, line_at(vertex->line),
             "element vertex " + std::to_string(vertex->count) + " is more than the " +
                 std::to_string(h.num_cols) + " x " + std::to_string(h.num_rows) +
                 " grid PCL makes room for");
  } else if (h.grid && h.num_cols * h.num_rows != vertex->count) {
    reject(path, line_at(cols_line),
           "obj_info num_cols x num_rows (" + std::to_string(h.num_cols) + " x " +
               std::to_string(h.num_rows) + ") does not equal the " +
               std::to_string(vertex->count) + " vertices");
  }
  if (h.grid && h.num_cols * h.num_rows > kMaxPoints)
    reject(path, line_at(cols_line), "a grid of more than 2^31-1 points");
  return h;
}

bool header_complete(const std::string& path, int fd, bool ply) {
  struct Partial {
    Partial() { reading_partial_file = true; }
    ~Partial() { reading_partial_file = false; }
  } partial;
  try {
    if (ply)
      read_ply_header(path, fd);
    else
      read_pcd_header(path, fd);
    return true;
  } catch (const HeaderIncomplete&) {
    return false;
  }
}

}  // namespace pcnn::io_detail
