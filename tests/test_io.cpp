// io: every supported format and coordinate type round-trips; bad files give clear errors.
#include <gtest/gtest.h>
#include <pcl/PCLPointCloud2.h>
#include <pcl/io/pcd_io.h>
#include <pcl/io/ply_io.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>

#include "pcnn/io.hpp"

namespace pcnn {
namespace {

namespace fs = std::filesystem;

// A scratch folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (auto& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    dir_ = fs::path(::testing::TempDir()) / ("pcnn_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string operator/(const std::string& f) const { return (dir_ / f).string(); }

 private:
  fs::path dir_;
};

// Points with georeferenced magnitudes, an extra field, and one NaN point.
std::vector<std::array<double, 4>> sample_points(int n) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-40, 40);
  std::vector<std::array<double, 4>> pts;
  for (int i = 0; i < n; ++i)
    pts.push_back({4.5e5 + u(rng), 5.5e6 + u(rng), 80 + u(rng), double(i)});
  pts[n / 2][1] = std::numeric_limits<double>::quiet_NaN();
  return pts;
}

enum class Format { pcd_ascii, pcd_binary, pcd_compressed, ply_ascii, ply_le, ply_be };
const char* name(Format f) {
  const char* names[] = {"pcd_ascii", "pcd_binary",    "pcd_binary_compressed",
                         "ply_ascii", "ply_binary_le", "ply_binary_be"};
  return names[static_cast<int>(f)];
}

struct FormatCase {
  Format format;
  bool doubles;
};
std::ostream& operator<<(std::ostream& os, const FormatCase& c) {
  return os << name(c.format) << (c.doubles ? " float64" : " float32");
}

void write_pcd(const std::string& path, const std::vector<std::array<double, 4>>& pts, bool doubles,
               Format f) {
  pcl::PCLPointCloud2 pc;
  const int sz = doubles ? 8 : 4;
  const char* names[] = {"x", "y", "z", "intensity"};
  for (int a = 0; a < 4; ++a) {
    pcl::PCLPointField field;
    field.name = names[a];
    field.offset = a * sz;
    field.datatype = doubles ? pcl::PCLPointField::FLOAT64 : pcl::PCLPointField::FLOAT32;
    field.count = 1;
    pc.fields.push_back(field);
  }
  pc.width = static_cast<std::uint32_t>(pts.size());
  pc.height = 1;
  pc.point_step = 4 * sz;
  pc.row_step = pc.point_step * pc.width;
  pc.data.resize(pc.row_step);
  for (std::size_t i = 0; i < pts.size(); ++i)
    for (int a = 0; a < 4; ++a) {
      std::uint8_t* dst = &pc.data[i * pc.point_step + a * sz];
      if (doubles) {
        std::memcpy(dst, &pts[i][a], 8);
      } else {
        const float v = static_cast<float>(pts[i][a]);
        std::memcpy(dst, &v, 4);
      }
    }
  pcl::PCDWriter w;
  int rc = f == Format::pcd_ascii
               ? w.writeASCII(path, pc, Eigen::Vector4f::Zero(), Eigen::Quaternionf::Identity(), 17)
           : f == Format::pcd_binary ? w.writeBinary(path, pc)
                                     : w.writeBinaryCompressed(path, pc);
  ASSERT_EQ(rc, 0);
}

template <class T>
void put(std::ostream& os, T v, bool big_endian) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if (big_endian) std::reverse(b, b + sizeof(T));
  os.write(b, sizeof(T));
}

void write_ply(const std::string& path, const std::vector<std::array<double, 4>>& pts, bool doubles,
               Format f) {
  std::ofstream os(path, std::ios::binary);
  const char* fmt = f == Format::ply_ascii ? "ascii"
                    : f == Format::ply_le  ? "binary_little_endian"
                                           : "binary_big_endian";
  const char* type = doubles ? "double" : "float";
  os << "ply\nformat " << fmt << " 1.0\ncomment pcnn test\nelement vertex " << pts.size() << "\n";
  for (const char* p : {"x", "y", "z", "intensity"}) os << "property " << type << " " << p << "\n";
  os << "end_header\n";
  os.precision(17);
  for (const auto& p : pts) {
    for (int a = 0; a < 4; ++a) {
      if (f == Format::ply_ascii) {
        const double v = doubles ? p[a] : double(float(p[a]));
        if (std::isnan(v))
          os << "nan";
        else
          os << v;
        os << (a == 3 ? "\n" : " ");
      } else if (doubles) {
        put<double>(os, p[a], f == Format::ply_be);
      } else {
        put<float>(os, static_cast<float>(p[a]), f == Format::ply_be);
      }
    }
  }
}

