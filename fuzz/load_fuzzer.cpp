// libFuzzer target: pcnn's cloud loader (the input gate, then PCL) on arbitrary bytes.
// Built twice, with PCNN_FUZZ_EXT ".pcd" and ".ply". Any pcnn::error is a clean rejection;
// a crash, a sanitizer report or another exception is a bug. And a differential oracle: for
// every file the gate accepts, x, y and z are decoded here, independently of PCL, from the
// header the gate read (ascii, binary, compressed; PLY element walk, byte order, range grid),
// and PCL's values must be the same, bit for bit — "accepted" must mean "read as it says".
// And between pcnn's two readers: the loader's own (x, y, z gathered by the gate) and PCL's must
// give the same Cloud byte for byte, or the same error.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <typeinfo>
#include <vector>

#include "../io/cloud_reader.hpp"
#include "../io/header_check.hpp"
#include "../io/number_grammar.hpp"
#include "../io/stored_fields.hpp"
#include "pcnn/io.hpp"

namespace {

using namespace pcnn::io_detail;

std::string scratch_path() {
  static const std::string path = [] {
    std::string p = "/tmp/pcnn-fuzz-" + std::to_string(getpid()) + PCNN_FUZZ_EXT;
    return p;
  }();
  return path;
}

[[noreturn]] void differ(const char* what, std::uint64_t point, int axis, double ours, double pcl) {
  std::fprintf(stderr, "%s: point %llu axis %d: decoded %.17g, PCL %.17g\n", what,
               static_cast<unsigned long long>(point), axis, ours, pcl);
  std::abort();
}

double as_double(const unsigned char* p, Scalar t, bool swap) {
  unsigned char b[8];
  const std::uint32_t n = scalar_size(t);
  std::memcpy(b, p, n);
  if (swap)
    for (std::uint32_t i = 0; i < n / 2; ++i) std::swap(b[i], b[n - 1 - i]);
  auto get = [&](auto v) {
    std::memcpy(&v, b, sizeof v);
    return static_cast<double>(v);
  };
  switch (t) {
    case Scalar::i8:
      return get(std::int8_t{});
    case Scalar::u8:
      return get(std::uint8_t{});
    case Scalar::i16:
      return get(std::int16_t{});
    case Scalar::u16:
      return get(std::uint16_t{});
    case Scalar::i32:
      return get(std::int32_t{});
    case Scalar::u32:
      return get(std::uint32_t{});
    case Scalar::i64:
      return get(std::int64_t{});
    case Scalar::u64:
      return get(std::uint64_t{});
    case Scalar::f32:
      return get(float{});
    default:
      return get(double{});
  }
}

// The value a field of type t holds for a decoded value v (as PCL stores it).
double stored(double v, Scalar t) {
  if (t == Scalar::f32) return static_cast<float>(v);
  return v;
}

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t s = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > s) out.push_back(line.substr(s, i - s));
  }
  return out;
}

// Lines of [begin, end) without their endings.
std::vector<std::string> lines_of(const std::uint8_t* begin, const std::uint8_t* end) {
  std::vector<std::string> out;
  const auto* p = begin;
  while (p < end) {
    const auto* nl = static_cast<const std::uint8_t*>(std::memchr(p, '\n', end - p));
    const auto* stop = nl ? nl : end;
    std::string l(reinterpret_cast<const char*>(p), stop - p);
    if (!l.empty() && l.back() == '\r') l.pop_back();
    out.push_back(l);
    p = nl ? nl + 1 : end;
  }
  return out;
}

double number(const std::string& token, Scalar t, Dialect dialect) {
  Number v;
  if (!check_number(token, t, dialect, &v).empty()) std::abort();  // the gate accepted it
  return is_integer(t) ? static_cast<double>(v.i) : v.f;
}

std::vector<std::uint8_t> lzf_decode(const std::uint8_t* in, std::size_t n, std::size_t out_len) {
  std::vector<std::uint8_t> out;
  out.reserve(out_len);
  std::size_t i = 0;
  while (i < n) {
    unsigned ctrl = in[i++];
    if (ctrl < 32) {
      out.insert(out.end(), in + i, in + i + ctrl + 1);
      i += ctrl + 1;
    } else {
      std::size_t len = ctrl >> 5;
      if (len == 7) len += in[i++];
      const std::size_t back = ((ctrl & 31) << 8) + in[i++] + 1;
      for (std::size_t k = 0; k < len + 2; ++k) out.push_back(out[out.size() - back]);
    }
  }
  return out;
}

