#include "input_gate.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "../core/cpus.hpp"
#include "../core/parallel_blocks.hpp"
#include "byte_source.hpp"
#include "coordinate_gather.hpp"
#include "header_check.hpp"
#include "number_grammar.hpp"

namespace pcnn::io_detail {
namespace {

std::string at_byte(std::uint64_t offset) { return "byte " + std::to_string(offset); }

// LZF as pcl::lzfDecompress reads it: a control byte; below 32, a run of ctrl + 1 literal bytes;
// otherwise a back reference of (ctrl >> 5) + 2 bytes (7: plus the next byte) at a distance of
// ((ctrl & 31) << 8) + next byte + 1. PCL reads a control byte even from empty input (one byte
// past the data) and expects the output to come out at exactly the stored size.
template <class NextByte>
bool walk_lzf(NextByte&& next, std::uint64_t in_len, std::uint64_t expected, std::string* why) {
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (in_len == 0) return fail("an empty compressed block (PCL reads past it)");
  std::uint64_t ip = 0, op = 0;
  do {
    const unsigned ctrl = next();
    ++ip;
    if (ctrl < 32) {
      const std::uint64_t run = ctrl + 1;
      if (op + run > expected) return fail("it decodes to more bytes than the header says");
      if (ip + run > in_len) return fail("a literal run goes past the end of the data");
      for (std::uint64_t i = 0; i < run; ++i) next();
      ip += run;
      op += run;
    } else {
      std::uint64_t len = ctrl >> 5;
      std::uint64_t back = (std::uint64_t(ctrl & 31) << 8) + 1;
      if (ip >= in_len) return fail("a back reference goes past the end of the data");
      if (len == 7) {
        len += next();
        ++ip;
        if (ip >= in_len) return fail("a back reference goes past the end of the data");
      }
      back += next();
      ++ip;
      if (op + len + 2 > expected) return fail("it decodes to more bytes than the header says");
      if (back > op) return fail("a back reference before the start of the data");
      op += len + 2;
    }
  } while (ip < in_len);
  if (op != expected)
    return fail("it decodes to " + std::to_string(op) + " bytes, the header says " +
                std::to_string(expected));
  return true;
}

// Splits a data line at runs of spaces and tabs (what both PCL readers split at; PCL's .ply
// reader would also split at \v, \f and \r, its .pcd reader would not).
void split_values(const std::string& path, std::uint64_t line, std::string_view text,
                  std::vector<std::string_view>& out) {
  out.clear();
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == ' ' || c == '\t') {
      ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') {
      const auto d = static_cast<unsigned char>(text[i]);
      if (d < 0x20 || d == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", d);
        reject(path, line_at(line),
               std::string("a control character (") + hex +
                   ") in the data: values are separated by spaces and tabs only");
      }
      ++i;
    }
    out.push_back(text.substr(start, i - start));
  }
}

std::string quote(std::string_view s) {
  return "'" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
}

// Reads the data lines of an ascii file: each ends as the header's lines do, or either way in a
// .pcd (Eol::either; the file's last line may have no ending).
class DataLines {
 public:
  DataLines(const std::string& path, int fd, std::uint64_t offset, std::uint64_t first_line,
            Eol eol, std::size_t max_length)
      : path_(path), src_(path, fd, offset), n_(first_line - 1), eol_(eol), max_(max_length) {}

  bool next(std::string_view& text) {
    if (ended_) return false;
    bool too_long = false;
    std::string_view ending;
    if (!src_.line(line_, ending, too_long, max_)) return false;
    ++n_;
    if (too_long) reject(path_, line_at(n_), "longer than " + std::to_string(max_) + " bytes");
    if (ending.empty()) {
      ended_ = true;
    } else if (eol_ != Eol::either && (ending == "\r\n") != (eol_ == Eol::crlf)) {
      reject(path_, line_at(n_),
             std::string("ends with ") + (ending == "\r\n" ? "CR LF" : "LF") +
                 " but the header's lines with " + (eol_ == Eol::crlf ? "CR LF" : "LF"));
    }
    text = line_;
    return true;
  }
  std::uint64_t number() const { return n_; }
  /// Offset of the next line's first byte.
  std::uint64_t offset() const { return src_.offset(); }
  bool at_end() { return ended_ || src_.at_end(); }

 private:
  const std::string& path_;
  ByteSource src_;
  std::string line_;
  std::uint64_t n_;
  Eol eol_;
  std::size_t max_;
  bool ended_ = false;
};

// The value a checked literal stores in its type, as a double (float32: rounded to float).
double stored_value(const Number& v, Scalar type) {
  return type == Scalar::f32 ? double(static_cast<float>(v.f)) : v.f;  // integers: exact in .f
}

std::size_t max_line_for(std::uint64_t values) {
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(values * (kMaxNumberLength + 16) + 256, std::uint64_t(1) << 30));
}

// ---- PCD ----

// Where the lines of [begin, end) start, a chunk of the data at a time: chunk c is bytes
// [begin + c * kLineChunk, ...), and its lines are those whose first byte it holds.
constexpr std::uint64_t kLineChunk = std::uint64_t(1) << 20;

