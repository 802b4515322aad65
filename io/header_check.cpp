#include "header_check.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "pcnn/io.hpp"

namespace pcnn::io_detail {
namespace {

constexpr std::size_t kMaxHeaderLines = 4096;
constexpr std::size_t kMaxLineLength = 1 << 16;

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw input_error("cannot read cloud '" + path + "': " + why);
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream is(line);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

std::uint64_t parse_count(const std::string& path, const std::string& what,
                          const std::string& text) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    bad(path, what + " is not a valid count ('" + text + "')");
  return std::stoull(text);
}

// Reads header lines until `on_line` returns true; returns the byte offset after that line.
template <class F>
std::uint64_t read_header(const std::string& path, F&& on_line, const char* format) {
  std::ifstream is(path, std::ios::binary);
  if (!is) bad(path, std::string("cannot open it: ") + std::strerror(errno));
  std::string line;
  std::uint64_t consumed = 0;  // bytes up to and including the current line's newline
  for (std::size_t n = 0; n < kMaxHeaderLines; ++n) {
    line.clear();
    char ch;
    bool newline = false;
    while (is.get(ch)) {
      ++consumed;
      if (ch == '\n') {
        newline = true;
        break;
      }
      if (line.size() >= kMaxLineLength)
        bad(path, std::string("not a ") + format + " header (line too long)");
      line.push_back(ch);
    }
    if (!newline && line.empty()) break;
    // (A trailing '\r' stays: callers see the line as the readers do.)
    if (on_line(line, n)) return consumed;
    if (!newline) break;
  }
  bad(path, std::string("the ") + format + " header has no end (" +
                (std::string(format) == "PCD" ? "DATA" : "end_header") + " line missing)");
}

bool is_number(const std::string& t) {
  if (t.empty()) return false;
  char* end = nullptr;
  std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

// Checks ascii rows from `offset`: `rows` lines of `columns` numbers each (columns < 0: any
// count), then nothing but blank lines. PCL's ascii readers take a short line or a word for a
// number without complaint, which would give silently wrong coordinates.
void check_ascii_rows(const std::string& path, std::uint64_t offset, std::uint64_t rows,
                      long columns, const std::string& what) {
  std::ifstream is(path, std::ios::binary);
  is.seekg(static_cast<std::streamoff>(offset));
  std::string line;
  std::uint64_t row = 0;
  while (row < rows && std::getline(is, line)) {
    const auto w = words(line);
    if (w.empty()) continue;  // blank lines are skipped by the readers too
    if (columns >= 0 && static_cast<long>(w.size()) != columns)
      bad(path, what + " row " + std::to_string(row) + " has " + std::to_string(w.size()) +
                    " values, expected " + std::to_string(columns));
    for (const auto& t : w)
      if (!is_number(t))
        bad(path,
            what + " row " + std::to_string(row) + ": '" + t.substr(0, 40) + "' is not a number");
    ++row;
  }
  if (row < rows)
    bad(path, what + " has " + std::to_string(row) + " rows, the header promises " +
                  std::to_string(rows) + " (truncated file?)");
}

// PCL's PCD reader keeps reading header lines after DATA: it skips empty lines and comments and
// parses any line whose first word starts with a header keyword, until some other line. Binary
// data that happens to begin like "COLUMNS..." is then parsed as a header (found by fuzzing:
// PCL went on to allocate a string of terabytes). Reject what PCL would misread.
void check_after_data(const std::string& path, std::uint64_t data_start) {
  static const char* keywords[] = {"VERSION", "FIELDS", "COLUMNS",   "SIZE",   "TYPE", "COUNT",
                                   "WIDTH",   "HEIGHT", "VIEWPOINT", "POINTS", "DATA"};
  std::ifstream is(path, std::ios::binary);
  is.seekg(static_cast<std::streamoff>(data_start));
  for (std::uint64_t n = 0;; ++n) {
    std::string head;  // the line's first word, after leading white space (as >> reads it)
    char ch;
    bool word_done = false, any = false;
    while (is.get(ch) && ch != '\n') {
      any = true;
      const bool space = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
      if (space) {
        if (!head.empty()) word_done = true;
      } else if (!word_done && head.size() < 16) {
        head.push_back(ch);
      }
    }
    if (!any && !is) return;       // end of file
    if (head.empty()) continue;    // an empty line: PCL skips it
    if (head[0] == '#') continue;  // a comment: PCL skips it
    for (const char* k : keywords)
      if (head.compare(0, std::strlen(k), k) == 0)
        bad(path, "the data after the DATA line begins like a header line ('" + head +
                      "...'), which PCL would read as one");
    return;
  }
}

}  // namespace

HeaderInfo check_pcd_header(const std::string& path, std::uint64_t file_size) {
  std::map<std::string, std::vector<std::string>> keys;
  static const std::set<std::string> known = {"VERSION",   "FIELDS", "COLUMNS", "SIZE",
                                              "TYPE",      "COUNT",  "WIDTH",   "HEIGHT",
                                              "VIEWPOINT", "POINTS", "DATA"};
  const std::uint64_t data_start = read_header(
      path,
      [&](const std::string& line, std::size_t n) {
        if (line.empty()) return false;  // PCL skips empty lines...
        const auto w = words(line);
        // ...but stops reading the header at a blank one ("\r", spaces), and then crashes on
        // the header it has not read (found by fuzzing).
        if (w.empty())
          bad(path, "not a PCD header: line " + std::to_string(n + 1) +
                        " is blank but not empty (PCL stops reading the header there)");
        if (w[0][0] == '#') return false;
        if (!known.count(w[0]))
          bad(path, "not a PCD header: line " + std::to_string(n + 1) + " starts with '" +
                        w[0].substr(0, 40) + "'");
        if (keys.count(w[0])) bad(path, "PCD header repeats " + w[0]);
        keys[w[0]] = std::vector<std::string>(w.begin() + 1, w.end());
        return w[0] == "DATA";
      },
      "PCD");

  for (const char* k : {"FIELDS", "SIZE", "TYPE", "WIDTH", "POINTS", "DATA"})
    if (!keys.count(k) && !(std::string(k) == "FIELDS" && keys.count("COLUMNS")))
      bad(path, std::string("PCD header has no ") + k + " line");
  const auto& fields = keys.count("FIELDS") ? keys["FIELDS"] : keys["COLUMNS"];
  const auto& sizes = keys["SIZE"];
  const auto& types = keys["TYPE"];
  const std::size_t nf = fields.size();
  if (nf == 0) bad(path, "PCD header lists no fields");
  if (sizes.size() != nf || types.size() != nf)
    bad(path, "PCD header has " + std::to_string(nf) + " FIELDS but " +
                  std::to_string(sizes.size()) + " SIZE and " + std::to_string(types.size()) +
                  " TYPE entries");
  std::vector<std::string> counts =
      keys.count("COUNT") ? keys["COUNT"] : std::vector<std::string>(nf, "1");
  if (counts.size() != nf)
    bad(path, "PCD header has " + std::to_string(nf) + " FIELDS but " +
                  std::to_string(counts.size()) + " COUNT entries");
  for (std::size_t i = 0; i < nf; ++i)
    if (std::find(fields.begin(), fields.begin() + i, fields[i]) != fields.begin() + i)
      bad(path, "field '" + fields[i].substr(0, 40) + "' appears twice");
  for (const char* axis : {"x", "y", "z"})
    if (std::find(fields.begin(), fields.end(), axis) == fields.end())
      bad(path, std::string("no '") + axis + "' field (x, y and z are required)");
  std::uint64_t point_size = 0;
  for (std::size_t i = 0; i < nf; ++i) {
    const std::string& s = sizes[i];
    const std::string& t = types[i];
    const bool ok = (t == "F" && (s == "4" || s == "8")) ||
                    ((t == "I" || t == "U") && (s == "1" || s == "2" || s == "4" || s == "8"));
    if (!ok) bad(path, "field '" + fields[i] + "' has unsupported TYPE " + t + " SIZE " + s);
    const std::uint64_t c = parse_count(path, "COUNT of '" + fields[i] + "'", counts[i]);
    if (c == 0 || c > (1u << 20)) bad(path, "field '" + fields[i] + "' has COUNT " + counts[i]);
    point_size += c * std::stoull(s);
  }
  if (keys["WIDTH"].size() != 1 || keys["POINTS"].size() != 1)
    bad(path, "PCD WIDTH and POINTS take one number each");
  const std::uint64_t width = parse_count(path, "WIDTH", keys["WIDTH"][0]);
  const std::uint64_t height = keys.count("HEIGHT") && !keys["HEIGHT"].empty()
                                   ? parse_count(path, "HEIGHT", keys["HEIGHT"][0])
                                   : 1;
  const std::uint64_t points = parse_count(path, "POINTS", keys["POINTS"][0]);
  if (width > 0xffffffffull || height > 0xffffffffull)
    bad(path, "WIDTH or HEIGHT does not fit in 32 bits");
  if (width * height != points)  // both < 2^32: the 64-bit product cannot wrap
    bad(path, "WIDTH x HEIGHT (" + std::to_string(width) + " x " + std::to_string(height) +
                  ") does not equal POINTS (" + std::to_string(points) + ")");
  if (keys["DATA"].size() != 1) bad(path, "PCD DATA takes one word");
  const std::string& data = keys["DATA"][0];
  check_after_data(path, data_start);
  const std::uint64_t body = file_size - std::min(file_size, data_start);
  if (data == "ascii") {
    // At least one byte (a digit or "nan") and a separator per point.
    if (points > body)
      bad(path, "POINTS is " + std::to_string(points) + " but the ascii data has only " +
                    std::to_string(body) + " bytes");
    long columns = 0;
    for (const auto& c : counts) columns += static_cast<long>(std::stoull(c));
    check_ascii_rows(path, data_start, points, columns, "ascii data");
  } else if (data == "binary") {
    if (points > body / point_size || points * point_size > body)
      bad(path, "POINTS x point size (" + std::to_string(points) + " x " +
                    std::to_string(point_size) + " bytes) is more than the " +
                    std::to_string(body) + " bytes of binary data (truncated file?)");
  } else if (data == "binary_compressed") {
    if (body < 8) bad(path, "binary_compressed data is missing its size header");
    std::ifstream is(path, std::ios::binary);
    is.seekg(static_cast<std::streamoff>(data_start));
    std::uint32_t sz[2] = {0, 0};
    is.read(reinterpret_cast<char*>(sz), 8);
    if (!is) bad(path, "binary_compressed data is missing its size header");
    if (sz[0] > body - 8)
      bad(path, "binary_compressed size header says " + std::to_string(sz[0]) +
                    " compressed bytes, but only " + std::to_string(body - 8) + " follow");
    if (points > 0 && point_size * points != sz[1])
      bad(path, "binary_compressed size header says " + std::to_string(sz[1]) +
                    " uncompressed bytes, but POINTS x point size is " +
                    std::to_string(points * point_size));
  } else {
    bad(path, "unknown PCD DATA kind '" + data.substr(0, 40) + "'");
  }
  return {points};
}

HeaderInfo check_ply_header(const std::string& path, std::uint64_t file_size) {
  static const std::map<std::string, int> type_size = {
      {"char", 1},  {"uchar", 1},  {"short", 2},   {"ushort", 2}, {"int", 4},   {"uint", 4},
      {"float", 4}, {"double", 8}, {"int8", 1},    {"uint8", 1},  {"int16", 2}, {"uint16", 2},
      {"int32", 4}, {"uint32", 4}, {"float32", 4}, {"float64", 8}};
  struct Element {
    std::string name;
    std::uint64_t count = 0;
    std::uint64_t size = 0;  // bytes per item when fixed
    bool has_list = false;
    std::set<std::string> props;
  };
  std::vector<Element> elements;
  std::string format;
  const std::uint64_t data_start = read_header(
      path,
      [&](const std::string& line, std::size_t n) {
        const auto w = words(line);
        if (n == 0) {
          if (w.size() != 1 || w[0] != "ply") bad(path, "not a PLY file (no 'ply' line first)");
          return false;
        }
        if (w.empty() || w[0] == "comment" || w[0] == "obj_info") return false;
        if (w[0] == "end_header") return true;
        if (w[0] == "format") {
          if (w.size() != 3 ||
              (w[1] != "ascii" && w[1] != "binary_little_endian" && w[1] != "binary_big_endian"))
            bad(path, "unknown PLY format line '" + line.substr(0, 80) + "'");
          format = w[1];
        } else if (w[0] == "element") {
          if (w.size() != 3) bad(path, "malformed PLY element line '" + line.substr(0, 80) + "'");
          elements.emplace_back();
          elements.back().name = w[1];
          elements.back().count = parse_count(path, "element " + w[1] + " count", w[2]);
        } else if (w[0] == "property") {
          if (elements.empty()) bad(path, "PLY property before any element");
          Element& e = elements.back();
          if (w.size() == 5 && w[1] == "list") {
            if (!type_size.count(w[2]) || !type_size.count(w[3]))
              bad(path, "PLY list property '" + w[4] + "' has an unknown type");
            e.has_list = true;
            e.props.insert(w[4]);
          } else if (w.size() == 3) {
            auto it = type_size.find(w[1]);
            if (it == type_size.end())
              bad(path, "PLY property '" + w[2] + "' has unknown type '" + w[1] + "'");
            if (!e.props.insert(w[2]).second)
              bad(path, "PLY property '" + w[2] + "' appears twice in element " + e.name);
            e.size += it->second;
          } else {
            bad(path, "malformed PLY property line '" + line.substr(0, 80) + "'");
          }
        } else {
          bad(path, "unknown PLY header line '" + line.substr(0, 80) + "'");
        }
        return false;
      },
      "PLY");
  if (format.empty()) bad(path, "PLY header has no format line");
  const Element* vertex = nullptr;
  for (const Element& e : elements)
    if (e.name == "vertex") vertex = &e;
  if (!vertex) bad(path, "PLY file has no vertex element");
  for (const char* p : {"x", "y", "z"})
    if (!vertex->props.count(p))
      bad(path, std::string("PLY vertex element has no '") + p + "' property");
  if (vertex->has_list) bad(path, "PLY vertex element has a list property (not supported)");
  const std::uint64_t body = file_size - std::min(file_size, data_start);
  if (format == "ascii") {
    if (vertex->count > body)
      bad(path, "element vertex count " + std::to_string(vertex->count) +
                    " is more than the ascii data could hold");
    std::uint64_t before = 0;  // rows of the elements stored ahead of the vertices
    bool known = true;         // false when a list makes those rows' lengths unknown
    for (const Element& e : elements) {
      if (&e == vertex) break;
      known = known && !e.has_list;
      before += e.count;
    }
    std::ifstream is(path, std::ios::binary);
    is.seekg(static_cast<std::streamoff>(data_start));
    std::string skip;
    std::uint64_t offset = data_start;
    for (std::uint64_t r = 0; r < before && std::getline(is, skip); ++r) offset += skip.size() + 1;
    check_ascii_rows(path, offset, vertex->count,
                     known ? static_cast<long>(vertex->props.size()) : -1, "vertex");
  } else {
    // Elements are stored in header order; lists make later sizes unknowable, so sum up to the
    // first element with a list.
    std::uint64_t need = 0;
    for (const Element& e : elements) {
      if (e.has_list) break;
      if (e.size > 0 && e.count > (std::numeric_limits<std::uint64_t>::max() - need) / e.size)
        bad(path, "element counts overflow");
      need += e.count * e.size;
    }
    if (need > body)
      bad(path, "the header promises " + std::to_string(need) + " bytes of binary data but " +
                    std::to_string(body) + " follow (truncated file?)");
  }
  return {vertex->count};
}

}  // namespace pcnn::io_detail
