// pcnn's own reader (x, y, z gathered by the input gate) against PCL's, through the one loader:
// every file either loads to the same Cloud on both, byte for byte, or fails on both with the
// same error type and message. Files: the bad-input suite's cases (tests/bad_inputs.sh leaves
// them in PCNN_BAD_INPUT_CASES), fuzz/seeds, fuzz/regressions, data/, and clouds generated here
// (every coordinate type, NaN and infinite rows, organized, extra fields around x/y/z, ascii and
// binary, .pcd and .ply, georeferenced doubles no float offset holds, coordinates too far apart).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "../io/cloud_reader.hpp"
#include "../io/coordinate_gather.hpp"
#include "../io/input_gate.hpp"
#include "../io/stored_fields.hpp"
#include "pcnn/io.hpp"

namespace pcnn {
namespace {

namespace fs = std::filesystem;
using io_detail::CloudReader;

// What one load gave: a Cloud, or an error (its type and message).
struct Outcome {
  bool ok = false;
  Cloud cloud;
  std::string error;
};

Outcome load_with(const std::string& path, CloudReader reader, const std::array<double, 3>* origin,
                  bool keep_fields = false) {
  Outcome o;
  try {
    o.cloud = io_detail::load_cloud(path, origin, keep_fields, CloudFormat::by_extension, reader);
    o.ok = true;
  } catch (const error& e) {
    o.error = std::string(typeid(e).name()) + ": " + e.what();
  }
  return o;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

::testing::AssertionResult same_cloud(const Cloud& a, const Cloud& b) {
  auto differ = [](const char* what) { return ::testing::AssertionFailure() << what << " differ"; };
  if (a.path != b.path) return differ("paths");
  if (!same_bytes(a.xyz, b.xyz)) return differ("xyz bytes");
  if (std::memcmp(a.origin.data(), b.origin.data(), sizeof a.origin) != 0)
    return differ("origin bits");
  if (a.width != b.width || a.height != b.height) return differ("width/height");
  if (a.finite != b.finite) return differ("finite counts");
  if (a.coordinate_type != b.coordinate_type)
    return ::testing::AssertionFailure()
           << "coordinate types differ: " << a.coordinate_type << " / " << b.coordinate_type;
  if (a.exact != b.exact) return differ("exact flags");
  if (!same_bytes(a.stored, b.stored)) return differ("stored bytes");
  if (a.field_names != b.field_names) return differ("field names");
  if (!a.fields != !b.fields) return differ("kept fields (one has none)");
  if (a.fields) {  // every field, as PCL's own reading gives it
    const pcl::PCLPointCloud2 &p = a.fields->cloud, &q = b.fields->cloud;
    if (p.width != q.width || p.height != q.height || p.point_step != q.point_step ||
        p.row_step != q.row_step || p.is_bigendian != q.is_bigendian)
      return differ("kept clouds' shapes");
    if (p.is_dense != q.is_dense) return differ("kept clouds' is_dense");
    if (p.fields.size() != q.fields.size()) return differ("kept clouds' field counts");
    for (std::size_t i = 0; i < p.fields.size(); ++i)
      if (p.fields[i].name != q.fields[i].name || p.fields[i].offset != q.fields[i].offset ||
          p.fields[i].datatype != q.fields[i].datatype || p.fields[i].count != q.fields[i].count)
        return differ("kept clouds' fields");
    if (!same_bytes(p.data, q.data)) return differ("kept clouds' bytes");
  }
  return ::testing::AssertionSuccess();
}

// Loads `path` through both readers (and with `origin`, when given) and compares.
// Returns whether the file loaded.
bool expect_same_outcome(const std::string& path, const std::array<double, 3>* origin = nullptr) {
  SCOPED_TRACE(path + (origin ? " (with an origin)" : ""));
  const Outcome fast = load_with(path, CloudReader::fastest, origin);
  const Outcome pcl = load_with(path, CloudReader::pcl, origin);
  EXPECT_EQ(fast.ok, pcl.ok) << "pcnn: " << fast.error << "\nPCL: " << pcl.error;
  if (fast.ok && pcl.ok) {
    EXPECT_TRUE(same_cloud(fast.cloud, pcl.cloud));
  } else if (!fast.ok && !pcl.ok) {
    EXPECT_EQ(fast.error, pcl.error);
  }
  // Every field kept (filter, smooth, normals): binary .pcd is read by pcnn, the rest by PCL.
  const Outcome fast_all = load_with(path, CloudReader::fastest, origin, true);
  const Outcome pcl_all = load_with(path, CloudReader::pcl, origin, true);
  EXPECT_EQ(fast_all.ok, pcl_all.ok) << "pcnn: " << fast_all.error << "\nPCL: " << pcl_all.error;
  if (fast_all.ok && pcl_all.ok) {
    EXPECT_TRUE(same_cloud(fast_all.cloud, pcl_all.cloud)) << "every field kept";
  } else if (!fast_all.ok && !pcl_all.ok) {
    EXPECT_EQ(fast_all.error, pcl_all.error);
  }
  return fast.ok && pcl.ok;
}

// Every .pcd / .ply file of `dir`; returns how many loaded.
int compare_folder(const fs::path& dir, int* files) {
  int loaded = 0;
  *files = 0;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".pcd" || ext == ".ply")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  const std::array<double, 3> origin = {0.5, -3.0, 1e6};
  for (const auto& p : paths) {
    ++*files;
    if (expect_same_outcome(p.string())) {
      ++loaded;
      expect_same_outcome(p.string(), &origin);
    }
  }
  return loaded;
}

TEST(LoadPaths, TheRepositorysFilesLoadTheSameOnBothReaders) {
  for (const char* sub : {"fuzz/seeds", "fuzz/regressions", "data"}) {
    int files = 0;
    const int loaded = compare_folder(fs::path(PCNN_SOURCE_DIR) / sub, &files);
    EXPECT_GT(files, 0) << sub;
    if (std::string(sub) != "fuzz/regressions") {
      EXPECT_GT(loaded, 0) << sub;
    }
  }
}

TEST(LoadPaths, TheBadInputSuitesCasesGiveTheSameCloudOrTheSameError) {
  // Left by the bad_inputs test (a CTest fixture of this one).
  const fs::path dir = PCNN_BAD_INPUT_CASES;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing: run the bad_inputs test first";
  int files = 0;
  const int loaded = compare_folder(dir, &files);
  EXPECT_GT(files, 80);  // the suite writes about a hundred cloud files
  EXPECT_GT(loaded, 10);
  EXPECT_LT(loaded, files);
}

// Writes each of `contents` to a file of `dir` (ending in `ext`), expects each to load the same on
// both readers, then removes `dir`.
void expect_each_same_outcome(const fs::path& dir, const std::string& ext,
                              const std::vector<std::string>& contents) {
  for (std::size_t i = 0; i < contents.size(); ++i) {
    const std::string path = (dir / ("literals_" + std::to_string(i) + ext)).string();
    std::ofstream(path, std::ios::binary) << contents[i];
    EXPECT_TRUE(expect_same_outcome(path)) << path;
  }
  fs::remove_all(dir);
}

// Ascii literals PCL's reader treats apart: "nan" in any case (not dense), signed NaN and
// infinities (converted, dense), integers of every width, a '_' field (skipped), first in the
// file or not: the same cloud and kept fields on both readers.
TEST(LoadPaths, AsciiLiteralsOfEveryKindKeepTheSameFields) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("pcnn_load_literals_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string head =
      "VERSION 0.7\nFIELDS x y z intensity _ label flag big\nSIZE 4 4 4 4 2 8 1 8\n"
      "TYPE F F F F U I U F\nCOUNT 1 1 1 2 1 1 1 1\nWIDTH 4\nHEIGHT 1\n"
      "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS 4\nDATA ascii\n";
  const char* bodies[] = {
      "1 2 3 NaN -nan 7 -9007199254740992 255 1e300\n4 5 6 +nan inf 8 -1 0 -2.5e-300\n"
      "7 8 9 -inf 0.1 9 12 1 nan\n1.5 2.5 3.5 3.4028234e38 -0 65535 9007199254740992 7 -0\n",
      "nan 2 3 1 2 7 5 3 4\n4 5 6 7 8 8 6 4 5\n7 8 9 1 1 9 7 5 6\n1 1 1 1 1 1 1 1 1\n",
      "inf 2 3 -nan +NaN 7 5 3 4\n4 5 6 7 8 8 6 4 5\n7 8 9 1 1 9 7 5 -inf\n1 1 1 1 1 1 1 1 1\n"};
  std::vector<std::string> files;
  for (const char* body : bodies) files.push_back(head + body);
  expect_each_same_outcome(dir, ".pcd", files);
}

// The same for an ascii .ply, whose reader (PCL's PLYReader, boost::lexical_cast per value)
// converts otherwise: every float32 / float64 value that is not finite makes the cloud not dense,
// whatever its spelling; colors are packed into rgb / rgba, a uchar intensity made a float; the
// elements after the vertices are read and dropped.
TEST(LoadPaths, AsciiPlyLiteralsOfEveryKindKeepTheSameFields) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("pcnn_load_ply_literals_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string xyz = "property float x\nproperty float y\nproperty float z\n";
  const std::string colors = "property uchar red\nproperty uchar green\nproperty uchar blue\n";
  const std::string rest =
      "property double t\nproperty char c\nproperty ushort s\nproperty int i\n"
      "property uint u\nproperty float nx\nelement face 1\n"
      "property list uchar int vertex_indices\nend_header\n";
  // Rows: x y z, then the colors (and alpha, intensity), then t c s i u nx.
  const std::pair<std::string, std::string> files[] = {
      {xyz + colors + "property uchar alpha\nproperty uchar intensity\n" + rest,  // dense
       "1 2 3 255 0 128 7 255 1e300 -128 65535 -2147483648 4294967295 1.5\n"
       "-0 +4.5 .5 0 255 1 0 0 -2.5e-300 127 0 2147483647 0 -0\n"
       "1e-45 1e17 -7 9 8 7 6 5 0.1 0 1 -1 1 3.4028234e38\n"},
      {xyz + colors + "property uchar alpha\nproperty uchar intensity\n" + rest,
       "nan 2 3 1 2 3 4 5 -nan 1 2 3 4 NaN\n4 5 6 7 8 9 10 11 inf -1 2 3 4 -inf\n"
       "+nan -inf +inf 1 1 1 1 1 1 1 1 1 1 1\n"},
      {xyz + colors + "property float intensity\n" + rest,  // one infinite double
       "1 2 3 1 2 3 4 5 6 7 8 9 10\n4 5 6 7 8 9 11 -Inf 1 2 3 4 5\n"
       "7 8 9 1 1 1 1 1 1 1 1 1 1\n"},
      {xyz + colors + "property float intensity\n" + rest,  // a NaN intensity only
       "1 2 3 1 2 3 NAN 5 6 7 8 9 10\n4 5 6 7 8 9 11 1 1 2 3 4 5\n"
       "7 8 9 1 1 1 1 1 1 1 1 1 1\n"},
      {xyz + "property float rgb\nproperty uchar intensity\n" + rest,  // float rgb, no colors
       "1 2 3 4.5e-39 200 1 2 3 4 5 6\n4 5 6 1e-40 0 1 2 3 4 5 6\n"
       "7 8 9 -0 255 1 2 3 4 5 6\n"},
  };
  std::vector<std::string> contents;
  for (const auto& [head, body] : files)
    contents.push_back("ply\nformat ascii 1.0\nelement vertex 3\n" + head + body + "3 0 1 2\n");
  expect_each_same_outcome(dir, ".ply", contents);
}

// The records of the kept fields are sized from a first reading of the header; a file that
// changed before the second promises other rows. Then the gate stores nothing (it used to write
// past the records: a file rewritten during its load crashed `filter`), and what it checks is
// refused later as changed. Records of the right size are filled.
TEST(LoadPaths, RecordsSizedForOtherRowsAreLeftUnfilled) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("pcnn_load_resized_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const bool ply : {false, true}) {
    const int n = 1000;
    std::string body;
    for (int i = 0; i < n; ++i)
      body += std::to_string(i) + " " + std::to_string(2 * i) + " " + std::to_string(-i) + "\n";
    const std::string path = (dir / (ply ? "rows.ply" : "rows.pcd")).string();
    std::ofstream(path, std::ios::binary)
        << (ply ? "ply\nformat ascii 1.0\nelement vertex 1000\nproperty float x\n"
                  "property float y\nproperty float z\nend_header\n"
                : "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n"
                  "WIDTH 1000\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS 1000\nDATA ascii\n")
        << body;
    SCOPED_TRACE(path);
    const auto size = static_cast<std::uint64_t>(fs::file_size(path));
    for (const int rows_held : {2, n}) {
      std::vector<float> records(3 * std::size_t(rows_held), -7.f);
      io_detail::RowValues rows;
      rows.data = reinterpret_cast<unsigned char*>(records.data());
      rows.point_step = 12;
      rows.rows = static_cast<std::uint64_t>(rows_held);
      rows.offset = {0, 4, 8};
      rows.type.assign(3, io_detail::Scalar::f32);
      io_detail::Coordinates xyz;
      const int fd = ::open(path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      io_detail::check_input(path, fd, ply, size, &xyz, &rows);
      ::close(fd);
      EXPECT_EQ(rows.filled, rows_held == n);
      if (rows_held == n) {
        EXPECT_EQ(records[3 * 999], 999.f);
        EXPECT_EQ(records[3 * 999 + 1], 1998.f);
        EXPECT_EQ(records[3 * 999 + 2], -999.f);
      } else {
        EXPECT_EQ(records[0], -7.f);
      }
    }
  }
  fs::remove_all(dir);
}

// ---- generated clouds ----

// A field of a generated file: its name, PCD type letter and size (PLY: the matching type).
struct Field {
  std::string name;
  char type;  // 'F', 'I' or 'U'
  int size;
  int count = 1;
};

const char* ply_type(const Field& f) {
  if (f.type == 'F') return f.size == 4 ? "float" : "double";
  static const char* ints[2][3] = {{"char", "short", "int"}, {"uchar", "ushort", "uint"}};
  return ints[f.type == 'U'][f.size == 1 ? 0 : f.size == 2 ? 1 : 2];
}

struct Generated {
  std::string name;
  bool ply = false;
  bool ascii = false;
  std::vector<Field> fields;  // x, y and z among them
  int width = 0, height = 1;
  double scale = 100, offset = 0;  // x, y, z in offset ± scale (floats) or their type's range
  int nan_every = 0;               // every n-th point gets a NaN or infinite coordinate
  bool faces = false;              // .ply: a face element (lists) after the vertices
  std::string expect_error;        // a substring of the error both readers must give
};

std::ostream& operator<<(std::ostream& os, const Generated& g) { return os << g.name; }

Generated gen(const std::string& name, std::vector<Field> fields, int width, int height = 1,
              double scale = 100, double offset = 0, int nan_every = 0) {
  Generated g;
  g.name = name;
  g.fields = std::move(fields);
  g.width = width;
  g.height = height;
  g.scale = scale;
  g.offset = offset;
  g.nan_every = nan_every;
  return g;
}

// One value of field f for point i, as a double that the field's type holds exactly.
double value_for(const Field& f, const Generated& g, std::mt19937_64& rng, std::int64_t i,
                 bool coordinate) {
  std::uniform_real_distribution<double> u(-1, 1);
  if (f.type == 'F') {
    double v = coordinate ? g.offset + g.scale * u(rng) : 10 * u(rng);
    if (coordinate && g.nan_every > 0 && i % g.nan_every == 3) {
      const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()};
      v = specials[(i / g.nan_every) % 3];
    }
    return f.size == 4 ? double(static_cast<float>(v)) : v;
  }
  const double bits = f.size == 8 ? 40 : 8.0 * f.size;  // 64-bit: within ±2^53 (ascii's limit)
  const double hi = std::pow(2.0, f.type == 'U' ? bits : bits - 1) - 1;
  const double lo = f.type == 'U' ? 0 : -hi - 1;
  std::uniform_real_distribution<double> r(lo, hi);
  return std::floor(r(rng));
}

void put_binary(std::string& out, const Field& f, double v) {
  char b[8];
  auto put = [&](auto x) {
    std::memcpy(b, &x, sizeof x);
    out.append(b, sizeof x);
  };
  if (f.type == 'F') {
    if (f.size == 4)
      put(static_cast<float>(v));
    else
      put(v);
  } else if (f.type == 'I') {
    if (f.size == 1) put(static_cast<std::int8_t>(v));
    if (f.size == 2) put(static_cast<std::int16_t>(v));
    if (f.size == 4) put(static_cast<std::int32_t>(v));
    if (f.size == 8) put(static_cast<std::int64_t>(v));
  } else {
    if (f.size == 1) put(static_cast<std::uint8_t>(v));
    if (f.size == 2) put(static_cast<std::uint16_t>(v));
    if (f.size == 4) put(static_cast<std::uint32_t>(v));
    if (f.size == 8) put(static_cast<std::uint64_t>(v));
  }
}

// The ways an ascii writer prints a value (all within the gate's grammar).
void put_ascii(std::string& out, const Field& f, double v, std::int64_t i) {
  char buf[64];
  if (f.type != 'F') {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else if (std::isnan(v)) {
    std::snprintf(buf, sizeof buf, "%s", i % 2 ? "nan" : "NaN");
  } else {
    static const char* formats[] = {"%.9g", "%.17g", "%.6e", "%g", "%+.3f"};
    const char* fmt = f.size == 4 ? formats[i % 5 == 1 ? 0 : i % 5] : formats[1];
    std::snprintf(buf, sizeof buf, fmt, v);
  }
  out += buf;
}

std::string write_generated(const Generated& g, const std::string& dir) {
  const std::string path = dir + "/" + g.name + (g.ply ? ".ply" : ".pcd");
  const std::int64_t n = std::int64_t(g.width) * g.height;
  std::string out;
  if (g.ply) {
    out = "ply\nformat " + std::string(g.ascii ? "ascii" : "binary_little_endian") +
          " 1.0\ncomment generated by test_load_paths\n";
    if (g.height > 1)
      out += "obj_info num_cols " + std::to_string(g.width) + "\nobj_info num_rows " +
             std::to_string(g.height) + "\n";
    out += "element vertex " + std::to_string(n) + "\n";
    for (const auto& f : g.fields)
      out += "property " + std::string(ply_type(f)) + " " + f.name + "\n";
    if (g.faces) out += "element face 2\nproperty list uchar int vertex_indices\n";
    out += "end_header\n";
  } else {
    std::string names, sizes, types, counts;
    for (const auto& f : g.fields) {
      names += " " + f.name;
      sizes += " " + std::to_string(f.size);
      types += std::string(" ") + f.type;
      counts += " " + std::to_string(f.count);
    }
    out = "# .PCD v0.7 - generated by test_load_paths\nVERSION 0.7\nFIELDS" + names + "\nSIZE" +
          sizes + "\nTYPE" + types + "\nCOUNT" + counts + "\nWIDTH " + std::to_string(g.width) +
          "\nHEIGHT " + std::to_string(g.height) + "\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS " +
          std::to_string(n) + "\nDATA " + (g.ascii ? "ascii" : "binary") + "\n";
  }
  std::mt19937_64 rng(std::hash<std::string>{}(g.name));
  for (std::int64_t i = 0; i < n; ++i) {
    bool first = true;
    for (const auto& f : g.fields)
      for (int c = 0; c < f.count; ++c) {
        const bool coordinate = f.name == "x" || f.name == "y" || f.name == "z";
        const double v = value_for(f, g, rng, i, coordinate);
        if (!g.ascii) {
          put_binary(out, f, v);
          continue;
        }
        if (!first) out += i % 7 == 2 ? "\t" : " ";
        first = false;
        put_ascii(out, f, v, i);
      }
    if (g.ascii) out += "\n";
  }
  if (g.ply && g.faces) {
    if (g.ascii) {
      out += "3 0 1 2\n3 2 1 0\n";
    } else {
      for (int face = 0; face < 2; ++face) {
        out += '\x03';
        for (std::int32_t v : {0, 1, 2}) out.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
  }
  std::ofstream(path, std::ios::binary) << out;
  return path;
}

class GeneratedClouds : public ::testing::TestWithParam<Generated> {};

TEST_P(GeneratedClouds, LoadTheSameOnBothReaders) {
  const Generated& g = GetParam();
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("pcnn_load_paths_" + std::to_string(getpid()) + "_" + g.name);
  fs::create_directories(dir);
  const std::string path = write_generated(g, dir.string());
  const bool loaded = expect_same_outcome(path);
  if (g.expect_error.empty()) {
    EXPECT_TRUE(loaded);
    const std::array<double, 3> origin = {0.25, -1e5, 3.0};
    expect_same_outcome(path, &origin);
    // The file is what it says: the points as many as written, the coordinate type its own.
    const Cloud c = io_detail::load_cloud(path, nullptr, false, CloudFormat::by_extension,
                                          CloudReader::fastest);
    EXPECT_EQ(c.size(), std::int64_t(g.width) * g.height);
  } else {
    const Outcome o = load_with(path, CloudReader::fastest, nullptr);
    EXPECT_NE(o.error.find(g.expect_error), std::string::npos) << o.error;
  }
  fs::remove_all(dir);
}

const Field X4{"x", 'F', 4}, Y4{"y", 'F', 4}, Z4{"z", 'F', 4};
const Field X8{"x", 'F', 8}, Y8{"y", 'F', 8}, Z8{"z", 'F', 8};

std::vector<Generated> generated_cases() {
  std::vector<Generated> out;
  for (const bool ply : {false, true})
    for (const bool ascii : {false, true}) {
      const std::string kind = std::string(ply ? "ply_" : "pcd_") + (ascii ? "ascii_" : "binary_");
      auto add = [&](Generated g) {
        g.name = kind + g.name;
        g.ply = ply;
        g.ascii = ascii;
        out.push_back(g);
      };
      add(gen("float32", {X4, Y4, Z4}, 1000));
      add(gen("float64", {X8, Y8, Z8}, 1000));
      // Many rows: several read chunks and staging blocks; a 13-byte record (chunks of records
      // that are no power of two).
      add(gen("float32_many_rows", {X4, Y4, Z4, {"label", 'U', 1}}, 70001, 1, 50));
      add(gen("nan_rows", {X4, Y4, Z4}, 500, 1, 100, 0, 5));
      // Binary records in several of the gather's blocks of ~4 MiB, each on some thread: float32
      // with NaN rows (the finite count summed over blocks), and mixed types.
      if (!ascii) {
        add(gen("float32_many_blocks", {X4, Y4, Z4, {"label", 'U', 1}}, 700001, 1, 50, 0, 13));
        add(gen("mixed_types_many_blocks", {X4, Y8, {"z", 'I', 4}}, 400000));
      }
      // Around 0.6: the float and integer centers fail on the small values, 0 is the origin (and
      // nothing moves when every point is finite).
      add(gen("float32_origin_zero", {X4, Y4, Z4}, 2000, 1, 1, 0.6));
      add(gen("float32_origin_zero_nan_rows", {X4, Y4, Z4}, 2000, 1, 1, 0.6, 9));
      add(gen("nan_rows_float64", {X8, Y8, Z8}, 500, 1, 100, 0, 7));
      // Georeferenced: float32 around 5e5 (the float center is exact); float64 with millimeters
      // (no float offset holds them: not exact, the stored doubles kept).
      add(gen("georeferenced_float32", {X4, Y4, Z4}, 800, 1, 50, 5e5));
      add(gen("georeferenced_float64", {X8, Y8, Z8}, 800, 1, 50, 5.5e6));
      add(gen("mixed_types", {X4, Y8, {"z", 'I', 4}}, 300));
      add(gen("integer_coordinates", {{"x", 'I', 2}, {"y", 'U', 1}, {"z", 'I', 4}, {"t", 'U', 4}},
              400));
      add(gen("int8_uint16", {{"x", 'I', 1}, {"y", 'U', 2}, {"z", 'U', 4}}, 300));
      if (!ply)  // PLY has no 64-bit integers
        add(gen("int64_coordinates", {{"x", 'I', 8}, {"y", 'U', 8}, Z8}, 300));
      // x, y, z among other fields, not first, not adjacent.
      Generated extras = gen("extra_fields", {}, 600, 1, 20, 0, 11);
      if (ply)
        extras.fields = {{"intensity", 'U', 2}, Y4, {"red", 'U', 1}, {"green", 'U', 1},
                         {"blue", 'U', 1},      X4, {"nx", 'F', 4},  {"ny", 'F', 4},
                         {"nz", 'F', 4},        Z4};
      else
        extras.fields = {{"intensity", 'U', 2}, Y4, {"rgb", 'F', 4},  {"_", 'U', 1, 3}, X4,
                         {"hist", 'F', 4, 5},   Z4, {"label", 'I', 8}};
      add(extras);
      if (ply) {
        // What PCL's PLY reader converts: colors with alpha packed into "rgba", a uchar
        // intensity made float, normals renamed; and the same without alpha, around NaN rows.
        add(gen("colors_alpha_intensity",
                {X4,
                 Y4,
                 Z4,
                 {"red", 'U', 1},
                 {"green", 'U', 1},
                 {"blue", 'U', 1},
                 {"alpha", 'U', 1},
                 {"intensity", 'U', 1},
                 {"nx", 'F', 4},
                 {"ny", 'F', 4},
                 {"nz", 'F', 4}},
                3000, 1, 50, 0, 7));
        add(gen("colors_double",
                {{"diffuse_red", 'U', 1},
                 {"diffuse_green", 'U', 1},
                 {"diffuse_blue", 'U', 1},
                 X8,
                 Y8,
                 Z8,
                 {"t", 'F', 8}},
                200000, 1, 50, 0, 11));
        Generated faces = gen("with_faces", {X4, Y4, Z4}, 50);
        faces.faces = true;
        add(faces);
      }
      add(gen("organized", {X4, Y4, Z4, {"intensity", 'F', 4}}, 40, 25, 10, 0, 9));
      add(gen("one_point", {X8, Y8, Z8}, 1));
      // Finite coordinates 2e19 apart: no origin keeps them within 1e18 (the same error).
      Generated far = gen("too_far_apart", {X4, Y4, Z4}, 50, 1, 2e19);
      far.expect_error = "lies more than 1e18 from the origin";
      add(far);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Readers, GeneratedClouds, ::testing::ValuesIn(generated_cases()),
                         [](const ::testing::TestParamInfo<Generated>& i) { return i.param.name; });

}  // namespace
}  // namespace pcnn