// How many lines start in each chunk of [begin, end) (a line starts at `begin` and after each
// LF before `end`), counted on up to `threads` threads. Once the chunks counted hold more than
// `wanted` lines, a chunk not begun yet is left uncounted; afterwards every uncounted chunk before
// the last counted one is counted (a thread may have begun a chunk late, after a later one was
// counted), so that those left (0 in `done`) follow every counted one, and more than
// `wanted` lines: their lines are in excess whatever their number.
std::vector<std::uint64_t> line_starts(const std::string& path, int fd, std::uint64_t begin,
                                       std::uint64_t end, std::uint64_t wanted, int threads,
                                       std::vector<char>& done) {
  const std::uint64_t chunks = (end - begin + kLineChunk - 1) / kLineChunk;
  std::vector<std::uint64_t> starts(chunks, 0);
  done.assign(chunks, 0);  // char, not bool: threads write their own elements
  auto count = [&](std::uint64_t c) {
    const std::uint64_t s = begin + c * kLineChunk;
    const std::uint64_t e = std::min(end, s + kLineChunk);
    // Bytes [s - 1, e - 1): whether s starts a line, and each LF before e - 1 starts one in the
    // chunk.
    const std::uint64_t from = s == begin ? s : s - 1;
    ByteSource src(path, fd, from);
    std::uint64_t n = s == begin ? 1 : 0;
    std::vector<char> buf(static_cast<std::size_t>(e - from));
    const std::size_t got = src.read(buf.data(), buf.size());
    const char* p = buf.data();
    if (s != begin && got > 0) n += p[0] == '\n';
    const std::size_t first = s == begin ? 0 : 1;
    const std::size_t last = got == buf.size() ? got - 1 : got;
    if (last > first) n += static_cast<std::uint64_t>(std::count(p + first, p + last, '\n'));
    starts[c] = n;
    done[c] = 1;
    return n;
  };
  std::atomic<std::uint64_t> seen{0};
  detail::parallel_blocks(threads, static_cast<std::int64_t>(chunks), 1,
                          [&](std::int64_t c, std::int64_t) {
                            if (seen.load() <= wanted) seen += count(std::uint64_t(c));
                          });
  std::uint64_t last = 0;
  for (std::uint64_t c = 0; c < chunks; ++c)
    if (done[c]) last = c;
  std::vector<std::uint64_t> gaps;
  for (std::uint64_t c = 0; c < last; ++c)
    if (!done[c]) gaps.push_back(c);
  detail::parallel_blocks(threads, static_cast<std::int64_t>(gaps.size()), 1,
                          [&](std::int64_t g, std::int64_t) { count(gaps[std::size_t(g)]); });
  return starts;
}

// The end of [begin, end) without the lines of only blanks (spaces, tabs, CR) that close it: PCL
// stops reading once it has the rows the header promises, and such lines hold nothing it would
// ignore, so a file that ends in an empty line or two is no file with data after its last row.
std::uint64_t end_of_last_filled_line(const std::string& path, int fd, std::uint64_t begin,
                                      std::uint64_t end) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  std::vector<char> buf(std::size_t(1) << 16);
  std::uint64_t filled = end;  // offset of the last byte that is no blank, once found
  for (std::uint64_t at = end; at > begin && filled == end;) {
    const std::uint64_t from = at - std::min<std::uint64_t>(at - begin, buf.size());
    ByteSource src(path, fd, from);
    const std::size_t got = src.read(buf.data(), static_cast<std::size_t>(at - from));
    if (got != at - from) reject(path, "", "the file changed while it was being read");
    for (std::size_t i = got; i-- > 0;)
      if (!blank(buf[i])) {
        filled = from + i;
        break;
      }
    at = from;
  }
  if (filled == end) return begin;       // no row at all
  ByteSource src(path, fd, filled + 1);  // the LF that ends the last filled line, if any
  for (char c = 0; src.read(&c, 1) == 1;)
    if (c == '\n') return src.offset();
  return end;  // the last row has no line ending (its own trailing blanks are the row's)
}