class RoundTrip : public ::testing::TestWithParam<FormatCase> {};

TEST_P(RoundTrip, CoordinatesSurviveInTheirStoredPrecision) {
  const FormatCase c = GetParam();
  TempDir tmp;
  const bool ply = c.format >= Format::ply_ascii;
  const std::string path = tmp / (ply ? "cloud.ply" : "cloud.pcd");
  const auto pts = sample_points(300);
  if (ply)
    write_ply(path, pts, c.doubles, c.format);
  else
    write_pcd(path, pts, c.doubles, c.format);

  const Cloud cloud = load_cloud(path);
  ASSERT_EQ(cloud.size(), 300);
  EXPECT_EQ(cloud.finite, 299);
  EXPECT_EQ(cloud.coordinate_type, c.doubles ? "float64" : "float32");
  EXPECT_EQ(cloud.height, 1u);
  for (int i = 0; i < 300; ++i) {
    for (int a = 0; a < 3; ++a) {
      const float v = cloud.xyz[3 * i + a];
      if (i == 150) {
        EXPECT_TRUE(std::isnan(v));
        continue;
      }
      const double stored = c.doubles ? pts[i][a] : double(float(pts[i][a]));
      // Re-centered coordinates are within 40 m of the origin: float keeps them to ~4 um,
      // where float coordinates at 5.5e6 m would only keep 0.5 m.
      ASSERT_NEAR(double(v) + cloud.origin[a], stored, 1e-5) << "point " << i << " axis " << a;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, RoundTrip,
    ::testing::Values(FormatCase{Format::pcd_ascii, false}, FormatCase{Format::pcd_ascii, true},
                      FormatCase{Format::pcd_binary, false}, FormatCase{Format::pcd_binary, true},
                      FormatCase{Format::pcd_compressed, false},
                      FormatCase{Format::pcd_compressed, true},
                      FormatCase{Format::ply_ascii, false}, FormatCase{Format::ply_ascii, true},
                      FormatCase{Format::ply_le, false}, FormatCase{Format::ply_le, true},
                      FormatCase{Format::ply_be, false}, FormatCase{Format::ply_be, true}));

TEST(Load, OrganizedCloudKeepsItsShape) {
  TempDir tmp;
  const std::string path = tmp / "organized.pcd";
  std::ofstream(path) << "# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\n"
                         "COUNT 1 1 1\nWIDTH 3\nHEIGHT 2\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS 6\n"
                         "DATA ascii\n0 0 1\n1 0 1\nnan nan nan\n0 1 1\n1 1 1\n2 1 1\n";
  const Cloud c = load_cloud(path);
  EXPECT_EQ(c.width, 3u);
  EXPECT_EQ(c.height, 2u);
  EXPECT_EQ(c.size(), 6);
  EXPECT_EQ(c.finite, 5);
}

TEST(Load, QueryCloudUsesTheGivenOrigin) {
  TempDir tmp;
  const std::string path = tmp / "q.pcd";
  std::ofstream(path) << "VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\n"
                         "WIDTH 1\nHEIGHT 1\nPOINTS 1\nDATA ascii\n1000010.5 20 30\n";
  const std::array<double, 3> origin = {1e6, 0, 0};
  const Cloud c = load_cloud(path, &origin);
  EXPECT_EQ(c.origin, origin);
  EXPECT_FLOAT_EQ(c.xyz[0], 10.5f);
}

void expect_input_error(const std::string& path, const std::string& why) {
  try {
    load_cloud(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const input_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
}

TEST(LoadErrors, NameTheFileAndTheReason) {
  TempDir tmp;
  expect_input_error(tmp / "missing.pcd", "no such file");
  fs::create_directories(tmp / "dir.pcd");
  expect_input_error(tmp / "dir.pcd", "is a directory");
  std::ofstream(tmp / "empty.ply").flush();
  expect_input_error(tmp / "empty.ply", "empty");
  std::ofstream(tmp / "cloud.xyz") << "1 2 3\n";
  expect_input_error(tmp / "cloud.xyz", "unknown extension");
  std::ofstream(tmp / "noz.pcd") << "VERSION 0.7\nFIELDS x y\nSIZE 4 4\nTYPE F F\nCOUNT 1 1\n"
                                    "WIDTH 1\nHEIGHT 1\nPOINTS 1\nDATA ascii\n1 2\n";
  expect_input_error(tmp / "noz.pcd", "no 'z' field");
  std::ofstream(tmp / "garbage.pcd") << "this is not a point cloud\n";
  expect_input_error(tmp / "garbage.pcd", "not a PCD header");
  std::ofstream(tmp / "garbage.ply") << "ply\nformat ascii 1.0\nelement vertex 3\nend_header\n";
  expect_input_error(tmp / "garbage.ply", "no 'x' property");
  std::ofstream(tmp / "huge.pcd") << "VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\n"
                                     "COUNT 1 1 1\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\n"
                                     "0 0 0\n1e300 0 0\n";
  expect_input_error(tmp / "huge.pcd", "overflow");
  if (geteuid() != 0) {  // root reads anything
    const std::string locked = tmp / "locked.pcd";
    std::ofstream(locked) << "VERSION 0.7\n";
    chmod(locked.c_str(), 0);
    expect_input_error(locked, "cannot open");
  }
}

TEST(Write, NpyHoldsShapeTypeAndData) {
  TempDir tmp;
  const std::vector<std::int32_t> idx = {1, 2, -1, 4, 5, 6};
  write_array(tmp / "i.npy", idx.data(), 2, 3);
  std::string header;
  std::ifstream is(tmp / "i.npy", std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(is)), {});
  const int len = static_cast<unsigned char>(all[8]) | (static_cast<unsigned char>(all[9]) << 8);
  header.assign(all.begin() + 10, all.begin() + 10 + len);
  EXPECT_NE(header.find("'descr': '<i4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (2, 3)"), std::string::npos) << header;
  EXPECT_EQ((10 + len) % 64, 0);
  ASSERT_EQ(all.size(), 10 + len + idx.size() * 4);
  EXPECT_EQ(std::memcmp(all.data() + 10 + len, idx.data(), idx.size() * 4), 0);

  const std::vector<float> d = {0.5f, INFINITY};
  write_array(tmp / "d.npy", d.data(), 1, 2);
  std::ifstream is2(tmp / "d.npy", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(is2)), {});
  EXPECT_NE(text.find("'descr': '<f4'"), std::string::npos);
}

TEST(Write, CsvHasAHeaderAndOneLinePerRow) {
  TempDir tmp;
  const std::vector<float> d = {0.25f, INFINITY, 1.5f, 2.f};
  write_array(tmp / "d.csv", d.data(), 2, 2, "d");
  std::ifstream is(tmp / "d.csv");
  std::string text((std::istreambuf_iterator<char>(is)), {});
  EXPECT_EQ(text, "row,d0,d1\n0,0.25,inf\n1,1.5,2\n");
}

TEST(Write, FailureLeavesNoFileBehind) {
  TempDir tmp;
  const std::vector<std::int32_t> idx = {1};
  const std::string bad = tmp / "no/such/dir/out.npy";
  try {
    write_array(bad, idx.data(), 1, 1);
    ADD_FAILURE() << "no error";
  } catch (const output_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_FALSE(fs::exists(bad + ".pcnn-tmp"));
}

TEST(Write, SubsetKeepsEveryField) {
  TempDir tmp;
  // x y z as double, rgb packed float, intensity float, label uint32.
  pcl::PCLPointCloud2 pc;
  const struct {
    const char* name;
    std::uint8_t type;
    std::uint32_t offset;
  } spec[] = {
      {"x", pcl::PCLPointField::FLOAT64, 0},          {"y", pcl::PCLPointField::FLOAT64, 8},
      {"z", pcl::PCLPointField::FLOAT64, 16},         {"rgb", pcl::PCLPointField::FLOAT32, 24},
      {"intensity", pcl::PCLPointField::FLOAT32, 28}, {"label", pcl::PCLPointField::UINT32, 32}};
  for (const auto& f : spec) {
    pcl::PCLPointField field;
    field.name = f.name;
    field.datatype = f.type;
    field.offset = f.offset;
    field.count = 1;
    pc.fields.push_back(field);
  }
  pc.point_step = 36;
  pc.width = 10;
  pc.height = 1;
  pc.row_step = 360;
  pc.data.resize(360);
  for (std::uint32_t i = 0; i < 10; ++i) {
    const double xyz[3] = {6.5e5 + i, 4.1e6 - i, 0.5 * i};
    const float rgb = 0.25f * i, intensity = 100.f + i;
    const std::uint32_t label = 1000 + i;
    std::memcpy(&pc.data[i * 36], xyz, 24);
    std::memcpy(&pc.data[i * 36 + 24], &rgb, 4);
    std::memcpy(&pc.data[i * 36 + 28], &intensity, 4);
    std::memcpy(&pc.data[i * 36 + 32], &label, 4);
  }
  ASSERT_EQ(pcl::PCDWriter().writeBinary(tmp / "in.pcd", pc), 0);
  const Cloud cloud = load_cloud(tmp / "in.pcd");
  EXPECT_EQ(cloud.field_names,
            (std::vector<std::string>{"x", "y", "z", "rgb", "intensity", "label"}));
  for (const char* ext : {".pcd", ".ply"}) {
    const std::string out = tmp / (std::string("out") + ext);
    save_cloud_subset(cloud, {7, 2, 9}, out);
    const Cloud back = load_cloud(out);
    ASSERT_EQ(back.size(), 3) << ext;
    EXPECT_EQ(back.coordinate_type, "float64") << ext;
    pcl::PCLPointCloud2 raw;
    if (std::string(ext) == ".pcd")
      ASSERT_EQ(pcl::io::loadPCDFile(out, raw), 0);
    else
      ASSERT_EQ(pcl::io::loadPLYFile(out, raw), 0);
    ASSERT_EQ(raw.point_step, 36u) << ext;
    const std::uint32_t want[3] = {7, 2, 9};
    for (int j = 0; j < 3; ++j) {
      double x;
      float intensity;
      std::uint32_t label;
      std::memcpy(&x, &raw.data[j * 36], 8);
      std::memcpy(&intensity, &raw.data[j * 36 + 28], 4);
      std::memcpy(&label, &raw.data[j * 36 + 32], 4);
      EXPECT_EQ(x, 6.5e5 + want[j]) << ext;
      EXPECT_EQ(intensity, 100.f + want[j]) << ext;
      EXPECT_EQ(label, 1000 + want[j]) << ext;
    }
  }
  EXPECT_THROW(save_cloud_subset(cloud, {11}, tmp / "bad.pcd"), output_error);
  EXPECT_THROW(save_cloud_subset(cloud, {1}, tmp / "bad.xyz"), output_error);
}

TEST(Write, GeneratedCloudLoadsBack) {
  TempDir tmp;
  const std::vector<float> xyz = {1, 2, 3, -4, 5.5f, 6};
  save_xyz_pcd(tmp / "g.pcd", xyz);
  const Cloud c = load_cloud(tmp / "g.pcd");
  ASSERT_EQ(c.size(), 2);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(float(c.xyz[i] + c.origin[i % 3]), xyz[i]);
}

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

TEST(ArrayStreamWriter, PiecesGiveTheSameFileAsOneWrite) {
  const std::string dir = ::testing::TempDir();
  std::vector<std::int32_t> idx(50 * 4);
  std::vector<float> dist(50 * 4);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    idx[i] = static_cast<std::int32_t>(i * 7 % 31) - 1;
    dist[i] = i % 9 == 0 ? INFINITY : 0.25f * float(i);
  }
  auto read = [](const std::string& path) {
    std::ifstream is(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(is), {});
  };
  for (const char* ext : {".npy", ".csv"}) {
    const std::string whole = dir + "whole" + ext, pieces = dir + "pieces" + ext,
                      whole_d = dir + "whole_d" + ext, pieces_d = dir + "pieces_d" + ext;
    write_array(whole, idx.data(), 50, 4, "n");
    write_array(whole_d, dist.data(), 50, 4, "d");
    ArrayStreamWriter wi(pieces, 50, 4, false, "n"), wd(pieces_d, 50, 4, true, "d");
    for (int first = 0; first < 50; first += 17) {
      const int rows = std::min(17, 50 - first);
      wi.append(idx.data() + first * 4, rows);
      wd.append(dist.data() + first * 4, rows);
    }
    wi.finish();
    wd.finish();
    EXPECT_EQ(read(whole), read(pieces)) << ext;
    EXPECT_EQ(read(whole_d), read(pieces_d)) << ext;
  }
}

TEST(ArrayStreamWriter, AnUnfinishedStreamLeavesNoFile) {
  const std::string path = ::testing::TempDir() + "unfinished.npy";
  std::remove(path.c_str());
  {
    ArrayStreamWriter w(path, 10, 2, false, "n");
    const std::int32_t row[2] = {1, 2};
    w.append(row, 1);
    EXPECT_THROW(w.finish(), output_error);  // 1 of 10 rows
  }
  EXPECT_FALSE(std::ifstream(path).good());
  EXPECT_FALSE(std::ifstream(path + ".pcnn-tmp").good());
  EXPECT_THROW(ArrayStreamWriter(::testing::TempDir() + "no/such/dir/x.npy", 1, 1, false, "n"),
               output_error);
}

}  // namespace
}  // namespace pcnn
