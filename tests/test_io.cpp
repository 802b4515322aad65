// io: every supported format and coordinate type round-trips; bad files give clear errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pcl/PCLPointCloud2.h>
#include <pcl/io/pcd_io.h>
#include <pcl/io/ply_io.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <thread>

#include "../io/input_gate.hpp"
#include "../io/number_grammar.hpp"
#include "pcnn/io.hpp"
#include "pcnn/recenter.hpp"

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
  // Random doubles at 5.5e6 m: no float offset holds them, so the coordinates as stored are
  // kept for the searches, bit for bit in the binary formats.
  EXPECT_EQ(cloud.exact, !c.doubles);
  if (!c.doubles) {
    EXPECT_TRUE(cloud.stored.empty());
    return;
  }
  ASSERT_EQ(cloud.stored.size(), 900u);
  EXPECT_TRUE(std::isnan(cloud.stored[450]));
  const bool ascii = c.format == Format::pcd_ascii || c.format == Format::ply_ascii;
  for (int i = 0; i < 300 && !ascii; ++i)
    for (int a = 0; a < 3; ++a)
      if (i != 150) {
        ASSERT_EQ(cloud.stored[3 * i + a], pts[i][a]) << "point " << i;
      }
}

TEST(Load, SearchViewsAreExactForTheCoordinatesAsStored) {
  TempDir tmp;
  const std::string fine = tmp / "fine.pcd", grid = tmp / "grid.pcd";
  const auto pts = sample_points(40);
  write_pcd(fine, pts, true, Format::pcd_binary);
  std::ofstream(grid) << "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n"
                         "WIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\n450000.5 5500000 80\n1 2 3\n";
  // Exact clouds: their float offsets, one origin.
  Cloud g = load_cloud(grid);
  auto [gv, none] = search_views(g, nullptr);
  EXPECT_FALSE(gv.is_double());
  EXPECT_EQ(gv.data, g.xyz.data());
  EXPECT_EQ(none.count, 0);
  // A float64 query cloud no float offset holds: both views are the stored doubles, the exact
  // reference cloud's filled from its offsets (exactly).
  Cloud refs = load_cloud(grid);
  Cloud queries = load_cloud(fine, &refs.origin);
  ASSERT_TRUE(refs.exact);
  ASSERT_FALSE(queries.exact);
  auto [rv, qv] = search_views(refs, &queries);
  ASSERT_TRUE(rv.is_double() && qv.is_double());
  EXPECT_EQ(qv.count, 40);
  EXPECT_EQ(qv.data64[3], pts[1][0]);
  const double want[6] = {450000.5, 5500000, 80, 1, 2, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(rv.data64[i], want[i]);
}

// Clouds of several of the loader's blocks (each on some thread): the coordinates as stored
// kept bit for bit (NaN in all three where one is not finite) for a float64 cloud no float offset
// holds, and the stored values filled exactly from an exact float32 cloud's offsets.
TEST(Load, CloudsOfManyBlocksKeepEveryStoredValue) {
  TempDir tmp;
  const int n = 600000;
  std::vector<std::array<double, 4>> pts(n);
  for (int i = 0; i < n; ++i) {
    pts[i] = {5.5e6 + 0.001 * (i % 99991), 4.5e5 - 0.003 * (i % 7919), 80.0 + 1e-3 * (i % 13), 1};
    if (i % 9973 == 5) pts[i][i % 3] = i % 2 ? std::numeric_limits<double>::quiet_NaN() : -INFINITY;
  }
  const std::string wide = tmp / "wide.pcd", single = tmp / "single.pcd";
  write_pcd(wide, pts, true, Format::pcd_binary);
  write_pcd(single, pts, false, Format::pcd_binary);
  const Cloud w = load_cloud(wide);
  ASSERT_FALSE(w.exact);
  ASSERT_EQ(w.stored.size(), std::size_t(3) * n);
  Cloud s = load_cloud(single);
  ASSERT_TRUE(s.exact);
  Cloud q = load_cloud(wide, &s.origin);  // not exact: the searches take the stored doubles
  auto [sv, qv] = search_views(s, &q);
  ASSERT_TRUE(sv.is_double() && qv.is_double());
  for (int i = 0; i < n; ++i) {
    const bool finite =
        std::isfinite(pts[i][0]) && std::isfinite(pts[i][1]) && std::isfinite(pts[i][2]);
    for (int a = 0; a < 3; ++a) {
      const double stored = w.stored[std::size_t(3) * i + a];
      if (!finite) {
        ASSERT_TRUE(std::isnan(stored)) << "point " << i;
        continue;
      }
      ASSERT_EQ(stored, pts[i][a]) << "point " << i << " axis " << a;
      ASSERT_EQ(sv.data64[std::size_t(3) * i + a], double(float(pts[i][a]))) << "point " << i;
    }
  }
}

// Ascii rows cut into chunks of 1 MiB for the threads: a row that starts exactly on a chunk's
// first byte, a CR LF whose CR ends one chunk and LF begins the next, an LF as a chunk's first
// byte. Every row's x is its number: a row read twice, skipped or shifted shows.
TEST(Load, AsciiRowsOnChunkBoundariesAreEachReadOnce) {
  TempDir tmp;
  const int n = 140000;  // 2.2-2.4 MB: two boundaries
  struct Variant {
    const char* name;
    const char* ext;
    const char* first_row;  // printf format of row 0 (with its ending)
    const char* row;        // of the others
  };
  // 16-byte rows: row 65536 starts at the chunk's first byte. 17-byte CR LF rows: 2^20 = 17 x
  // 61681 - 1, so byte 2^20 is an LF after a CR. A 17-byte row 0 then 16-byte rows: an LF at 2^20.
  const Variant variants[] = {{"lf_on_boundary", ".pcd", "%06d 1.5 2.25\n", "%06d 1.5 2.25\n"},
                              {"crlf_across", ".pcd", "%06d 1.5 2.25\r\n", "%06d 1.5 2.25\r\n"},
                              {"lf_first", ".pcd", "%07d 1.5 2.25\n", "%06d 1.5 2.25\n"},
                              {"lf_on_boundary", ".ply", "%06d 1.5 2.25\n", "%06d 1.5 2.25\n"}};
  for (const Variant& v : variants) {
    const bool crlf = std::strchr(v.row, '\r') != nullptr;
    const char* eol = crlf ? "\r\n" : "\n";
    std::string head;
    if (std::string(v.ext) == ".ply") {
      head = std::string("ply") + eol + "format ascii 1.0" + eol + "element vertex " +
             std::to_string(n) + eol + "property float x" + eol + "property float y" + eol +
             "property float z" + eol + "end_header" + eol;
    } else {
      for (const std::string& line :
           {std::string("VERSION 0.7"), std::string("FIELDS x y z"), std::string("SIZE 4 4 4"),
            std::string("TYPE F F F"), std::string("COUNT 1 1 1"), "WIDTH " + std::to_string(n),
            std::string("HEIGHT 1"), std::string("VIEWPOINT 0 0 0 1 0 0 0"),
            "POINTS " + std::to_string(n), std::string("DATA ascii")})
        head += line + eol;
    }
    std::string body;
    char row[32];
    for (int i = 0; i < n; ++i) {
      std::snprintf(row, sizeof row, i == 0 ? v.first_row : v.row, i);
      body += row;
    }
    const std::string path = tmp / (std::string(v.name) + v.ext);
    std::ofstream(path, std::ios::binary) << head << body;
    const Cloud c = load_cloud(path, nullptr, /*keep_fields=*/false);
    ASSERT_EQ(c.size(), n) << path;
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(double(c.xyz[3 * std::size_t(i)]) + c.origin[0], double(i)) << path << " row " << i;
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

// Each refused file is closed again: a node polling for a file still being written ("the file is
// empty") must not run out of descriptors.
TEST(LoadErrors, LeaveNoDescriptorOpen) {
  TempDir tmp;
  fs::create_directories(tmp / "dir.pcd");
  std::ofstream(tmp / "empty.pcd").flush();
  const std::string fifo = tmp / "fifo.pcd";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto open_descriptors = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const auto before = open_descriptors();
  for (int i = 0; i < 50; ++i)
    for (const std::string& p :
         {tmp / "dir.pcd", tmp / "empty.pcd", fifo, std::string("/dev/zero")})
      EXPECT_THROW(load_cloud(p), input_error) << p;
  EXPECT_EQ(open_descriptors(), before);
}

// The origin is the caller's argument: one not finite is refused as such, not blamed on a point.
TEST(LoadErrors, AnOriginNotFiniteIsTheCallersError) {
  TempDir tmp;
  const std::string path = tmp / "q.pcd";
  std::ofstream(path) << "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n"
                         "WIDTH 1\nHEIGHT 1\nPOINTS 1\nDATA ascii\n1 2 3\n";
  const std::array<double, 3> origin = {std::nan(""), 0, 0};
  EXPECT_THROW(load_cloud(path, &origin), invalid_argument_error);
  const std::vector<double> xyz = {1, 2, 3};
  EXPECT_THROW(recenter(xyz.data(), 1, origin), invalid_argument_error);
  std::vector<float> f = {1, 2, 3};
  EXPECT_THROW(recenter_in_place(f.data(), 1, {0, INFINITY, 0}), invalid_argument_error);
}

// Runs `body` in a child process, whose exit status it returns: a test of signals that would
// kill the test binary itself where they go wrong.
void expect_child_exits_zero(const std::function<int()>& body) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(body());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A name for the writing end of a pipe whose reader has gone ("" when no pipe could be made).
std::string pipe_without_reader() {
  int fds[2];
  if (pipe(fds) != 0) return "";
  close(fds[0]);
  return "/dev/fd/" + std::to_string(fds[1]);
}

// A library never exits: a pipe whose reader has gone fails the write (EPIPE, an output_error)
// instead of SIGPIPE killing the process. Run in a child, whose death the parent would see.
TEST(Write, APipeWithoutReaderIsAnErrorNotASignal) {
  expect_child_exits_zero([] {
    const std::string path = pipe_without_reader();
    if (path.empty()) return 3;
    std::vector<std::int32_t> idx(1 << 20, 7);
    int code = 4;
    try {
      write_array(path, idx.data(), 1 << 10, 1 << 10);
    } catch (const output_error& e) {
      code = std::string(e.what()).find("Broken pipe") != std::string::npos ? 0 : 5;
    }
    // The signal the write raised was taken back, not left pending for later.
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) code = 6;
    return code;
  });
}

// A SIGPIPE the caller had pending (blocked) before the write stays pending, and the caller's
// mask comes back as it was.
TEST(Write, ACallersPendingPipeSignalIsLeftAlone) {
  expect_child_exits_zero([] {
    sigset_t pipe_set, before, after, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &before);
    raise(SIGPIPE);  // blocked: pending
    const std::string path = pipe_without_reader();
    if (path.empty()) return 3;
    const std::int32_t one = 1;
    int code = 4;
    try {
      write_array(path, &one, 1, 1);
    } catch (const output_error&) {
      code = 0;
    }
    sigpending(&pending);
    if (!sigismember(&pending, SIGPIPE)) code = 5;
    pthread_sigmask(SIG_BLOCK, nullptr, &after);
    if (!sigismember(&after, SIGPIPE)) code = 6;
    return code;
  });
}

TEST(Write, ShapesThatAreNoArrayAreRefused) {
  TempDir tmp;
  const std::vector<float> seven(7, 1.f);
  EXPECT_THROW(save_xyz_pcd(tmp / "seven.pcd", seven), invalid_argument_error);
  EXPECT_FALSE(fs::exists(tmp / "seven.pcd"));
  const std::vector<std::int32_t> idx = {1, 2};
  EXPECT_THROW(write_array(tmp / "neg.npy", idx.data(), 2, -1), invalid_argument_error);
  EXPECT_FALSE(fs::exists(tmp / "neg.npy"));
  const std::vector<std::int64_t> offsets = {0, 5, 2};
  const std::vector<std::int32_t> nb(5, 0);
  const std::vector<float> d2(5, 0.f);
  EXPECT_THROW(write_pairs_csv(tmp / "pairs.csv", offsets.data(), 2, nb.data(), d2.data()),
               invalid_argument_error);
  EXPECT_FALSE(fs::exists(tmp / "pairs.csv"));
}

// Moved from, a set is refused by name rather than dereferenced.
TEST(Write, AMovedFromOutputSetIsRefused) {
  TempDir tmp;
  OutputSet a;
  OutputSet b(std::move(a));
  EXPECT_THROW(a.add(tmp / "x.npy", OutputKind::array), invalid_argument_error);  // NOLINT
  EXPECT_NO_THROW(b.add(tmp / "x.npy", OutputKind::array));
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

// ---- The input gate: a whitelist of what pcnn and PCL read identically ----

namespace pcnn {
namespace {

namespace fs = std::filesystem;
using io_detail::Scalar;

struct NumberCase {
  const char* token;
  Scalar type;
  const char* why;  // nullptr: accepted
  double value;
  io_detail::Dialect dialect = io_detail::Dialect::pcd;
};
std::ostream& operator<<(std::ostream& os, const NumberCase& c) {
  return os << "'" << c.token << "' as " << io_detail::scalar_name(c.type)
            << (c.dialect == io_detail::Dialect::pcd ? " in .pcd" : " in .ply");
}
constexpr io_detail::Dialect in_ply = io_detail::Dialect::ply;

class NumberGrammar : public ::testing::TestWithParam<NumberCase> {};

TEST_P(NumberGrammar, AcceptsExactlyTheStrictGrammar) {
  const NumberCase c = GetParam();
  io_detail::Number v;
  const std::string why = io_detail::check_number(c.token, c.type, c.dialect, &v);
  if (!c.why) {
    EXPECT_EQ(why, "");
    if (std::isnan(c.value))
      EXPECT_TRUE(std::isnan(v.f));
    else
      EXPECT_EQ(v.f, c.value);
  } else {
    EXPECT_NE(why.find(c.why), std::string::npos) << why;
  }
}

const double nan_ = std::numeric_limits<double>::quiet_NaN();
const double inf_ = std::numeric_limits<double>::infinity();

INSTANTIATE_TEST_SUITE_P(
    Tokens, NumberGrammar,
    ::testing::Values(
        // accepted
        NumberCase{"1", Scalar::f32, nullptr, 1}, NumberCase{"-2.5", Scalar::f32, nullptr, -2.5},
        NumberCase{"+.5", Scalar::f32, nullptr, 0.5}, NumberCase{"5.", Scalar::f64, nullptr, 5},
        NumberCase{"1e3", Scalar::f64, nullptr, 1000},
        NumberCase{"-1.5E-2", Scalar::f64, nullptr, -0.015},
        NumberCase{"nan", Scalar::f32, nullptr, nan_},
        NumberCase{"NaN", Scalar::f64, nullptr, nan_},
        NumberCase{"-inf", Scalar::f32, nullptr, -inf_},
        NumberCase{"255", Scalar::u8, nullptr, 255}, NumberCase{"-128", Scalar::i8, nullptr, -128},
        NumberCase{"+7", Scalar::u16, nullptr, 7}, NumberCase{"007", Scalar::i32, nullptr, 7},
        NumberCase{"4294967295", Scalar::u32, nullptr, 4294967295.0},
        NumberCase{"9007199254740992", Scalar::u64, nullptr, 9007199254740992.0},
        NumberCase{"1e-50", Scalar::f32, nullptr, 1e-50},  // underflows: rounding, not a change
        // Java, JavaScript and .NET print infinities so; PCL's readers read them
        NumberCase{"infinity", Scalar::f32, nullptr, inf_},
        NumberCase{"-Infinity", Scalar::f64, nullptr, -inf_, in_ply},
        // numpy.savetxt's %f in an integer .pcd field: PCL's two paths both read the integer
        NumberCase{"3.000000", Scalar::u32, nullptr, 3}, NumberCase{"1.", Scalar::i32, nullptr, 1},
        NumberCase{"-4.00", Scalar::i8, nullptr, -4},
        NumberCase{"+4294967295.0", Scalar::u32, nullptr, 4294967295.0},
        // rejected
        NumberCase{"0x10", Scalar::f32, "not a number", 0},
        NumberCase{"0x1p3", Scalar::f64, "not a number", 0},
        NumberCase{"0x10", Scalar::i32, "not an integer", 0},
        NumberCase{"1e3", Scalar::i32, "not an integer", 0},
        NumberCase{"2.7", Scalar::u8, "not an integer", 0},
        NumberCase{"300", Scalar::u8, "out of range for uint8", 0},
        NumberCase{"128", Scalar::i8, "out of range for int8", 0},
        NumberCase{"-1", Scalar::u32, "negative", 0}, NumberCase{"-0", Scalar::u8, "negative", 0},
        NumberCase{"4294967296", Scalar::u32, "out of range", 0},
        // 64-bit integers beyond 2^53, which PCL's ascii reader rounds: refused as that, not as
        // out of their type's range (the message said 1700000000123456789 was)
        NumberCase{"9007199254740993", Scalar::u64, "beyond 2^53 (9007199254740992)", 0},
        NumberCase{"18446744073709551615", Scalar::u64, "beyond 2^53", 0},
        NumberCase{"-9223372036854775808", Scalar::i64, "beyond ±2^53", 0},
        NumberCase{"18446744073709551616", Scalar::u64,
                   "out of range for uint64 (0 to 18446744073709551615)", 0},
        NumberCase{"9223372036854775808", Scalar::i64,
                   "out of range for int64 (-9223372036854775808 to 9223372036854775807)", 0},
        NumberCase{"99999999999999999999999", Scalar::i64, "out of range", 0},
        // found by fuzzing: 2^64 + 4499 wrapped to 4499 while being read
        NumberCase{"0000000000000000000000018446744073709556115", Scalar::i32, "out of range", 0},
        NumberCase{"18446744073709551616", Scalar::u8, "out of range", 0},
        NumberCase{"nan", Scalar::i16, "not a number", 0},
        NumberCase{"infinit", Scalar::f32, "not a number", 0},
        NumberCase{"3.000", Scalar::u32, "not an integer", 0, in_ply},  // PCL's .ply reads 0
        NumberCase{"3.010", Scalar::u32, "not an integer", 0},
        NumberCase{"3.0e0", Scalar::i32, "not an integer", 0},
        NumberCase{".0", Scalar::i32, "not an integer", 0},
        NumberCase{"-0.0", Scalar::u8, "negative", 0},
        NumberCase{"256.0", Scalar::u8, "out of range for uint8", 0},
        NumberCase{"1e39", Scalar::f32, "too large for float32", 0},
        NumberCase{"1e309", Scalar::f64, "too large for float64", 0},
        NumberCase{"1.", Scalar::i32, "not an integer", 0, in_ply},
        NumberCase{"1e", Scalar::f32, "exponent without digits", 0},
        NumberCase{".", Scalar::f32, "not a number", 0}, NumberCase{"", Scalar::f32, "empty", 0},
        NumberCase{"1,5", Scalar::f32, "not a number", 0},
        NumberCase{"1 ", Scalar::f32, "not a number", 0},
        NumberCase{"1\v", Scalar::f32, "not a number", 0},
        NumberCase{"--1", Scalar::f32, "not a number", 0},
        NumberCase{"1.0000000000000000000000000000000000000000000000000000000000000001",
                   Scalar::f64, "longer than 64", 0}));

TEST(NumberGrammar, Float32MustRoundTheSameDirectlyAndThroughDouble) {
  // A decimal just above the midpoint between two floats, closer to it than double resolves:
  // rounded to double it lands on the midpoint, which then rounds to even — not to the nearer
  // float that a direct conversion gives. PCL's .pcd reader converts one way or the other
  // depending on where the value is in the file; its .ply reader always directly.
  const char* t = "1.00000005960464477550";  // 1 + 2^-24 + a little
  const float direct = std::strtof(t, nullptr), through = float(std::strtod(t, nullptr));
  ASSERT_NE(direct, through);  // 1.0000001 and 1
  const std::string why = io_detail::check_number(t, Scalar::f32, io_detail::Dialect::pcd);
  EXPECT_NE(why.find("a float32 that rounds to different values directly and through double"),
            std::string::npos)
      << why;
  io_detail::Number v;
  EXPECT_EQ(io_detail::check_number(t, Scalar::f32, in_ply, &v), "");
  EXPECT_EQ(float(v.f), direct);
  EXPECT_EQ(double(float(v.f)), v.f);  // the float itself, stored as it is
  EXPECT_EQ(io_detail::check_number(t, Scalar::f64, io_detail::Dialect::pcd),
            "");  // no such question for float64
}

// The grammar converts with std::from_chars and tells float32 double roundings apart by testing
// whether the double is a float midpoint; the reference is strtod and strtof on every literal:
// accepted exactly when both are finite in the type and agree, with strtod's value.
TEST(NumberGrammar, ValuesEqualStrtodAndStrtofOnRandomLiterals) {
  std::mt19937_64 rng(11);
  char buf[96];
  int midpoints = 0, refused = 0;
  for (int it = 0; it < 200000; ++it) {
    const int kind = it % 4;
    if (kind == 0) {  // a random float printed with 1-12 digits
      float f;
      const std::uint32_t b = static_cast<std::uint32_t>(rng());
      std::memcpy(&f, &b, 4);
      if (!std::isfinite(f)) continue;
      std::snprintf(buf, sizeof buf, "%.*g", int(rng() % 12) + 1, double(f));
    } else if (kind == 1) {  // a random double with 1-20 digits
      double d;
      const std::uint64_t b = rng();
      std::memcpy(&d, &b, 8);
      if (!std::isfinite(d)) continue;
      std::snprintf(buf, sizeof buf, "%.*g", int(rng() % 20) + 1, d);
    } else if (kind == 2) {  // exactly a midpoint between two floats, or near one
      float f;
      const std::uint32_t b = static_cast<std::uint32_t>(rng() % 0x7f7fffffu);
      std::memcpy(&f, &b, 4);
      const double m = 0.5 * double(f) + 0.5 * double(std::nextafter(f, INFINITY));
      std::snprintf(buf, sizeof buf, "%.*g", int(rng() % 25) + 9, m);
    } else {  // underflow and overflow edges
      std::snprintf(buf, sizeof buf, "%d.%de%d", int(rng() % 10), int(rng() % 1000),
                    int(rng() % 700) - 350);
    }
    const double d = std::strtod(buf, nullptr);
    const float f = std::strtof(buf, nullptr);
    for (const Scalar type : {Scalar::f32, Scalar::f64}) {
      io_detail::Number v;
      const std::string why = io_detail::check_number(buf, type, io_detail::Dialect::pcd, &v);
      const bool finite =
          type == Scalar::f32 ? std::isfinite(float(d)) && std::isfinite(f) : std::isfinite(d);
      const float through = static_cast<float>(d);
      const bool agree = type == Scalar::f64 || std::memcmp(&f, &through, 4) == 0;
      ASSERT_EQ(why.empty(), finite && agree) << buf << ": " << why;
      if (why.empty()) {
        ASSERT_EQ(std::memcmp(&v.f, &d, 8), 0) << buf;
      }
      if (type == Scalar::f32 && finite && !agree) ++refused;
      // .ply: every finite literal, float32 rounded directly (strtof)
      io_detail::Number p;
      const std::string ply_why = io_detail::check_number(buf, type, in_ply, &p);
      ASSERT_EQ(ply_why.empty(), finite) << buf << ": " << ply_why;
      if (ply_why.empty() && type == Scalar::f32) {
        const float stored = static_cast<float>(p.f);  // as the gate stores it
        ASSERT_EQ(std::memcmp(&stored, &f, 4), 0) << buf;
      } else if (ply_why.empty()) {
        ASSERT_EQ(std::memcmp(&p.f, &d, 8), 0) << buf;
      }
    }
    if (kind == 2) ++midpoints;
  }
  EXPECT_GT(midpoints, 40000);
  EXPECT_GT(refused, 100);  // the double-rounding refusals were exercised
}

TEST(Lzf, DecodesExactlyOrSaysWhy) {
  std::string why;
  const unsigned char literal[] = {0x02, 'a', 'b', 'c'};  // a literal run of 3
  EXPECT_TRUE(io_detail::check_lzf(literal, 4, 3, &why)) << why;
  EXPECT_FALSE(io_detail::check_lzf(literal, 4, 4, &why));
  EXPECT_NE(why.find("decodes to 3 bytes"), std::string::npos) << why;
  EXPECT_FALSE(io_detail::check_lzf(literal, 0, 0, &why));  // PCL reads a byte past it
  EXPECT_NE(why.find("empty compressed block"), std::string::npos) << why;
  EXPECT_FALSE(io_detail::check_lzf(literal, 3, 3, &why));
  EXPECT_NE(why.find("past the end"), std::string::npos) << why;
  const unsigned char backref[] = {0x00, 'a', 0x20, 0x00};  // 'a', then 3 bytes from 1 back
  EXPECT_TRUE(io_detail::check_lzf(backref, 4, 4, &why)) << why;
  const unsigned char before[] = {0x20, 0x05};  // a reference before any output
  EXPECT_FALSE(io_detail::check_lzf(before, 2, 3, &why));
  EXPECT_NE(why.find("before the start"), std::string::npos) << why;
  EXPECT_FALSE(io_detail::check_lzf(backref, 4, 3, &why));
  EXPECT_NE(why.find("more bytes than the header says"), std::string::npos) << why;
}

// One hostile or careless file per class the gate closes, with where and why it must say.
struct BadFile {
  const char* name;
  const char* ext;
  std::string bytes;
  const char* why;
};
std::ostream& operator<<(std::ostream& os, const BadFile& c) { return os << c.name; }

std::string pcd(const std::string& fields, const std::string& size, const std::string& type,
                const std::string& count, int points, const std::string& data) {
  return "VERSION 0.7\nFIELDS " + fields + "\nSIZE " + size + "\nTYPE " + type + "\nCOUNT " +
         count + "\nWIDTH " + std::to_string(points) + "\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\n" +
         "POINTS " + std::to_string(points) + "\nDATA " + data + "\n";
}
std::string xyz_pcd(int points, const std::string& data) {
  return pcd("x y z", "4 4 4", "F F F", "1 1 1", points, data);
}
std::string ply(const std::string& format, const std::string& before_vertex, int vertices,
                const std::string& props, const std::string& after = "") {
  return "ply\nformat " + format + " 1.0\n" + before_vertex + "element vertex " +
         std::to_string(vertices) + "\n" + props + after + "end_header\n";
}
const std::string xyz_props = "property float x\nproperty float y\nproperty float z\n";
// A binary .pcd of n int64 points, 0 except x = 2^59 + 60 + i at each point i of `beyond`.
std::string int64_pcd(int n, std::initializer_list<int> beyond) {
  std::string body(std::size_t(24) * n, '\0');
  for (const int i : beyond) {
    const std::int64_t v = (std::int64_t(1) << 59) + 60 + i;
    std::memcpy(&body[std::size_t(24) * i], &v, sizeof v);
  }
  return pcd("x y z", "8 8 8", "I I I", "1 1 1", n, "binary") + body;
}

// An ascii .pcd saying `points` POINTS, with `rows` rows "1.5 2.5 3.5" (2.4 MB for 200000), some
// replaced by other text (with its line ending). Row r is line 11 + r.
std::string ascii_pcd(int points, int rows, const std::map<int, std::string>& replaced) {
  std::string s = xyz_pcd(points, "ascii");
  for (int r = 0; r < rows; ++r) {
    const auto it = replaced.find(r);
    s += it == replaced.end() ? "1.5 2.5 3.5\n" : it->second;
  }
  return s;
}

class InputGate : public ::testing::TestWithParam<BadFile> {};

TEST_P(InputGate, RejectsNamingTheFileWhereAndWhy) {
  const BadFile c = GetParam();
  TempDir tmp;
  const std::string path = tmp / (std::string(c.name) + c.ext);
  std::ofstream(path, std::ios::binary) << c.bytes;
  try {
    load_cloud(path);
    ADD_FAILURE() << "accepted";
  } catch (const input_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot read cloud '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.why), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Crashes, InputGate,
    ::testing::Values(
        BadFile{"size_after_points", ".pcd",
                "VERSION 0.7\nFIELDS x y z\nPOINTS 2\nSIZE 8 8 8\nTYPE F F F\nWIDTH 2\nDATA "
                "ascii\n1 2 3\n4 5 6\n",
                "line 4: SIZE after POINTS"},
        BadFile{"count_after_points", ".pcd",
                "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nPOINTS 1\nCOUNT 1 1 1\n"
                "WIDTH 1\nDATA ascii\n1 2 3\n",
                "line 6: COUNT after POINTS"},
        // Records in several of the gather's blocks of ~4 MiB, each on some thread: the first
        // bad point is the one named, whichever block fails first.
        BadFile{"int64_beyond_2_53_in_two_blocks", ".pcd", int64_pcd(400000, {380000, 200000}),
                "point 200000: x = 576460752303623548 lies beyond"},
        // Ascii rows in several chunks of ~1 MiB, each on some thread: the error reported is
        // the one a reading in order meets first.
        BadFile{"ascii_first_bad_row_of_two_chunks", ".pcd",
                ascii_pcd(200000, 200000, {{190000, "1 2 x\n"}, {150000, "1 2\n"}}),
                "line 150011: point 150000 has 2 values, expected 3"},
        BadFile{"ascii_bad_row_before_data_after", ".pcd",
                ascii_pcd(200000, 200001, {{200000, "zzz\n"}, {120000, "1 2 3 4\n"}}),
                "line 120011: point 120000 has 4 values, expected 3"},
        BadFile{"ascii_bad_row_after_points_is_data_after", ".pcd",
                ascii_pcd(200000, 200001, {{200000, "zzz\n"}}),
                "line 200011: data after the last of the 200000 POINTS rows"},
        BadFile{"ascii_bad_row_before_truncation", ".pcd",
                ascii_pcd(200000, 199999, {{199000, "1 2 3.5.5\n"}}),
                "line 199011: field 'z': '3.5.5'"},
        BadFile{"ascii_truncated_in_many_chunks", ".pcd", ascii_pcd(200000, 199999, {}),
                "the ascii data has 199999 rows, POINTS says 200000"},
        BadFile{"ascii_error_late_then_another", ".pcd",
                ascii_pcd(200000, 200000, {{180000, "1 2 x\n"}, {190000, "1 2 3 4\n"}}),
                "line 180011: field 'z': 'x' is not a number"},
        // PCL gives alpha to the first field named rgb it finds, and packs every color group
        // at its own red: other fields than the properties' (found by a review).
        BadFile{"ply_rgb_property_beside_colors", ".ply",
                ply("binary_little_endian", "", 1,
                    xyz_props + "property float rgb\nproperty uchar red\nproperty uchar green\n"
                                "property uchar blue\nproperty uchar alpha\n") +
                    std::string(20, '\0'),
                "line 3: a vertex property 'rgb' beside uchar colors"},
        BadFile{"ply_two_color_groups", ".ply",
                ply("binary_little_endian", "", 1,
                    xyz_props + "property uchar red\nproperty uchar green\nproperty uchar blue\n"
                                "property uchar diffuse_red\nproperty uchar diffuse_green\n"
                                "property uchar diffuse_blue\n") +
                    std::string(18, '\0'),
                "two vertex color groups"},
        BadFile{"range_grid_negative", ".ply",
                ply("ascii", "obj_info num_cols 2\nobj_info num_rows 1\n", 1, xyz_props,
                    "element range_grid 2\nproperty list uchar int vertex_indices\n") +
                    "1 2 3\n1 -5\n1 0\n",
                "line 13: range_grid cell 0 refers to vertex -5 of 1"},
        BadFile{"range_grid_more_vertices_than_cells", ".ply",  // found by fuzzing
                ply("ascii", "obj_info num_cols 2\nobj_info num_rows 1\n", 3, xyz_props,
                    "element range_grid 2\nproperty list uchar int vertex_indices\n") +
                    "1 2 3\n4 5 6\n7 8 9\n1 0\n1 2\n",
                "line 5: element vertex 3 is more than the 2 x 1 grid PCL makes room for"},
        BadFile{"items_without_bytes", ".ply",  // found by fuzzing (PCL looped for minutes)
                ply("binary_little_endian", "", 0, xyz_props, "element nothing 21474836482\n"),
                "element nothing has 21474836482 items but no properties"},
        BadFile{"range_grid_two_indices", ".ply",
                ply("ascii", "obj_info num_cols 2\nobj_info num_rows 1\n", 1, xyz_props,
                    "element range_grid 2\nproperty list uchar int vertex_indices\n") +
                    "1 2 3\n2 0 0\n0\n",
                "lists 2 vertices"},
        BadFile{"obj_info_after_vertex", ".ply",
                ply("ascii", "", 1, xyz_props, "obj_info num_cols 2\nobj_info num_rows 3\n") +
                    "1 2 3\n",
                "line 7: obj_info num_cols after an element"},
        BadFile{"obj_info_leading_space", ".ply",
                ply("ascii", "", 1, xyz_props, " obj_info x\n") + "1 2 3\n",
                "line 7: an obj_info line may not start with white space (PCL ignores it)"},
        BadFile{"compressed_empty_block", ".pcd",
                xyz_pcd(4, "binary_compressed") + std::string("\0\0\0\0\x30\0\0\0", 8),
                "an empty compressed block"},
        BadFile{"compressed_reference_before_start", ".pcd",
                xyz_pcd(4, "binary_compressed") + std::string("\x02\0\0\0\x30\0\0\0\x20\x05", 10),
                "a back reference before the start"},
        BadFile{"binary_data_like_a_header", ".pcd",
                xyz_pcd(4, "binary") + "COLUMNS" + std::string(41, '\xff'),
                "begins like a header line"},
        BadFile{"blank_line_in_header", ".pcd", "\r\n" + xyz_pcd(1, "ascii") + "1 2 3\n",
                "line 1: an empty line"}));

INSTANTIATE_TEST_SUITE_P(
    SilentChanges, InputGate,
    ::testing::Values(
        BadFile{
            "obj_info_one_vertex_six_points", ".ply",
            ply("ascii", "obj_info num_cols 2\nobj_info num_rows 3\n", 1, xyz_props) + "1 2 3\n",
            "line 3: obj_info num_cols x num_rows (2 x 3) does not equal the 1 vertices"},
        BadFile{"obj_info_amplification", ".ply",
                ply("ascii", "obj_info num_cols 20000\nobj_info num_rows 10000\n", 1, xyz_props) +
                    "1 2 3\n",
                "(20000 x 10000)"},
        BadFile{"obj_info_not_a_count", ".ply",
                ply("ascii", "obj_info num_cols 1e3\nobj_info num_rows 1\n", 1000, xyz_props),
                "obj_info num_cols takes one count"},
        BadFile{"vertical_tab", ".pcd", xyz_pcd(1, "ascii") + "1\v2 3\n",
                "line 11: a control character (0x0B)"},
        BadFile{"form_feed", ".ply", ply("ascii", "", 1, xyz_props) + "1 2\f3\n",
                "line 8: a control character (0x0C)"},
        BadFile{"stray_carriage_return", ".pcd", xyz_pcd(1, "ascii") + "1 2\r3\n",
                "a control character (0x0D)"},
        BadFile{"hex_float", ".pcd", xyz_pcd(1, "ascii") + "0x1p3 2 3\n",
                "'0x1p3' is not a number"},
        BadFile{"integer_exponent", ".pcd",
                pcd("x y z i", "4 4 4 4", "F F F I", "1 1 1 1", 1, "ascii") + "1 2 3 1e3\n",
                "field 'i': '1e3' is not an integer (the field is int32)"},
        BadFile{"integer_fraction", ".ply",
                ply("ascii", "", 1, xyz_props + "property int i\n") + "1 2 3 2.7\n",
                "'2.7' is not an integer"},
        BadFile{"u1_wraps", ".pcd",
                pcd("x y z i", "4 4 4 1", "F F F U", "1 1 1 1", 1, "ascii") + "1 2 3 300\n",
                "'300' is out of range for uint8 (0 to 255)"},
        BadFile{"uchar_wraps", ".ply",
                ply("ascii", "", 1, xyz_props + "property uchar i\n") + "1 2 3 256\n",
                "'256' is out of range for uint8"},
        BadFile{"compressed_padding_field", ".pcd",
                pcd("x _ y z", "4 4 4 4", "F F F F", "1 1 1 1", 1, "binary_compressed") +
                    std::string("\x01\0\0\0\x10\0\0\0\x00", 9),
                "a '_' (padding) field in binary_compressed"},
        BadFile{"rows_after_points", ".pcd", xyz_pcd(1, "ascii") + "1 2 3\n4 5 6\n",
                "line 12: data after the last of the 1 POINTS rows"},
        BadFile{"rows_after_vertices", ".ply", ply("ascii", "", 1, xyz_props) + "1 2 3\n4 5 6\n",
                "line 9: data after the last element's rows"},
        BadFile{"bytes_after_points", ".pcd",
                xyz_pcd(1, "binary") + std::string(12, '\0') + std::string("\x01", 1),
                "1 bytes after the last of the POINTS points"},
        BadFile{"too_much_padding", ".pcd", xyz_pcd(1, "binary") + std::string(12 + 4096, '\0'),
                "4096 bytes after the last of the POINTS points"},
        BadFile{"scattered_colors", ".ply",
                ply("ascii", "", 1,
                    "property uchar red\n" + xyz_props +
                        "property uchar green\nproperty uchar blue\n") +
                    "1 2 3 4 5 6\n",
                "three consecutive properties red, green, blue"},
        BadFile{"camera_viewport", ".ply",
                ply("ascii", "", 2, xyz_props,
                    "element camera 1\nproperty int viewportx\nproperty int viewporty\n") +
                    "1 2 3\n4 5 6\n3 1\n",
                "viewport (3 x 1) does not hold the 2 vertices"},
        BadFile{"range_grid_ignored", ".ply",
                ply("ascii", "obj_info num_cols 2\nobj_info num_rows 1\n", 2, xyz_props,
                    "element range_grid 2\nproperty list uchar int vertex_indices\n") +
                    "1 2 3\n4 5 6\n1 1\n1 0\n",
                "maps cell 0 to vertex 1"},
        BadFile{"range_grid_hole_integer_coordinates", ".ply",
                ply("ascii", "obj_info num_cols 2\nobj_info num_rows 1\n", 1,
                    "property int x\nproperty int y\nproperty int z\n",
                    "element range_grid 2\nproperty list uchar int vertex_indices\n") +
                    "1 2 3\n1 0\n0\n",
                "fills with 0 (not NaN)"},
        BadFile{"viewpoint_infinity", ".pcd",
                "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 1\n"
                "HEIGHT 1\nVIEWPOINT 5 infinity 7 1 0 0 0\nPOINTS 1\nDATA ascii\n1 2 3\n",
                "line 8: VIEWPOINT value 'infinity' is not finite"},
        BadFile{"keyword_prefix", ".pcd",
                "VERSION 0.7\nFIELDSX x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\nPOINTS 1\nDATA "
                "ascii\n1 2 3\n",
                "line 2: 'FIELDSX' is not a PCD header keyword"},
        BadFile{"type_word", ".pcd",
                pcd("x y z", "4 4 4", "Fx F F", "1 1 1", 1, "ascii") + "1 2 3\n",
                "unsupported TYPE 'Fx'"},
        BadFile{"mixed_line_endings", ".ply",
                "ply\r\nformat ascii 1.0\r\nelement vertex 1\nproperty float x\r\n",
                "line 3: ends with LF but line 1 with CR LF"},
        BadFile{"vertex_without_coordinates", ".ply",
                ply("binary_little_endian", "", 1, "") + std::string(1, '\0'),
                "the vertex element has no 'x' property"},
        BadFile{"vertex_count_beyond_int32", ".ply",
                "ply\nformat binary_little_endian 1.0\nelement vertex 3000000000\n" + xyz_props +
                    "end_header\n",
                "element vertex 3000000000: at most 2^31-1 points"}));

// Header forms PCL reads as meant (checked against PCL 1.13 when written; bad_inputs.sh keeps
// such files for test_load_paths, which compares both readers): blanks before a line's first
// word, empty lines (.pcd: LF ones; .ply: any blank line after the format line), and .pcd lines
// ending either way (PCL's tokenizer drops the CR). A .pcd line of only blanks or a lone CR,
// which PCL takes for a line of no keyword (reading no point), is still refused.
TEST(InputGate, HeaderFormsPclReadsAsMeant) {
  TempDir tmp;
  const std::string pcd_ok =
      "\n  VERSION 0.7\r\n\tFIELDS x y z\n\n  SIZE 4 4 4\n  # a comment\r\nTYPE F F F\n"
      "COUNT 1 1 1\r\nWIDTH 2\nHEIGHT 1\nPOINTS 2\n  DATA ascii\r\n1 2 3\r\n4 5 6\n";
  const std::string ply_ok =
      "ply\n  format ascii 1.0\n\n  comment x\n \t \n  element vertex 2\n  property float x\n"
      "  property float y\n\tproperty float z\n  end_header\n1 2 3\n4 5 6\n";
  for (const auto& [name, bytes] :
       {std::pair<std::string, std::string>{"ok.pcd", pcd_ok}, {"ok.ply", ply_ok}}) {
    const std::string path = tmp / name;
    std::ofstream(path, std::ios::binary) << bytes;
    for (const bool keep : {false, true}) {
      const Cloud c = load_cloud(path, nullptr, keep);
      ASSERT_EQ(c.size(), 2) << name;
      EXPECT_EQ(c.field_names, (std::vector<std::string>{"x", "y", "z"})) << name;
      for (int v = 0; v < 6; ++v)
        EXPECT_EQ(double(c.xyz[std::size_t(v)]) + c.origin[std::size_t(v % 3)], v + 1.0)
            << name << " value " << v;
    }
  }
  const std::pair<std::string, std::string> refused[] = {
      {"VERSION 0.7\nFIELDS x y z\n  \nSIZE 4 4 4\n", "line 3: a line of only white space"},
      {"VERSION 0.7\nFIELDS x y z\r\n\r\nSIZE 4 4 4\n", "line 3: an empty line ending in CR LF"}};
  for (const auto& [bytes, why] : refused) {
    const std::string path = tmp / "refused.pcd";
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      load_cloud(path);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const input_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

// Field and property names are whatever word PCL passes through (CloudCompare's
// 'scalar_Roughness_(0.1)', UTF-8), read and written back as they were; bytes that are no
// UTF-8 are refused.
TEST(InputGate, NamesAreAnyWordPclPassesThrough) {
  TempDir tmp;
  const std::vector<std::string> names = {"scalar_Roughness_(0.1)", "scalar_Scalar_field_#1",
                                          "Dichte_\xc3\xa4", "a/b:c=d"};
  std::string list, props;
  for (const auto& n : names) {
    list += " " + n;
    props += "property float " + n + "\n";
  }
  std::ofstream(tmp / "cc.ply", std::ios::binary)
      << ply("ascii", "", 2, xyz_props + props) << "1 2 3 4 5 6 7\n8 9 10 11 12 13 14\n";
  std::ofstream(tmp / "cc.pcd", std::ios::binary)
      << pcd("x y z" + list, "4 4 4 4 4 4 4", "F F F F F F F", "1 1 1 1 1 1 1", 2, "ascii")
      << "1 2 3 4 5 6 7\n8 9 10 11 12 13 14\n";
  std::vector<std::string> want = {"x", "y", "z"};
  want.insert(want.end(), names.begin(), names.end());
  for (const char* in : {"cc.ply", "cc.pcd"}) {
    const Cloud c = load_cloud(tmp / in);
    EXPECT_EQ(c.field_names, want) << in;
    for (const char* ext : {".pcd", ".ply"}) {
      const std::string out = tmp / (std::string("out_") + in + ext);
      save_cloud_subset(c, {1}, out);
      EXPECT_EQ(load_cloud(out).field_names, want) << in << " -> " << ext;
    }
  }
  std::ofstream(tmp / "latin1.pcd", std::ios::binary)
      << pcd("x y z Dichte_\xe4", "4 4 4 4", "F F F F", "1 1 1 1", 1, "ascii") << "1 2 3 4\n";
  try {
    load_cloud(tmp / "latin1.pcd");
    ADD_FAILURE() << "accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: a character (0xE4)"), std::string::npos)
        << e.what();
  }
}

// PCL stops reading once it has the promised rows: blank lines after them (an editor's or a
// script's last newline, spaces, CR LF) hold nothing it ignores, and the file reads as without
// them, however many there are (more than a read block and than a line chunk here). A row after
// them is still data after the last row.
TEST(InputGate, BlankLinesAfterTheLastRowAreNoData) {
  TempDir tmp;
  struct Variant {
    const char* name;
    std::string bytes;
  };
  const std::string crlf_pcd =
      "VERSION 0.7\r\nFIELDS x y z\r\nSIZE 4 4 4\r\nTYPE F F F\r\nCOUNT 1 1 1\r\nWIDTH "
      "2\r\nHEIGHT 1\r\nPOINTS 2\r\nDATA ascii\r\n1 2 3\r\n4 5 6\r\n";
  const Variant variants[] = {
      {"empty_line.pcd", xyz_pcd(2, "ascii") + "1 2 3\n4 5 6\n\n"},
      {"no_last_newline_then_blanks.pcd", xyz_pcd(2, "ascii") + "1 2 3\n4 5 6 \t\n \t\n\n"},
      {"crlf.pcd", crlf_pcd + "\r\n\r\n"},
      {"many.pcd", xyz_pcd(2, "ascii") + "1 2 3\n4 5 6\n" + std::string(3 << 20, '\n')},
      {"spaces.ply",
       ply("ascii", "", 2, xyz_props) + "1 2 3\n4 5 6\n" + std::string(100000, ' ') + "\n\n"}};
  for (const Variant& v : variants) {
    const std::string path = tmp / v.name;
    std::ofstream(path, std::ios::binary) << v.bytes;
    const Cloud c = load_cloud(path, nullptr, /*keep_fields=*/false);
    ASSERT_EQ(c.size(), 2) << v.name;
    EXPECT_EQ(double(c.xyz[3]) + c.origin[0], 4.0) << v.name;
    EXPECT_EQ(double(c.xyz[5]) + c.origin[2], 6.0) << v.name;
    EXPECT_EQ(load_cloud(path, nullptr, /*keep_fields=*/true).size(), 2) << v.name;
  }
  const std::string after = tmp / "row_after_blanks.pcd";
  std::ofstream(after, std::ios::binary)
      << xyz_pcd(1, "ascii") + "1 2 3\n\n" + std::string(70000, ' ') + "\n4 5 6\n\n";
  EXPECT_THROW(load_cloud(after), input_error);
  const std::string fewer = tmp / "fewer_then_blanks.pcd";
  std::ofstream(fewer, std::ios::binary) << xyz_pcd(2, "ascii") + "1.5 2.5 3.5\n\n\n";
  try {
    load_cloud(fewer);
    ADD_FAILURE() << "accepted";
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("the ascii data has 1 rows, POINTS says 2"),
              std::string::npos)
        << e.what();
  }
}

// Files PCL's own writers make — every variant — pass the gate and read as PCL reads them.
TEST(InputGate, AcceptsWhatPclWrites) {
  TempDir tmp;
  pcl::PCLPointCloud2 pc;
  const char* names[] = {"x", "y", "z", "intensity"};
  for (std::uint32_t a = 0; a < 4; ++a) {
    pcl::PCLPointField f;
    f.name = names[a];
    f.offset = 4 * a;
    f.datatype = pcl::PCLPointField::FLOAT32;
    f.count = 1;
    pc.fields.push_back(f);
  }
  pc.width = 4;
  pc.height = 3;
  pc.point_step = 16;
  pc.row_step = 64;
  pc.data.resize(12 * 16);
  for (int i = 0; i < 12; ++i) {
    const float v[4] = {float(i), float(2 * i), i == 5 ? NAN : float(3 * i), 0.5f * i};
    std::memcpy(&pc.data[i * 16], v, 16);
  }
  const Eigen::Vector4f o = Eigen::Vector4f::Zero();
  const Eigen::Quaternionf q = Eigen::Quaternionf::Identity();
  pcl::PCDWriter pw;
  pcl::PLYWriter lw;
  ASSERT_EQ(pw.writeASCII(tmp / "a.pcd", pc), 0);
  ASSERT_EQ(pw.writeBinary(tmp / "b.pcd", pc), 0);            // padded to a page
  ASSERT_EQ(pw.writeBinaryCompressed(tmp / "c.pcd", pc), 0);  // padded too
  ASSERT_EQ(lw.writeASCII(tmp / "cam_a.ply", pc, o, q, 8, true), 0);
  ASSERT_EQ(lw.writeBinary(tmp / "cam_b.ply", pc, o, q, true), 0);
  ASSERT_EQ(lw.writeASCII(tmp / "grid_a.ply", pc, o, q, 8, false), 0);  // range_grid, a hole
  ASSERT_EQ(lw.writeBinary(tmp / "grid_b.ply", pc, o, q, false), 0);
  for (const char* f :
       {"a.pcd", "b.pcd", "c.pcd", "cam_a.ply", "cam_b.ply", "grid_a.ply", "grid_b.ply"}) {
    const Cloud c = load_cloud(tmp / f);
    EXPECT_EQ(c.width, 4u) << f;
    EXPECT_EQ(c.height, 3u) << f;
    EXPECT_EQ(c.finite, 11) << f;
    for (int i = 0; i < 12; ++i) {
      if (i == 5) continue;
      EXPECT_EQ(c.xyz[3 * i + 1] + c.origin[1], 2.0 * i) << f << " point " << i;
    }
  }
}

// ---- The one writer path: every output checked first, staged, committed together ----

std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".pcnn-") != std::string::npos)
      out.push_back(e.path().filename().string());
  return out;
}

void expect_output_error(const std::function<void()>& f, const std::string& why) {
  try {
    f();
    ADD_FAILURE() << "no error (wanted: " << why << ")";
  } catch (const output_error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(OutputSet, ChecksEveryOutputBeforeAnyWork) {
  TempDir tmp;
  std::ofstream(tmp / "in.pcd") << xyz_pcd(1, "ascii") << "1 2 3\n";
  fs::create_directories(tmp / "dir.npy");
  OutputSet o;
  o.add_input(tmp / "in.pcd");
  expect_output_error([&] { o.add(tmp / "x.txt", OutputKind::array); },
                      "unknown extension '.txt' (expected .npy or .csv)");
  expect_output_error([&] { o.add(tmp / "x", OutputKind::array); }, "no extension");
  expect_output_error([&] { o.add(tmp / "x.npy", OutputKind::cloud); },
                      "unknown extension '.npy' (expected .pcd or .ply)");
  expect_output_error([&] { o.add(tmp / "dir.npy", OutputKind::array); }, "is a directory");
  expect_output_error([&] { o.add(tmp / "no/x.npy", OutputKind::array); },
                      "its directory '" + (tmp / "no") + "' does not exist");
  expect_output_error([&] { o.add(tmp / "in.pcd", OutputKind::cloud); },
                      "it is the input '" + (tmp / "in.pcd") + "'");
  fs::create_symlink(tmp / "in.pcd", tmp / "link.pcd");
  fs::create_hard_link(tmp / "in.pcd", tmp / "hard.pcd");
  expect_output_error([&] { o.add(tmp / "link.pcd", OutputKind::cloud); }, "it is the input");
  expect_output_error([&] { o.add(tmp / "hard.pcd", OutputKind::cloud); }, "it is the input");
  o.add(tmp / "a.npy", OutputKind::array);
  expect_output_error([&] { o.add(tmp / "a.npy", OutputKind::array); },
                      "it is also the output '" + (tmp / "a.npy") + "'");
  expect_output_error([&] { o.add(tmp / "./a.npy", OutputKind::array); }, "also the output");
  o.add(tmp / "r", OutputKind::radius);
  EXPECT_EQ(o.files(tmp / "r"),
            (std::vector<std::string>{tmp / "r.offsets.npy", tmp / "r.indices.npy",
                                      tmp / "r.sqdist.npy"}));
  expect_output_error([&] { o.add(tmp / "r.indices.npy", OutputKind::array); }, "also the output");
  expect_output_error([&] { o.add(tmp / "r.bin", OutputKind::radius); }, "unknown extension");
  o.reserve_stdout("--json");
  expect_output_error([&] { o.add("-", OutputKind::array); }, "stdout is taken by --json");
  o.add("/dev/null", OutputKind::array);  // a character device may take several outputs
  o.add("/dev/null", OutputKind::cloud);
  OutputSet twice;  // stdout may not, whatever it is (a terminal is a character device too)
  twice.add("-", OutputKind::array);
  expect_output_error([&] { twice.add("/dev/stdout", OutputKind::array); }, "also the output '-'");
  // The checks created the temporaries (the proof the directory is writable), nothing else.
  EXPECT_EQ(temporaries(tmp / "").size(), 4u);
  EXPECT_FALSE(fs::exists(tmp / "a.npy"));
}

TEST(OutputSet, TemporariesHaveUnpredictableNamesAndGoAwayWithTheSet) {
  TempDir tmp;
  std::vector<std::string> first, second;
  {
    OutputSet a, b;
    a.add(tmp / "x.npy", OutputKind::array);
    first = temporaries(tmp / "");
    b.add(tmp / "x.npy", OutputKind::array);  // another run writing the same output
    second = temporaries(tmp / "");
    ASSERT_EQ(first.size(), 1u);
    ASSERT_EQ(second.size(), 2u);
    EXPECT_EQ(first[0].rfind(".x.npy.pcnn-", 0), 0u) << first[0];
    EXPECT_EQ(first[0].size(), std::string(".x.npy.pcnn-").size() + 12);
  }
  EXPECT_TRUE(temporaries(tmp / "").empty());  // never committed: removed
  EXPECT_FALSE(fs::exists(tmp / "x.npy"));
}

TEST(OutputSet, APlantedSymlinkIsNeverFollowed) {
  TempDir tmp;
  std::ofstream(tmp / "victim.txt") << "victim";
  fs::create_symlink(tmp / "victim.txt", tmp / "out.npy.pcnn-tmp");  // the old, fixed name
  const std::int32_t v[2] = {1, 2};
  write_array(tmp / "out.npy", v, 1, 2);
  std::ifstream is(tmp / "victim.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(is), {}), "victim");
  EXPECT_TRUE(fs::is_symlink(tmp / "out.npy.pcnn-tmp"));
}

std::string read_all(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(is), {});
}

TEST(OutputSet, CommitsAllOutputsOrNone) {
  TempDir tmp;
  std::ofstream(tmp / "a.npy") << "old a";
  const std::int32_t v[4] = {1, 2, 3, 4};
  {
    OutputSet o;
    o.add(tmp / "a.npy", OutputKind::array);
    o.add(tmp / "b.csv", OutputKind::array);
    o.add(tmp / "c.npy", OutputKind::array);
    write_array(o, tmp / "a.npy", v, 2, 2);
    write_array(o, tmp / "b.csv", v, 2, 2);
    write_array(o, tmp / "c.npy", v, 2, 2);
    for (const auto& t : temporaries(tmp / ""))  // the last rename will fail
      if (t.rfind(".c.npy.", 0) == 0) fs::remove(tmp / t);
    expect_output_error([&] { o.commit(); },
                        "cannot write '" + (tmp / "c.npy") + "': cannot rename it into place");
    EXPECT_EQ(read_all(tmp / "a.npy"), "old a");  // put back as it was
    EXPECT_FALSE(fs::exists(tmp / "b.csv"));      // removed
  }
  EXPECT_TRUE(temporaries(tmp / "").empty());
  {
    // A target that changed since add() (something made where nothing was, another file moved
    // over one) is left as it is, and nothing is put in place.
    OutputSet o;
    o.add(tmp / "a.npy", OutputKind::array);
    o.add(tmp / "c.npy", OutputKind::array);
    write_array(o, tmp / "a.npy", v, 2, 2);
    write_array(o, tmp / "c.npy", v, 2, 2);
    fs::create_directories(tmp / "c.npy/in_the_way");
    expect_output_error([&] { o.commit(); },
                        "cannot write '" + (tmp / "c.npy") +
                            "': it changed while pcnn ran (something was made there)");
    EXPECT_EQ(read_all(tmp / "a.npy"), "old a");
    EXPECT_TRUE(fs::is_directory(tmp / "c.npy/in_the_way"));
    fs::remove_all(tmp / "c.npy");
    std::ofstream(tmp / "other") << "other";
    fs::rename(tmp / "other", tmp / "a.npy");
    expect_output_error([&] { o.commit(); }, "another file is there now");
    EXPECT_EQ(read_all(tmp / "a.npy"), "other");
    fs::remove(tmp / "a.npy");  // a target removed meanwhile is simply written
    o.commit();
    EXPECT_EQ(read_all(tmp / "a.npy").substr(1, 5), "NUMPY");
    EXPECT_EQ(read_all(tmp / "c.npy").substr(1, 5), "NUMPY");
  }
  EXPECT_TRUE(temporaries(tmp / "").empty());
  std::ofstream(tmp / "a.npy") << "old a";
  OutputSet o;
  o.add(tmp / "a.npy", OutputKind::array);
  o.add(tmp / "b.csv", OutputKind::array);
  write_array(o, tmp / "a.npy", v, 2, 2);
  expect_output_error([&] { o.commit(); }, "'" + (tmp / "b.csv") + "': nothing was written");
  EXPECT_EQ(read_all(tmp / "a.npy"), "old a");
  // What a signal handler calls: every temporary not yet in place goes, the targets as they were.
  EXPECT_EQ(temporaries(tmp / "").size(), 2u);
  remove_uncommitted_outputs();
  EXPECT_TRUE(temporaries(tmp / "").empty());
  EXPECT_EQ(read_all(tmp / "a.npy"), "old a");
  EXPECT_FALSE(fs::exists(tmp / "b.csv"));
}

// A symlink to a named descriptor writes to the descriptor (the file behind /dev/stdout is the
// shell's, never replaced); standard error, where messages go, is no output.
TEST(OutputSet, LinksToDescriptorsAndStandardError) {
  TempDir tmp;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  fs::create_symlink("/dev/fd/" + std::to_string(pipe_fds[1]), tmp / "to_pipe.csv");
  const std::int32_t v[2] = {7, 8};
  write_array(tmp / "to_pipe.csv", v, 1, 2);
  ::close(pipe_fds[1]);
  char buf[64] = {};
  const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf - 1);
  ::close(pipe_fds[0]);
  EXPECT_GT(n, 0);
  EXPECT_NE(std::string(buf).find("7,8"), std::string::npos) << buf;
  EXPECT_TRUE(fs::is_symlink(tmp / "to_pipe.csv"));

  // stderr on a regular file for a moment (nothing is reported meanwhile): naming it either
  // way is refused.
  const int saved = ::dup(2);
  ASSERT_GE(saved, 0);
  const int log = ::open((tmp / "log.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(log, 0);
  ::dup2(log, 2);
  ::close(log);
  std::vector<std::string> refused;
  for (const std::string& p : {std::string("/dev/stderr"), tmp / "log.txt"}) {
    OutputSet o;
    try {
      o.add(p, OutputKind::array);
    } catch (const output_error& e) {
      refused.push_back(e.what());
    }
  }
  ::dup2(saved, 2);
  ::close(saved);
  ASSERT_EQ(refused.size(), 2u);
  for (const auto& m : refused) EXPECT_NE(m.find("it is standard error"), std::string::npos) << m;
}

// What the shell's > could not write is not replaced: a read-only file (for a user other than
// root, whom permissions do not stop).
TEST(OutputSet, AReadOnlyTargetIsRefusedUpFront) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes read-only files";
  TempDir tmp;
  std::ofstream(tmp / "ro.npy") << "kept";
  fs::permissions(tmp / "ro.npy", fs::perms::owner_read);
  OutputSet o;
  expect_output_error([&] { o.add(tmp / "ro.npy", OutputKind::array); },
                      "it exists and is not writable");
  EXPECT_TRUE(temporaries(tmp / "").empty());
}

TEST(OutputSet, KeepsTheModeOfAReplacedFile) {
  TempDir tmp;
  std::ofstream(tmp / "a.npy") << "old";
  fs::permissions(tmp / "a.npy", fs::perms::owner_read | fs::perms::owner_write);
  const std::int32_t v[1] = {1};
  write_array(tmp / "a.npy", v, 1, 1);
  EXPECT_EQ(fs::status(tmp / "a.npy").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

// Runs `f` in a child process with a file size limit of `bytes` and SIGXFSZ ignored (as the
// pcnn command does); returns what the child's output_error said ("" if none).
std::string under_file_size_limit(rlim_t bytes, const std::function<void()>& f) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{bytes, bytes};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::string msg;
    try {
      f();
    } catch (const std::exception& e) {
      msg = e.what();
    }
    if (!msg.empty() && write(pipefd[1], msg.data(), msg.size()) < 0) _exit(2);
    _exit(0);
  }
  close(pipefd[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) msg.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "the child died of a signal: " << status;
  return msg;
}

TEST(OutputFailures, AFullDiskIsAnOutputErrorForEveryFormat) {
  TempDir tmp;
  std::vector<std::int32_t> idx(100000, 7);
  std::vector<float> xyz(30000, 1.5f);
  const auto check = [&](const std::string& name, const std::function<void()>& f) {
    const std::string msg = under_file_size_limit(4096, f);
    EXPECT_NE(msg.find("cannot write '" + (tmp / name) + "': File too large"), std::string::npos)
        << name << ": " << msg;
    EXPECT_FALSE(fs::exists(tmp / name)) << name;
    EXPECT_TRUE(temporaries(tmp / "").empty()) << name;
  };
  check("i.npy", [&] { write_array(tmp / "i.npy", idx.data(), 50000, 2); });
  check("i.csv", [&] { write_array(tmp / "i.csv", idx.data(), 50000, 2); });
  check("c.pcd", [&] { save_xyz_pcd(tmp / "c.pcd", xyz); });
  check("c.ply", [&] { save_xyz_pcd(tmp / "c.ply", xyz); });
  const std::int64_t off[3] = {0, 50000, 100000};
  std::vector<float> d(100000, 0.5f);
  check("p.csv", [&] { write_pairs_csv(tmp / "p.csv", off, 2, idx.data(), d.data()); });
}

TEST(OutputFailures, ANoSpaceDeviceIsAnOutputError) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  std::vector<std::int32_t> idx(300000, 7);
  expect_output_error([&] { write_array("/dev/full", idx.data(), 100000, 3); },
                      "cannot write '/dev/full': No space left on device");
}

TEST(OutputTargets, NonRegularFilesAreWrittenDirectlyNeverReplaced) {
  TempDir tmp;
  const std::string fifo = tmp / "pipe.npy";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_all(fifo); });
  const std::int32_t v[2] = {5, 6};
  write_array(fifo, v, 1, 2);
  reader.join();
  EXPECT_EQ(got.substr(1, 5), "NUMPY");
  EXPECT_EQ(got.size(), 128u + 8);
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  write_array("/dev/null", v, 1, 2);
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_TRUE(temporaries(tmp / "").empty());
}

TEST(OutputTargets, ASymlinkIsWrittenThrough) {
  TempDir tmp;
  fs::create_directories(tmp / "real");
  std::ofstream(tmp / "real/data.npy") << "old";
  fs::create_symlink("real/data.npy", tmp / "link.npy");  // relative, as ln -s makes them
  const std::int32_t v[2] = {5, 6};
  write_array(tmp / "link.npy", v, 1, 2);
  EXPECT_TRUE(fs::is_symlink(tmp / "link.npy"));
  EXPECT_EQ(read_all(tmp / "real/data.npy").substr(1, 5), "NUMPY");
  EXPECT_TRUE(temporaries(tmp / "").empty());
  EXPECT_TRUE(temporaries(tmp / "real").empty());
}

// ---- pcnn's own .pcd/.ply writers: read back by PCL and by pcnn as they were ----

TEST(CloudWriter, OrganizedCloudsKeepTheirShapeAndEveryField) {
  TempDir tmp;
  // A 3 x 2 organized cloud with double coordinates, a NaN point and a 3-value uint16 field.
  std::ofstream(tmp / "org.pcd")
      << "VERSION 0.7\nFIELDS x y z v\nSIZE 8 8 8 2\nTYPE F F F U\nCOUNT 1 1 1 3\nWIDTH 3\n"
         "HEIGHT 2\nPOINTS 6\nDATA ascii\n0 0 1 1 2 3\n1 0 1 4 5 6\nnan nan nan 7 8 9\n"
         "0 1 1 10 11 12\n1 1 1 13 14 15\n2 1 1 16 17 65535\n";
  const Cloud in = load_cloud(tmp / "org.pcd");
  for (const char* ext : {".pcd", ".ply"}) {
    const std::string out = tmp / (std::string("moved") + ext);
    save_cloud_moved(in, in.xyz, out);
    const Cloud back = load_cloud(out);
    EXPECT_EQ(back.width, 3u) << ext;
    EXPECT_EQ(back.height, 2u) << ext;
    EXPECT_EQ(back.finite, 5) << ext;
    EXPECT_EQ(back.coordinate_type, "float64") << ext;
    pcl::PCLPointCloud2 raw;
    ASSERT_EQ(std::string(ext) == ".pcd" ? pcl::io::loadPCDFile(out, raw)
                                         : pcl::io::loadPLYFile(out, raw),
              0);
    EXPECT_EQ(raw.point_step, 30u) << ext;
    std::uint16_t last;
    std::memcpy(&last, &raw.data[5 * 30 + 24 + 4], 2);
    EXPECT_EQ(last, 65535) << ext;
  }
  // .ply has no value counts: v becomes v_0, v_1, v_2.
  EXPECT_EQ(load_cloud(tmp / "moved.ply").field_names,
            (std::vector<std::string>{"x", "y", "z", "v_0", "v_1", "v_2"}));
}

// smooth's output: a moved point gets its stored coordinates plus the move, in their stored
// type (float64 far from the origin keeps its digits; integers are rounded), an unmoved one its
// record as stored, a non-finite coordinate included.
TEST(CloudWriter, MovedPointsKeepTheirStoredTypeAndDigits) {
  TempDir tmp;
  std::ofstream(tmp / "utm.pcd")
      << pcd("x y z", "8 8 8", "F F F", "1 1 1", 3, "ascii")
      << "500000.123456789 4000000.987654321 100.5\n500001.5 4000002.25 101.125\n"
         "500003.000000001 nan 102\n";
  std::ofstream(tmp / "int.pcd") << pcd("x y z", "4 4 4", "I I I", "1 1 1", 3, "ascii")
                                 << "1000000 -2000000 7\n1000001 -2000001 8\n1000002 5 9\n";
  const double utm[3][3] = {{500000.123456789, 4000000.987654321, 100.5},
                            {500001.5, 4000002.25, 101.125},
                            {500003.000000001, NAN, 102}};
  for (const char* ext : {".pcd", ".ply"}) {
    const Cloud f64 = load_cloud(tmp / "utm.pcd");
    std::vector<float> to = f64.xyz;
    to[0] += 0.25f;  // point 0: x moves by a float the offset holds exactly
    to[5] -= 0.5f;   // point 1: z moves
    // point 2 (y NaN) does not move
    const std::string out = tmp / (std::string("utm_moved") + ext);
    save_cloud_moved(f64, to, out);
    pcl::PCLPointCloud2 raw;  // PCL's reading: every stored value, NaN's neighbors included
    ASSERT_EQ(std::string(ext) == ".pcd" ? pcl::io::loadPCDFile(out, raw)
                                         : pcl::io::loadPLYFile(out, raw),
              0);
    ASSERT_EQ(raw.point_step, 24u) << ext;
    ASSERT_EQ(raw.fields[0].datatype, pcl::PCLPointField::FLOAT64) << ext;
    const double want[3][3] = {{utm[0][0] + 0.25, utm[0][1], utm[0][2]},
                               {utm[1][0], utm[1][1], utm[1][2] - 0.5},
                               {utm[2][0], NAN, utm[2][2]}};
    for (int i = 0; i < 3; ++i)
      for (int a = 0; a < 3; ++a) {
        double got;
        std::memcpy(&got, &raw.data[std::size_t(24 * i + 8 * a)], sizeof got);
        if (std::isnan(want[i][a]))
          EXPECT_TRUE(std::isnan(got)) << ext << " point " << i << " axis " << a;
        else
          EXPECT_EQ(got, want[i][a]) << ext << " point " << i << " axis " << a;
      }
    const Cloud i32 = load_cloud(tmp / "int.pcd");
    std::vector<float> ito = i32.xyz;
    ito[0] += 2.0f;  // point 0: x + 2
    ito[4] += 0.4f;  // point 1: y + 0.4, rounded back to its integer
    ito[6] = NAN;    // point 2: x not a number: the integer stays as it was
    ito[8] += 3.0f;  //          and z + 3
    const std::string iout = tmp / (std::string("int_moved") + ext);
    save_cloud_moved(i32, ito, iout);
    const Cloud iback = load_cloud(iout);
    EXPECT_EQ(iback.coordinate_type, "int32") << ext;
    const double iwant[9] = {1000002, -2000000, 7, 1000001, -2000001, 8, 1000002, 5, 12};
    for (int v = 0; v < 9; ++v)
      EXPECT_EQ(double(iback.xyz[std::size_t(v)]) + iback.origin[std::size_t(v % 3)], iwant[v])
          << ext << " value " << v;
  }
}

TEST(CloudWriter, RefusesWhatPlyCannotHoldAsItWas) {
  TempDir tmp;
  std::ofstream(tmp / "t.pcd") << pcd("x y z t", "4 4 4 8", "F F F U", "1 1 1 1", 1, "ascii")
                               << "1 2 3 4\n";
  std::ofstream(tmp / "red.pcd") << pcd("x y z red", "4 4 4 1", "F F F U", "1 1 1 1", 1, "ascii")
                                 << "1 2 3 4\n";
  const Cloud t = load_cloud(tmp / "t.pcd"), red = load_cloud(tmp / "red.pcd");
  expect_output_error([&] { save_cloud_subset(t, {0}, tmp / "t.ply"); },
                      "field 't' is a 64-bit integer, which .ply cannot hold");
  expect_output_error([&] { save_cloud_subset(red, {0}, tmp / "red.ply"); },
                      "would be read back from .ply as part of a packed color");
  save_cloud_subset(t, {0}, tmp / "t_out.pcd");  // .pcd holds both
  save_cloud_subset(red, {0}, tmp / "red_out.pcd");
  EXPECT_FALSE(fs::exists(tmp / "t.ply"));
  EXPECT_TRUE(temporaries(tmp / "").empty());
}

TEST(CloudWriter, AnEmptySubsetIsAValidEmptyFile) {
  TempDir tmp;
  std::ofstream(tmp / "in.pcd") << xyz_pcd(2, "ascii") << "1 2 3\n4 5 6\n";
  const Cloud in = load_cloud(tmp / "in.pcd");
  for (const char* ext : {".pcd", ".ply"}) {
    save_cloud_subset(in, {}, tmp / (std::string("none") + ext));
    EXPECT_EQ(load_cloud(tmp / (std::string("none") + ext)).size(), 0) << ext;
  }
}

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

// The streamed path (pcnn knn --chunk-rows): rows written chunk by chunk into staged files,
// put in place only by the set's commit, together with the command's other outputs.
TEST(ArrayStreamWriter, WithAnOutputSetTheCommitPutsTheFilesInPlace) {
  TempDir tmp;
  const std::vector<std::int32_t> idx = {1, 2, 3, 4, 5, 6};
  const std::vector<float> d = {0.5f, 1, 1.5f, 2, 2.5f, 3};
  OutputSet o;
  o.add(tmp / "i.npy", OutputKind::array);
  o.add(tmp / "d.csv", OutputKind::array);
  ArrayStreamWriter wi(o, tmp / "i.npy", 3, 2, false, "n"), wd(o, tmp / "d.csv", 3, 2, true, "d");
  for (int r = 0; r < 3; ++r) {
    wi.append(idx.data() + 2 * r, 1);
    wd.append(d.data() + 2 * r, 1);
  }
  wi.finish();
  wd.finish();
  EXPECT_FALSE(fs::exists(tmp / "i.npy"));  // not before the commit
  o.commit();
  write_array(tmp / "whole.npy", idx.data(), 3, 2);
  EXPECT_EQ(read_all(tmp / "i.npy"), read_all(tmp / "whole.npy"));
  EXPECT_EQ(read_all(tmp / "d.csv"), "row,d0,d1\n0,0.5,1\n1,1.5,2\n2,2.5,3\n");
}

// Several writers (MPI ranks) each writing a block of rows into one sized temporary: the file is
// the one write_array writes, in place only after the commit; an uncommitted set leaves nothing.
TEST(SharedArray, BlocksFromSeveralWritersMakeTheWholeArray) {
  TempDir tmp;
  std::vector<float> d(7 * 3);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = 0.25f * float(i);
  std::vector<std::int32_t> c = {3, 1, 4, 1, 5, 9, 2};
  {
    OutputSet o;
    o.add(tmp / "d.npy", OutputKind::array);
    o.add(tmp / "c.npy", OutputKind::array);
    const std::string td = begin_shared_array(o, tmp / "d.npy", 7, 3, ArrayType::float32);
    const std::string tc = begin_shared_array(o, tmp / "c.npy", 7, -1, ArrayType::int32);
    // Created with its full size: a 64-byte aligned header and 7 x 3 floats.
    EXPECT_EQ((fs::file_size(td) - 7 * 3 * 4) % 64, 0u);
    EXPECT_GT(fs::file_size(td), 7u * 3 * 4);
    EXPECT_EQ((fs::file_size(tc) - 7 * 4) % 64, 0u);
  }
  EXPECT_TRUE(fs::is_empty(fs::path(tmp / "")));  // not committed: nothing left
  OutputSet o;
  o.add(tmp / "d.npy", OutputKind::array);
  o.add(tmp / "c.npy", OutputKind::array);
  const std::string td = begin_shared_array(o, tmp / "d.npy", 7, 3, ArrayType::float32);
  const std::string tc = begin_shared_array(o, tmp / "c.npy", 7, -1, ArrayType::int32);
  // Blocks in any order, from separate writers.
  for (const auto& [first, n] : {std::pair<int, int>{4, 3}, {0, 2}, {2, 2}}) {
    SharedArrayWriter wd(td, tmp / "d.npy", 7, 3, ArrayType::float32),
        wc(tc, tmp / "c.npy", 7, -1, ArrayType::int32);
    wd.write_rows(first, n, d.data() + 3 * first);
    wc.write_rows(first, n, c.data() + first);
    wd.finish();
    wc.finish();
  }
  SharedArrayWriter outside(td, tmp / "d.npy", 7, 3, ArrayType::float32);
  EXPECT_THROW(outside.write_rows(6, 2, d.data()), output_error);
  finish_shared_array(o, tmp / "d.npy");
  finish_shared_array(o, tmp / "c.npy");
  EXPECT_FALSE(fs::exists(tmp / "d.npy"));  // not before the commit
  o.commit();
  write_array(tmp / "d1.npy", d.data(), 7, 3);
  EXPECT_EQ(read_all(tmp / "d.npy"), read_all(tmp / "d1.npy"));
  OutputSet v;
  v.add(tmp / "c1.npy", OutputKind::array);
  write_vector(v, tmp / "c1.npy", c.data(), 7, "count");
  v.commit();
  EXPECT_EQ(read_all(tmp / "c.npy"), read_all(tmp / "c1.npy"));
  // CSV and standard output are written by one process.
  OutputSet w;
  w.add(tmp / "x.csv", OutputKind::array);
  EXPECT_FALSE(can_share_array(w, tmp / "x.csv"));
  EXPECT_THROW(begin_shared_array(w, tmp / "x.csv", 1, 1, ArrayType::int32), output_error);
}

}  // namespace
}  // namespace pcnn