// The data lines of an ascii file (from h.data_start to `end`; its first is line
// `header_lines` + 1) checked on up to `threads` threads, a chunk of ~1 MiB of lines each, once a
// first pass has counted the lines that start in each chunk (so that each knows its lines'
// numbers): body(lines, first, count) reads lines `first` .. `first` + count - 1 (0-based among
// the data lines, the first `wanted` only) with lines.next(). Errors are those a reading in order
// meets first: chunks are taken in order, and the lowest failing one's error is the one reported
// (detail::parallel_blocks). Returns how many data lines the file has (the blank lines that end
// it aside: end_of_last_filled_line), for the caller to refuse too few or too many.
template <class Body>
std::uint64_t check_lines(const std::string& path, int fd, std::uint64_t data_start,
                          std::uint64_t end, std::uint64_t header_lines, Eol eol,
                          std::size_t max_length, std::uint64_t wanted, int threads, Body&& body) {
  end = end_of_last_filled_line(path, fd, data_start, end);
  std::vector<char> counted;
  const std::vector<std::uint64_t> starts =
      line_starts(path, fd, data_start, end, wanted, threads, counted);
  std::vector<std::uint64_t> first(starts.size() + 1, 0);  // of each chunk; then the total
  for (std::size_t c = 0; c < starts.size(); ++c) first[c + 1] = first[c] + starts[c];
  // A chunk in which no line starts (the last one aside) lies inside a line of more than 1 MiB.
  // Then one thread checks the rows, as one line at a time was held before: each chunk's thread
  // holds its line and its values' views (16 bytes each), up to the longest line allowed.
  bool long_line = false;
  for (std::size_t c = 0; c + 1 < starts.size(); ++c) long_line |= counted[c] && starts[c] == 0;
  detail::parallel_blocks(
      long_line ? 1 : threads, static_cast<std::int64_t>(starts.size()), 1,
      [&](std::int64_t c, std::int64_t) {
        const auto ci = static_cast<std::size_t>(c);
        const std::uint64_t count = std::min(starts[ci], wanted - std::min(wanted, first[ci]));
        if (count == 0) return;
        // The chunk's first line: at its first byte, or after its first LF (one is in it).
        const std::uint64_t s = data_start + ci * kLineChunk;
        std::uint64_t at = s;
        if (s != data_start) {
          ByteSource src(path, fd, s - 1);
          char prev = 0;
          std::string skipped;
          std::string_view ending;
          bool too_long = false;
          if (src.read(&prev, 1) == 1 && prev != '\n')
            src.line(skipped, ending, too_long, kLineChunk);
          at = src.offset();
        }
        DataLines lines(path, fd, at, header_lines + 1 + first[ci], eol, max_length);
        body(lines, first[ci], count);
        if (lines.number() != header_lines + first[ci] + count)
          reject(path, "", "the file changed while it was being read");
      });
  return first.back();
}

// A checked literal's value stored in its column's type: integers exact (in range: their low
// bytes, the host being little-endian as the files), float32 rounded once (the grammar makes that
// PCL's value).
void store_value(unsigned char* p, Scalar t, const Number& n) {
  if (t == Scalar::f32) {
    const auto v = static_cast<float>(n.f);
    std::memcpy(p, &v, sizeof v);
  } else if (t == Scalar::f64) {
    std::memcpy(p, &n.f, sizeof n.f);
  } else {
    std::memcpy(p, &n.i, scalar_size(t));
  }
}

bool is_nan_literal(std::string_view v) {
  return v.size() == 3 && (v[0] | 0x20) == 'n' && (v[1] | 0x20) == 'a' && (v[2] | 0x20) == 'n';
}

// Stores checked `literal` (value `n`) as column c of `row` in `rows` (its offset >= 0, `row`
// below rows.rows). False where it makes the cloud not dense by rows.rule.
bool store_column(RowValues& rows, std::uint64_t row, std::size_t c, std::string_view literal,
                  const Number& n) {
  const Scalar t = rows.type[c];
  store_value(rows.data + row * rows.point_step + static_cast<std::uint64_t>(rows.offset[c]), t, n);
  if (rows.rule == RowValues::Dense::no_nan_literal) return !is_nan_literal(literal);
  if (t == Scalar::f32) return std::isfinite(static_cast<float>(n.f));
  return t != Scalar::f64 || std::isfinite(n.f);
}

// After an ascii file's rows were all checked: what `xyz` and `all` (when given) now hold.
void mark_filled(Coordinates* xyz, std::int64_t finite, RowValues* all, bool dense) {
  if (xyz) {
    xyz->finite = finite;
    xyz->gathered = true;
  }
  if (all) {
    all->dense = dense;
    all->filled = true;
  }
}