struct Decoded {
  std::vector<std::array<double, 3>> xyz;  // per point of the cloud, as the file says
  Scalar type[3];
};

Decoded decode_pcd(const std::string& path, const std::uint8_t* data, std::size_t size) {
  const int fd = open(path.c_str(), O_RDONLY);
  const PcdHeader h = read_pcd_header(path, fd);
  close(fd);
  Decoded d;
  d.xyz.resize(h.points);
  std::size_t column[3], offset[3], block[3];
  std::size_t col = 0, off = 0, packed = 0;
  for (const auto& f : h.fields) {
    for (int a = 0; a < 3; ++a)
      if (f.name == std::string(1, "xyz"[a])) {
        column[a] = col;
        offset[a] = off;
        block[a] = packed;
        d.type[a] = f.type;
      }
    col += f.count;
    off += f.count * scalar_size(f.type);
    packed += f.count * scalar_size(f.type) * h.points;
  }
  const std::uint8_t* body = data + h.data_start;
  if (h.data == PcdHeader::Data::ascii) {
    const auto rows = lines_of(body, data + size);
    for (std::uint64_t i = 0; i < h.points; ++i) {
      const auto v = split(rows[i]);
      for (int a = 0; a < 3; ++a)
        d.xyz[i][a] = stored(number(v[column[a]], d.type[a], Dialect::pcd), d.type[a]);
    }
  } else if (h.data == PcdHeader::Data::binary) {
    for (std::uint64_t i = 0; i < h.points; ++i)
      for (int a = 0; a < 3; ++a)
        d.xyz[i][a] = as_double(body + i * h.point_size + offset[a], d.type[a], false);
  } else {
    std::uint32_t compressed;
    std::memcpy(&compressed, body, 4);
    const auto raw = lzf_decode(body + 8, compressed, h.points * h.point_size);
    for (std::uint64_t i = 0; i < h.points; ++i)  // fields one after the other (SoA)
      for (int a = 0; a < 3; ++a)
        d.xyz[i][a] = as_double(&raw[block[a] + i * scalar_size(d.type[a])], d.type[a], false);
  }
  return d;
}

Decoded decode_ply(const std::string& path, const std::uint8_t* data, std::size_t size) {
  const int fd = open(path.c_str(), O_RDONLY);
  const PlyHeader h = read_ply_header(path, fd);
  close(fd);
  const bool ascii = h.format == PlyHeader::Format::ascii;
  const bool swap = h.format == PlyHeader::Format::binary_big_endian;
  std::vector<std::array<double, 3>> vertices;
  std::vector<std::int64_t> cells;  // range_grid: the vertex of each cell, -1 for none
  bool grid = false;
  Scalar types[3] = {Scalar::f32, Scalar::f32, Scalar::f32};
  const std::uint8_t* p = data + h.data_start;
  std::vector<std::string> rows;
  std::size_t row = 0;
  if (ascii) rows = lines_of(p, data + size);
  auto read = [&](Scalar t) {
    const double v = as_double(p, t, swap);
    p += scalar_size(t);
    return v;
  };
  for (const auto& e : h.elements) {
    const bool is_vertex = e.name == "vertex", is_grid = e.name == "range_grid";
    grid = grid || is_grid;
    for (std::uint64_t item = 0; item < e.count; ++item) {
      std::vector<std::string> v;
      std::size_t t = 0;
      if (ascii) v = split(rows[row++]);
      std::array<double, 3> xyz{};
      std::int64_t cell = -1;
      for (const auto& prop : e.properties) {
        if (prop.list) {
          const Scalar ct = prop.count_type == Scalar::i32 ? Scalar::u32 : prop.count_type;
          const auto n =
              static_cast<std::uint64_t>(ascii ? number(v[t++], ct, Dialect::ply) : read(ct));
          for (std::uint64_t k = 0; k < n; ++k) {
            const double x = ascii ? number(v[t++], prop.type, Dialect::ply) : read(prop.type);
            if (is_grid && k == 0) cell = static_cast<std::int64_t>(x);
          }
          continue;
        }
        const double x = ascii ? number(v[t++], prop.type, Dialect::ply) : read(prop.type);
        for (int a = 0; a < 3; ++a)
          if (is_vertex && prop.name == std::string(1, "xyz"[a])) {
            xyz[a] = stored(x, prop.type);
            types[a] = prop.type;
          }
      }
      if (is_vertex) vertices.push_back(xyz);
      if (is_grid) cells.push_back(cell);
    }
  }
  Decoded d;
  for (int a = 0; a < 3; ++a) d.type[a] = types[a];
  if (grid && cells.size() != vertices.size()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (std::int64_t c : cells)
      d.xyz.push_back(c < 0 ? std::array<double, 3>{nan, nan, nan} : vertices[c]);
  } else {
    d.xyz = vertices;
  }
  return d;
}