// `xyz` (when given) receives each row's x, y and z (at `layout`), from the values the check
// parses, its buffer sized only once the file's size has bounded the rows; `all` every value
// (RowValues, sized by the caller). The rows are checked on several threads (check_lines); rows
// missing or in excess are told after.
void check_pcd_ascii(const std::string& path, int fd, const PcdHeader& h, std::uint64_t body,
                     Coordinates* xyz, const XyzLayout& layout, RowValues* all) {
  std::uint64_t columns = 0;
  for (const auto& f : h.fields) columns += f.count;
  // A row is at least one character per value and a separator after each (the last row may
  // lack its line ending): the file's size bounds the rows before anything is allocated.
  if (h.points > 0 && h.points * 2 * columns > body + 1)
    reject(path, line_at(h.header_lines),
           "POINTS is " + std::to_string(h.points) + " but the " + std::to_string(body) +
               " bytes of ascii data hold at most " + std::to_string((body + 1) / (2 * columns)) +
               " rows of " + std::to_string(columns) + " values");
  const int threads = detail::usable_cpus();
  if (xyz) size_for(*xyz, layout, h.points, threads);
  std::vector<Scalar> types;  // per column (at most half the file's size, by the check above)
  std::vector<const std::string*> names;
  std::vector<int> axis;  // per column: 0, 1, 2 for x, y, z (count 1), else -1
  if (h.points > 0)
    for (const auto& f : h.fields)
      for (std::uint32_t c = 0; c < f.count; ++c) {
        types.push_back(f.type);
        names.push_back(&f.name);
        axis.push_back(f.name == "x" ? 0 : f.name == "y" ? 1 : f.name == "z" ? 2 : -1);
      }
  if (all && !all->fits(h.points, columns)) all = nullptr;
  std::atomic<std::int64_t> finite{0};
  std::atomic<bool> dense{true};
  const std::uint64_t lines_total = check_lines(
      path, fd, h.data_start, h.data_start + body, h.header_lines, h.eol, max_line_for(columns),
      h.points, threads, [&](DataLines& lines, std::uint64_t first, std::uint64_t count) {
        std::vector<std::string_view> values;
        std::string_view text;
        std::int64_t finite_here = 0;
        bool dense_here = true;
        for (std::uint64_t row = first; row < first + count; ++row) {
          if (!lines.next(text)) break;
          split_values(path, lines.number(), text, values);
          if (values.size() != columns)
            reject(path, line_at(lines.number()),
                   "point " + std::to_string(row) + " has " + std::to_string(values.size()) +
                       " values, expected " + std::to_string(columns));
          double values3[3] = {0, 0, 0};
          for (std::size_t v = 0; v < values.size(); ++v) {
            Number n;
            const std::string why =
                check_number(values[v], types[v], Dialect::pcd, xyz || all ? &n : nullptr);
            if (!why.empty())
              reject(path, line_at(lines.number()),
                     "field '" + *names[v] + "': " + quote(values[v]) + " is " + why);
            if (xyz && axis[v] >= 0) values3[axis[v]] = stored_value(n, types[v]);
            if (all && all->offset[v] >= 0) dense_here &= store_column(*all, row, v, values[v], n);
          }
          if (xyz) finite_here += put(*xyz, row, values3);
        }
        finite += finite_here;
        if (!dense_here) dense = false;
      });
  if (lines_total < h.points)
    reject(path, "",
           "the ascii data has " + std::to_string(lines_total) + " rows, POINTS says " +
               std::to_string(h.points) + " (truncated file?)");
  if (lines_total > h.points)
    reject(path, line_at(h.header_lines + h.points + 1),
           "data after the last of the " + std::to_string(h.points) +
               " POINTS rows (PCL would ignore it)");
  mark_filled(xyz, finite, all, dense);
}

// PCL's .pcd writers for PCLPointCloud2 pad the file with zeros to (or by) a page: fewer than
// 4096 zero bytes after the data are accepted. Anything else after the points (more points than
// POINTS says?) would be ignored by PCL without a word.
void check_pcd_padding(const std::string& path, int fd, std::uint64_t offset, std::uint64_t extra) {
  const std::uint64_t page = 4096;
  bool zeros = extra < page;
  if (zeros) {
    ByteSource src(path, fd, offset);
    std::vector<unsigned char> tail(static_cast<std::size_t>(extra));
    src.read(tail.data(), tail.size());
    zeros = std::all_of(tail.begin(), tail.end(), [](unsigned char c) { return c == 0; });
  }
  if (!zeros)
    reject(path, at_byte(offset),
           std::to_string(extra) +
               " bytes after the last of the POINTS points (PCL would ignore them; only the "
               "zero padding of PCL's own writer, under 4096 bytes, is accepted)");
}

void check_pcd_compressed(const std::string& path, int fd, const PcdHeader& h, std::uint64_t body) {
  if (body < 8) reject(path, at_byte(h.data_start), "binary_compressed data without its sizes");
  ByteSource src(path, fd, h.data_start);
  std::uint32_t sz[2] = {0, 0};
  src.read(sz, 8);  // little-endian, as PCL writes and reads them on x86 and ARM
  const std::uint64_t compressed = sz[0], uncompressed = sz[1];
  if (uncompressed != h.points * h.point_size)
    reject(path, at_byte(h.data_start + 4),
           "binary_compressed data of " + std::to_string(uncompressed) +
               " bytes, but POINTS x point size is " + std::to_string(h.points * h.point_size));
  if (compressed > body - 8)
    reject(path, at_byte(h.data_start),
           "binary_compressed size says " + std::to_string(compressed) + " compressed bytes, but " +
               std::to_string(body - 8) + " follow (truncated file?)");
  if (compressed < body - 8)
    check_pcd_padding(path, fd, h.data_start + 8 + compressed, body - 8 - compressed);
  if (h.points == 0) return;
  std::string why;
  std::uint64_t pos = h.data_start + 8;
  auto next = [&]() -> unsigned {
    unsigned char c = 0;
    if (src.read(&c, 1) != 1) reject(path, at_byte(pos), "the compressed data ends early");
    ++pos;
    return c;
  };
  if (!walk_lzf(next, compressed, uncompressed, &why))
    reject(path, at_byte(pos > 0 ? pos - 1 : pos), "the compressed data is corrupt: " + why);
}

// Where x, y and z are in a .pcd point record (each has count 1: the header checked it).
XyzLayout pcd_layout(const PcdHeader& h) {
  XyzLayout l;
  std::uint64_t offset = 0;
  for (const auto& f : h.fields) {
    for (int a = 0; a < 3; ++a)
      if (f.name == std::string(1, "xyz"[a])) {
        l.type[a] = f.type;
        l.offset[a] = offset;
      }
    offset += std::uint64_t(f.count) * scalar_size(f.type);
  }
  return l;
}

InputShape check_pcd(const std::string& path, int fd, std::uint64_t file_size, Coordinates* xyz,
                     RowValues* rows) {
  const PcdHeader h = read_pcd_header(path, fd);
  const std::uint64_t body = file_size - std::min(file_size, h.data_start);
  // pcnn reads ascii and binary data itself; compressed data is left to PCL.
  const bool gather = xyz && h.points > 0 && h.data != PcdHeader::Data::binary_compressed;
  const XyzLayout layout = pcd_layout(h);
  switch (h.data) {
    case PcdHeader::Data::ascii:
      check_pcd_ascii(path, fd, h, body, gather ? xyz : nullptr, layout,
                      h.points > 0 ? rows : nullptr);
      break;
    case PcdHeader::Data::binary: {
      const std::uint64_t need = h.points * h.point_size;
      if (body < need)
        reject(path, at_byte(h.data_start),
               "POINTS x point size is " + std::to_string(need) +
                   " bytes, but the binary data has " + std::to_string(body) +
                   " (truncated file?)");
      if (body > need) check_pcd_padding(path, fd, h.data_start + need, body - need);
      if (h.points > 0) check_pcd_binary_start(path, fd, h.data_start);
      if (gather) gather_binary(path, fd, h.data_start, h.points, h.point_size, layout, *xyz);
      break;
    }
    case PcdHeader::Data::binary_compressed:
      check_pcd_compressed(path, fd, h, body);
      check_pcd_binary_start(path, fd, h.data_start);
      break;
  }
  if (gather)
    for (const auto& f : h.fields) xyz->field_names.push_back(f.name);
  InputShape shape{h.points, h.width, h.height};
  if (h.data == PcdHeader::Data::binary && h.points > 0) {
    shape.binary_pcd_records = h.data_start;
    shape.point_size = h.point_size;
  }
  return shape;
}

// ---- PLY ----

// What the gate learns from a PLY file's data: the camera's viewport and the range grid.
struct PlyFacts {
  bool viewport = false;
  std::int64_t viewport_x = 0, viewport_y = 0;
  std::uint64_t empty_cells = 0;
};

// The range grid of a file with as many cells as vertices is ignored by PCL (it keeps the
// vertices in file order), so it must then map each cell to its own vertex.
void check_cell(const std::string& path, const std::string& where, const PlyHeader& h,
                std::uint64_t cell, std::uint64_t n, std::int64_t index, PlyFacts& facts) {
  const std::uint64_t vertices = h.elements[h.vertex].count;
  const std::uint64_t cells = h.num_cols * h.num_rows;
  if (n > 1)
    reject(path, where,
           "range_grid cell " + std::to_string(cell) + " lists " + std::to_string(n) +
               " vertices (PCL uses 0 or 1)");
  if (n == 0) {
    ++facts.empty_cells;
    if (cells == vertices)
      reject(path, where,
             "range_grid cell " + std::to_string(cell) +
                 " is empty, but with as many cells as vertices PCL ignores the grid");
    return;
  }
  if (index < 0 || static_cast<std::uint64_t>(index) >= vertices)
    reject(path, where,
           "range_grid cell " + std::to_string(cell) + " refers to vertex " +
               std::to_string(index) + " of " + std::to_string(vertices));
  if (cells == vertices && static_cast<std::uint64_t>(index) != cell)
    reject(path, where,
           "range_grid maps cell " + std::to_string(cell) + " to vertex " + std::to_string(index) +
               ", but with as many cells as vertices PCL ignores the grid");
}

Scalar list_count_type(Scalar t) { return t == Scalar::i32 ? Scalar::u32 : t; }  // as PCL reads

// The longest item line of an ascii .ply: lists make lines as long as their counts (allow what
// the longest list count could need); without lists, as a .pcd row of as many values.
std::size_t ply_line_limit(const PlyHeader& h) {
  std::size_t most = 0;
  for (const auto& e : h.elements)
    most = std::max(most, e.has_list() ? std::size_t(1) << 26 : max_line_for(e.properties.size()));
  return most;
}