void check_against_pcl(const std::string& path, const std::uint8_t* data, std::size_t size,
                       const pcnn::Cloud& c) {
  const bool ply = std::string(PCNN_FUZZ_EXT) == ".ply";
  const Decoded d = ply ? decode_ply(path, data, size) : decode_pcd(path, data, size);
  if (static_cast<std::int64_t>(d.xyz.size()) != c.size())
    differ("point count", 0, 0, double(d.xyz.size()), double(c.size()));
  if (c.size() == 0) return;
  const pcl::PCLPointCloud2& pc = c.fields->cloud;
  for (int a = 0; a < 3; ++a) {
    const pcl::PCLPointField* f = nullptr;
    for (const auto& field : pc.fields)
      if (field.name == std::string(1, "xyz"[a])) f = &field;
    if (!f) std::abort();
    for (std::int64_t i = 0; i < c.size(); ++i) {
      const double theirs =
          as_double(&pc.data[i * pc.point_step + f->offset], d.type[a], /*swap=*/false);
      if (!same(d.xyz[i][a], theirs)) differ(PCNN_FUZZ_EXT, i, a, d.xyz[i][a], theirs);
    }
  }
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

[[noreturn]] void readers_differ(const char* what) {
  std::fprintf(stderr, "pcnn's reader and PCL's differ: %s\n", what);
  std::abort();
}

// pcnn's own reader (keep_fields false) against the cloud PCL gave (`pcl`, or its error).
void check_readers(const std::string& path, const pcnn::Cloud* pcl, const std::string& pcl_error) {
  pcnn::Cloud own;
  std::string own_error;
  try {
    own = pcnn::io_detail::load_cloud(path, nullptr, false, pcnn::CloudFormat::by_extension,
                                      pcnn::io_detail::CloudReader::fastest);
  } catch (const pcnn::error& e) {
    own_error = std::string(typeid(e).name()) + ": " + e.what();
  }
  if (!pcl) {
    if (own_error != pcl_error)
      readers_differ(("errors: '" + own_error + "' / '" + pcl_error + "'").c_str());
    return;
  }
  if (!own_error.empty()) readers_differ(("pcnn's failed: " + own_error).c_str());
  if (!same_bytes(own.xyz, pcl->xyz)) readers_differ("xyz");
  if (std::memcmp(own.origin.data(), pcl->origin.data(), sizeof own.origin) != 0)
    readers_differ("origin");
  if (own.width != pcl->width || own.height != pcl->height) readers_differ("shape");
  if (own.finite != pcl->finite || own.exact != pcl->exact) readers_differ("finite or exact");
  if (own.coordinate_type != pcl->coordinate_type) readers_differ("coordinate type");
  if (!same_bytes(own.stored, pcl->stored)) readers_differ("stored");
  if (own.field_names != pcl->field_names) readers_differ("field names");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  pcnn::Cloud c;
  try {
    c = pcnn::load_cloud(path);  // every field kept: PCL reads the file
  } catch (const pcnn::error& e) {
    check_readers(path, nullptr, std::string(typeid(e).name()) + ": " + e.what());
    return 0;
  }
  check_readers(path, &c, "");
  if (c.xyz.size() != static_cast<std::size_t>(c.size()) * 3) std::abort();
  check_against_pcl(path, data, size, c);
  return 0;
}