// The items of every element, a line each, checked on several threads (check_lines); the vertex
// element's x, y and z (`axis`: 0, 1, 2 for the vertex properties x, y, z, else -1) into `xyz`
// when given (sized by the caller), and its every property into `all` when given (RowValues,
// sized by the caller; a column a property).
void check_ply_ascii(const std::string& path, int fd, const PlyHeader& h, std::uint64_t end,
                     PlyFacts& facts, Coordinates* xyz, const std::vector<int>& axis,
                     RowValues* all) {
  std::vector<std::uint64_t> before(h.elements.size() + 1, 0);  // items of the elements before
  for (std::size_t i = 0; i < h.elements.size(); ++i)
    before[i + 1] = before[i] + h.elements[i].count;
  const std::uint64_t items = before.back();
  if (all && !all->fits(h.elements[h.vertex].count, h.elements[h.vertex].properties.size()))
    all = nullptr;
  std::atomic<std::int64_t> finite{0};
  std::atomic<bool> dense{true};
  std::mutex facts_mutex;
  const std::uint64_t lines_total = check_lines(
      path, fd, h.data_start, end, h.header_lines, h.eol, ply_line_limit(h), items,
      detail::usable_cpus(), [&](DataLines& lines, std::uint64_t first, std::uint64_t count) {
        PlyFacts here;
        bool viewport_x = false, viewport_y = false;
        std::int64_t finite_here = 0;
        bool dense_here = true;
        std::vector<std::string_view> values;
        std::string_view text;
        // The element of line `first` (the last whose items begin at or before it).
        auto ei = static_cast<std::size_t>(std::upper_bound(before.begin(), before.end(), first) -
                                           before.begin() - 1);
        for (std::uint64_t line = first; line < first + count; ++line) {
          while (line >= before[ei + 1]) ++ei;  // elements of no items are skipped
          const PlyElement& e = h.elements[ei];
          const std::uint64_t item = line - before[ei];
          const bool camera = e.name == "camera", grid = e.name == "range_grid";
          const bool gather = xyz && ei == h.vertex;
          const bool store = all && ei == h.vertex;
          double xyz3[3] = {0, 0, 0};
          if (!lines.next(text)) break;
          const auto where = [&] { return line_at(lines.number()); };
          split_values(path, lines.number(), text, values);
          std::size_t t = 0;
          auto take = [&](Scalar type, const std::string& what) {
            if (t >= values.size())
              reject(path, where(),
                     "element " + e.name + " item " + std::to_string(item) +
                         " has too few values (" + what + " missing)");
            Number v;
            const std::string why = check_number(values[t], type, Dialect::ply, &v);
            if (!why.empty())
              reject(path, where(),
                     "element " + e.name + " " + what + ": " + quote(values[t]) + " is " + why);
            ++t;
            return v;
          };
          for (const auto& p : e.properties) {
            if (p.list) {
              const Number n = take(list_count_type(p.count_type), p.name + " (list count)");
              std::int64_t first_index = -1;
              for (std::int64_t k = 0; k < n.i; ++k) {
                const Number v = take(p.type, p.name);
                if (k == 0) first_index = v.i;
              }
              if (grid)
                check_cell(path, where(), h, item, static_cast<std::uint64_t>(n.i), first_index,
                           here);
            } else {
              const auto column = static_cast<std::size_t>(&p - e.properties.data());
              const Number v = take(p.type, p.name);
              if (gather && axis[column] >= 0) xyz3[axis[column]] = stored_value(v, p.type);
              if (store && all->offset[column] >= 0)
                dense_here &= store_column(*all, item, column, values[t - 1], v);
              if (camera && p.type == Scalar::i32 && p.name == "viewportx") {
                here.viewport_x = v.i;
                viewport_x = true;
              }
              if (camera && p.type == Scalar::i32 && p.name == "viewporty") {
                here.viewport_y = v.i;
                viewport_y = true;
              }
            }
          }
          if (t != values.size())
            reject(path, where(),
                   "element " + e.name + " item " + std::to_string(item) + " has " +
                       std::to_string(values.size() - t) + " values too many");
          if (gather) finite_here += put(*xyz, item, xyz3);
        }
        finite += finite_here;
        if (!dense_here) dense = false;
        // The camera's viewport is used only when the camera element has one item, which one
        // chunk holds.
        std::lock_guard<std::mutex> lock(facts_mutex);
        facts.empty_cells += here.empty_cells;
        if (viewport_x) facts.viewport_x = here.viewport_x;
        if (viewport_y) facts.viewport_y = here.viewport_y;
      });
  if (lines_total < items) {
    auto ei = static_cast<std::size_t>(std::upper_bound(before.begin(), before.end(), lines_total) -
                                       before.begin() - 1);
    const PlyElement& e = h.elements[ei];
    reject(path, "",
           "element " + e.name + " has " + std::to_string(lines_total - before[ei]) +
               " rows, the header promises " + std::to_string(e.count) + " (truncated file?)");
  }
  if (lines_total > items)
    reject(path, line_at(h.header_lines + items + 1),
           "data after the last element's rows (PCL would ignore it)");
  mark_filled(xyz, finite, all, dense);
}

void check_ply_binary(const std::string& path, int fd, const PlyHeader& h, std::uint64_t file_size,
                      PlyFacts& facts) {
  const bool swap = h.format == PlyHeader::Format::binary_big_endian;  // hosts are little-endian
  ByteSource src(path, fd, h.data_start);
  unsigned char buf[8];
  auto truncated = [&](const PlyElement& e, std::uint64_t item) {
    reject(path, at_byte(src.offset()),
           "the file ends inside element " + e.name + " (item " + std::to_string(item) + " of " +
               std::to_string(e.count) + "; truncated file?)");
  };
  // Reads one value of type t (as PCL would, byte-swapped for big-endian data).
  auto read_value = [&](const PlyElement& e, std::uint64_t item, Scalar t) -> std::int64_t {
    const std::uint32_t n = scalar_size(t);
    if (src.read(buf, n) != n) truncated(e, item);
    if (swap) std::reverse(buf, buf + n);
    switch (t) {
      case Scalar::u8:
        return buf[0];
      case Scalar::u16: {
        std::uint16_t v;
        std::memcpy(&v, buf, 2);
        return v;
      }
      case Scalar::u32: {
        std::uint32_t v;
        std::memcpy(&v, buf, 4);
        return v;
      }
      case Scalar::i32: {
        std::int32_t v;
        std::memcpy(&v, buf, 4);
        return v;
      }
      default:
        return 0;  // not needed as a value
    }
  };
  for (const auto& e : h.elements) {
    const bool camera = e.name == "camera", grid = e.name == "range_grid";
    if (!e.has_list() && !camera) {
      const std::uint64_t bytes = e.count * e.fixed_size();  // count <= 2^40, size <= 2^14
      if (bytes > file_size || !src.skip(bytes))
        reject(path, at_byte(src.offset()),
               "element " + e.name + " needs " + std::to_string(bytes) + " bytes, " +
                   std::to_string(file_size - std::min(file_size, src.offset())) +
                   " follow (truncated file?)");
      continue;
    }
    for (std::uint64_t item = 0; item < e.count; ++item) {
      for (const auto& p : e.properties) {
        if (p.list) {
          const std::uint64_t where = src.offset();
          // An int count is read as unsigned by PCL; a negative one is a huge list.
          const auto n =
              static_cast<std::uint64_t>(read_value(e, item, list_count_type(p.count_type)) &
                                         (p.count_type == Scalar::i32 ? 0xffffffffLL : -1LL));
          if (grid) {
            const std::int64_t index = n > 0 ? read_value(e, item, Scalar::i32) : -1;
            check_cell(path, at_byte(where), h, item, n, index, facts);
          } else if (!src.skip(n * scalar_size(p.type))) {
            truncated(e, item);
          }
        } else if (camera && p.type == Scalar::i32 &&
                   (p.name == "viewportx" || p.name == "viewporty")) {
          (p.name == "viewportx" ? facts.viewport_x : facts.viewport_y) =
              read_value(e, item, Scalar::i32);
        } else if (!src.skip(scalar_size(p.type))) {
          truncated(e, item);
        }
      }
    }
  }
  if (!src.at_end())
    reject(path, at_byte(src.offset()),
           std::to_string(file_size - src.offset()) +
               " bytes after the last element (PCL would ignore them)");
}

InputShape check_ply(const std::string& path, int fd, std::uint64_t file_size, Coordinates* xyz,
                     RowValues* rows) {
  const PlyHeader h = read_ply_header(path, fd);
  const PlyElement& vertex = h.elements[h.vertex];
  // pcnn reads the vertices itself when they come first, in ascii or little-endian binary, and
  // are the cloud's points in file order: no range_grid (PCL rebuilds the cloud from it) and no
  // obj_info grid. The other elements are checked as always.
  const bool range_grid = std::any_of(h.elements.begin(), h.elements.end(),
                                      [](const PlyElement& e) { return e.name == "range_grid"; });
  const bool gather = xyz && vertex.count > 0 && h.vertex == 0 && !h.grid && !range_grid &&
                      h.format != PlyHeader::Format::binary_big_endian;
  XyzLayout layout;
  std::vector<int> axis(vertex.properties.size(), -1);
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < vertex.properties.size(); ++i) {
    const PlyProperty& p = vertex.properties[i];
    for (int a = 0; a < 3; ++a)
      if (p.name == std::string(1, "xyz"[a])) {
        axis[i] = a;
        layout.type[a] = p.type;
        layout.offset[a] = offset;
      }
    offset += scalar_size(p.type);  // the vertex has no list (the header checked it)
  }
  // Each vertex takes at least a byte per property (binary) or a character and a separator
  // (ascii): refuse counts the file cannot hold before reading further.
  const std::uint64_t body = file_size - std::min(file_size, h.data_start);
  const std::uint64_t per_vertex =
      h.format == PlyHeader::Format::ascii ? 2 * vertex.properties.size() : vertex.fixed_size();
  if (vertex.count > 0 && vertex.count * per_vertex > body + 1)
    reject(path, line_at(vertex.line),
           "element vertex " + std::to_string(vertex.count) + " needs at least " +
               std::to_string(vertex.count * per_vertex) + " bytes of data, " +
               std::to_string(body) + " follow (truncated file?)");
  PlyFacts facts;
  bool camera_viewport = false;
  for (const auto& e : h.elements)
    if (e.name == "camera" && e.count == 1)
      for (const auto& p : e.properties)
        if (p.name == "viewportx" && p.type == Scalar::i32 && !p.list) camera_viewport = true;
  if (h.format == PlyHeader::Format::ascii) {
    if (gather) size_for(*xyz, layout, vertex.count, detail::usable_cpus());
    check_ply_ascii(path, fd, h, file_size, facts, gather ? xyz : nullptr, axis,
                    gather ? rows : nullptr);
  } else {
    check_ply_binary(path, fd, h, file_size, facts);
    if (gather)
      gather_binary(path, fd, h.data_start, vertex.count, vertex.fixed_size(), layout, *xyz);
  }
  if (gather) xyz->field_names = h.vertex_fields;

  InputShape s;
  if (range_grid) {
    s = {h.num_cols * h.num_rows, h.num_cols, h.num_rows};
    if (facts.empty_cells > 0 && !h.float_coordinates)
      reject(path, "",
             "range_grid has empty cells, which PCL fills with 0 (not NaN) for integer x, y, z");
  } else if (h.grid) {
    s = {vertex.count, h.num_cols, h.num_rows};
  } else if (camera_viewport) {
    const std::int64_t w = facts.viewport_x, ht = facts.viewport_y;
    if (w < 0 || ht < 0 ||
        static_cast<std::uint64_t>(w) * static_cast<std::uint64_t>(ht) != vertex.count)
      reject(path, "",
             "the camera's viewport (" + std::to_string(w) + " x " + std::to_string(ht) +
                 ") does not hold the " + std::to_string(vertex.count) + " vertices");
    s = {vertex.count, static_cast<std::uint64_t>(w), static_cast<std::uint64_t>(ht)};
  } else {
    s = {vertex.count, vertex.count, 1};
  }
  return s;
}

// a + b and a * b, or kNoLimit where they would pass it.
constexpr std::uint64_t kNoLimit = ~std::uint64_t(0);
std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kNoLimit : r;
}
std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kNoLimit : r;
}

}  // namespace

std::uint64_t largest_accepted_size(const std::string& path, int fd, bool ply) {
  constexpr std::uint64_t kPadding = 4095;  // zeros after binary .pcd data (check_pcd_padding)
  auto ascii = [](std::uint64_t start, std::uint64_t lines, std::size_t line) {
    return add_sat(add_sat(start, mul_sat(lines, line + 2)), kBlankLinesAfterRows);
  };
  if (!ply) {
    const PcdHeader h = read_pcd_header(path, fd);
    const std::uint64_t data = h.points * h.point_size;  // both < 2^31 x 2^20 (the header)
    switch (h.data) {
      case PcdHeader::Data::binary:
        return h.data_start + data + kPadding;
      case PcdHeader::Data::binary_compressed: {
        // LZF turns at most 2 input bytes into 1 output byte (a literal run of one); the size
        // header allows 2^32 - 1 compressed bytes for no point.
        const std::uint64_t lzf =
            data > 0 ? std::min<std::uint64_t>(2 * data, 0xffffffffu) : 0xffffffffu;
        return h.data_start + 8 + lzf + kPadding;
      }
      case PcdHeader::Data::ascii: {
        std::uint64_t columns = 0;
        for (const auto& f : h.fields) columns += f.count;
        return ascii(h.data_start, h.points, max_line_for(columns));
      }
    }
  }
  const PlyHeader h = read_ply_header(path, fd);
  std::uint64_t total = h.data_start;
  if (h.format == PlyHeader::Format::ascii) {
    std::uint64_t items = 0;
    for (const auto& e : h.elements) items = add_sat(items, e.count);
    return ascii(h.data_start, items, ply_line_limit(h));
  }
  for (const auto& e : h.elements) {
    std::uint64_t item = 0;
    for (const auto& p : e.properties) {
      const std::uint64_t count_size = scalar_size(list_count_type(p.count_type));
      const std::uint64_t most_items =
          p.list ? (count_size >= 4 ? 0xffffffffu : (1u << (8 * count_size)) - 1) : 1;
      item =
          add_sat(item, add_sat(p.list ? count_size : 0, mul_sat(most_items, scalar_size(p.type))));
    }
    total = add_sat(total, mul_sat(e.count, item));
  }
  return total;
}

bool check_lzf(const unsigned char* in, std::uint64_t in_len, std::uint64_t expected,
               std::string* why) {
  std::uint64_t i = 0;
  // walk_lzf never asks for more than in_len bytes: each read is checked against it first,
  // except the first control byte, which exists because in_len > 0.
  return walk_lzf([&]() -> unsigned { return i < in_len ? in[i++] : 0; }, in_len, expected, why);
}

InputShape check_input(const std::string& path, int fd, bool ply, std::uint64_t file_size,
                       Coordinates* xyz, RowValues* rows) {
  return ply ? check_ply(path, fd, file_size, xyz, rows)
             : check_pcd(path, fd, file_size, xyz, rows);
}

}  // namespace pcnn::io_detail
