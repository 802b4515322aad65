// Loading .pcd / .ply clouds through pcl::PCLPointCloud2, converting x/y/z by their stored type.
#include <fcntl.h>
#include <pcl/PCLPointCloud2.h>
#include <pcl/exceptions.h>
#include <pcl/io/pcd_io.h>
#include <pcl/io/ply_io.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "input_gate.hpp"
#include "pcnn/io.hpp"
#include "pcnn/recenter.hpp"
#include "stored_fields.hpp"

namespace pcnn {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw input_error("cannot read cloud '" + path + "': " + why, path);
}

std::string lower_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext;
}

// The file, opened once: the gate and PCL read this one file, whatever its name points to
// later. O_NONBLOCK so that opening a FIFO does not wait for a writer before being refused.
class OpenFile {
 public:
  /// Standard input, read to its end into an anonymous in-memory file first: the gate and PCL
  /// then read that regular file as they read any other (`path` names it in messages).
  struct Stdin {};
  OpenFile(const std::string& path, Stdin) : path_(path) {
    fd_ = static_cast<int>(::memfd_create("pcnn-stdin", MFD_CLOEXEC));
    if (fd_ < 0) fail(path, std::string("cannot buffer it: ") + std::strerror(errno));
    std::vector<char> buf(1 << 20);
    for (;;) {
      const ssize_t n = ::read(0, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ::close(fd_);
        fail(path, std::string("cannot read it: ") + std::strerror(errno));
      }
      if (n == 0) break;
      for (ssize_t done = 0; done < n;) {
        const ssize_t k = ::write(fd_, buf.data() + done, static_cast<std::size_t>(n - done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          ::close(fd_);
          fail(path, std::string("cannot buffer it: ") + std::strerror(errno));
        }
        done += k;
      }
    }
    if (::fstat(fd_, &st_) != 0) {
      ::close(fd_);
      fail(path, std::string("cannot stat it: ") + std::strerror(errno));
    }
    if (st_.st_size == 0) {
      ::close(fd_);
      fail(path, "it is empty");
    }
  }

  explicit OpenFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      if (errno == ENOENT || errno == ENOTDIR) fail(path, "no such file");
      fail(path, std::string("cannot open it: ") + std::strerror(errno));
    }
    if (::fstat(fd_, &st_) != 0) fail(path, std::string("cannot stat it: ") + std::strerror(errno));
    if (S_ISDIR(st_.st_mode)) fail(path, "is a directory");
    if (!S_ISREG(st_.st_mode)) fail(path, "not a regular file");
    if (st_.st_size == 0) fail(path, "the file is empty");
  }
  ~OpenFile() { ::close(fd_); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size() const { return static_cast<std::uint64_t>(st_.st_size); }

  // A name under which PCL opens this very file (not whatever `path` names by then).
  std::string name_for_pcl() const {
    const std::string p = "/proc/self/fd/" + std::to_string(fd_);
    return ::access(p.c_str(), R_OK) == 0 ? p : path_;
  }

  // Throws if the file was written to since it was opened (between the gate and PCL).
  void check_unchanged() const {
    struct stat now;
    if (::fstat(fd_, &now) != 0 || now.st_size != st_.st_size ||
        now.st_mtim.tv_sec != st_.st_mtim.tv_sec || now.st_mtim.tv_nsec != st_.st_mtim.tv_nsec ||
        now.st_ctim.tv_sec != st_.st_ctim.tv_sec || now.st_ctim.tv_nsec != st_.st_ctim.tv_nsec)
      fail(path_, "the file changed while it was being read");
  }

 private:
  std::string path_;
  int fd_ = -1;
  struct stat st_ {};
};

// Reads `name` (the file the gate checked) with PCL; `path` names it in messages.
void read_with_pcl(const std::string& path, const std::string& name, const std::string& ext,
                   pcl::PCLPointCloud2& cloud) {
  int rc = 0;
  try {
    Eigen::Vector4f origin;
    Eigen::Quaternionf orientation;
    if (ext == ".pcd") {
      pcl::PCDReader reader;
      int version = 0;
      rc = reader.read(name, cloud, origin, orientation, version);
    } else {
      pcl::PLYReader reader;
      int version = 0;
      rc = reader.read(name, cloud, origin, orientation, version);
    }
  } catch (const pcl::PCLException& e) {
    fail(path, std::string("PCL: ") + e.detailedMessage());
  } catch (const std::bad_alloc&) {
    throw;  // out of host memory is not a property of the file
  } catch (const std::exception& e) {
    fail(path, std::string("PCL: ") + e.what());
  }
  if (rc < 0) fail(path, "PCL could not parse it as " + ext + " (see PCL's message above)");
}

// Reads one coordinate of the given PCL type as double.
double read_as_double(const std::uint8_t* p, std::uint8_t type) {
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return static_cast<double>(v);
  };
  switch (type) {
    case pcl::PCLPointField::INT8:
      return get(std::int8_t{});
    case pcl::PCLPointField::UINT8:
      return get(std::uint8_t{});
    case pcl::PCLPointField::INT16:
      return get(std::int16_t{});
    case pcl::PCLPointField::UINT16:
      return get(std::uint16_t{});
    case pcl::PCLPointField::INT32:
      return get(std::int32_t{});
    case pcl::PCLPointField::UINT32:
      return get(std::uint32_t{});
    case pcl::PCLPointField::INT64:
      return get(std::int64_t{});
    case pcl::PCLPointField::UINT64:
      return get(std::uint64_t{});
    case pcl::PCLPointField::FLOAT32:
      return get(float{});
    case pcl::PCLPointField::FLOAT64:
      return get(double{});
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

const char* type_name(std::uint8_t type) {
  switch (type) {
    case pcl::PCLPointField::INT8:
      return "int8";
    case pcl::PCLPointField::UINT8:
      return "uint8";
    case pcl::PCLPointField::INT16:
      return "int16";
    case pcl::PCLPointField::UINT16:
      return "uint16";
    case pcl::PCLPointField::INT32:
      return "int32";
    case pcl::PCLPointField::UINT32:
      return "uint32";
    case pcl::PCLPointField::INT64:
      return "int64";
    case pcl::PCLPointField::UINT64:
      return "uint64";
    case pcl::PCLPointField::FLOAT32:
      return "float32";
    case pcl::PCLPointField::FLOAT64:
      return "float64";
    default:
      return nullptr;
  }
}

const pcl::PCLPointField& coordinate_field(const std::string& path,
                                           const pcl::PCLPointCloud2& cloud, const char* name) {
  const pcl::PCLPointField* found = nullptr;
  for (const auto& f : cloud.fields) {
    if (f.name != name) continue;
    if (found) fail(path, std::string("field '") + name + "' appears twice");
    found = &f;
  }
  if (!found) fail(path, std::string("no '") + name + "' field (x, y and z are required)");
  if (!type_name(found->datatype))
    fail(path, std::string("field '") + name + "' has an unsupported type (" +
                   std::to_string(found->datatype) + ")");
  if (found->count != 1)
    fail(path, std::string("field '") + name + "' has count " + std::to_string(found->count) +
                   ", expected 1");
  const std::uint64_t end = std::uint64_t(found->offset) + pcl::getFieldSize(found->datatype);
  if (end > cloud.point_step)
    fail(path, std::string("field '") + name + "' lies outside the point record");
  return *found;
}

}  // namespace

Cloud load_cloud(const std::string& path_given, const std::array<double, 3>* origin,
                 bool keep_fields, CloudFormat format) {
  const bool from_stdin = path_given == "-";
  const std::string path = from_stdin ? std::string("<stdin>") : path_given;
  std::string ext = format == CloudFormat::pcd   ? ".pcd"
                    : format == CloudFormat::ply ? ".ply"
                                                 : lower_extension(path);
  if (from_stdin && format == CloudFormat::by_extension)
    fail(path, "standard input has no extension: name its format (--format pcd or ply)");
  if (ext != ".pcd" && ext != ".ply")
    fail(path, "unknown extension '" + ext + "' (expected .pcd or .ply, or name the format)");
  const OpenFile file = from_stdin ? OpenFile(path, OpenFile::Stdin{}) : OpenFile(path);
  const io_detail::InputShape shape =
      io_detail::check_input(path, file.fd(), ext == ".ply", file.size());
  if (shape.points == 0) {  // PCL refuses clouds of no points; the file was checked
    Cloud empty;
    empty.path = path;
    empty.height = 1;
    empty.coordinate_type = "none";
    return empty;
  }
  pcl::PCLPointCloud2 pc;
  read_with_pcl(path, file.name_for_pcl(), ext, pc);
  file.check_unchanged();

  // The gate promised this shape; a PCL that read something else is not trusted further.
  const std::uint64_t n = std::uint64_t(pc.width) * pc.height;
  if (n != shape.points || pc.width != shape.width || pc.height != shape.height)
    fail(path, "PCL read " + std::to_string(pc.width) + " x " + std::to_string(pc.height) +
                   " points where the file holds " + std::to_string(shape.width) + " x " +
                   std::to_string(shape.height));
  if (pc.data.size() < n * pc.point_step)
    fail(path, "the point data is shorter than width x height x point size");
  const pcl::PCLPointField* f[3] = {&coordinate_field(path, pc, "x"),
                                    &coordinate_field(path, pc, "y"),
                                    &coordinate_field(path, pc, "z")};

  Cloud c;
  c.path = path;
  c.width = pc.width;
  c.height = pc.height;
  c.coordinate_type = type_name(f[0]->datatype);
  for (const auto& field : pc.fields) c.field_names.push_back(field.name);
  for (int a = 1; a < 3; ++a)
    if (f[a]->datatype != f[0]->datatype) c.coordinate_type = "mixed";

  std::vector<double> xyz(n * 3);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint8_t* rec = pc.data.data() + i * pc.point_step;
    double* p = &xyz[i * 3];
    for (int a = 0; a < 3; ++a) p[a] = read_as_double(rec + f[a]->offset, f[a]->datatype);
    if (std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2])) ++c.finite;
  }
  // An origin that keeps the stored coordinates exactly (float files always have one: 0).
  if (origin) {
    c.origin = *origin;
    c.exact = recenters_exactly(xyz.data(), static_cast<std::int64_t>(n), c.origin);
  } else {
    c.origin = exact_origin(xyz.data(), static_cast<std::int64_t>(n), c.exact);
  }
  try {
    c.xyz = recenter(xyz.data(), static_cast<std::int64_t>(n), c.origin);
  } catch (const error& e) {
    fail(path, e.what());
  }
  if (!c.exact) {  // searches use the coordinates as stored; non-finite points as NaN, as xyz
    for (std::uint64_t i = 0; i < n; ++i) {
      double* p = &xyz[i * 3];
      if (!(std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2])))
        p[0] = p[1] = p[2] = std::numeric_limits<double>::quiet_NaN();
    }
    c.stored = std::move(xyz);
  }
  if (keep_fields) {
    auto stored = std::make_shared<StoredFields>();
    stored->cloud = std::move(pc);
    c.fields = std::move(stored);
  }
  return c;
}

namespace {
void fill_stored(Cloud& c) {
  if (!c.stored.empty() || c.xyz.empty()) return;
  c.stored.resize(c.xyz.size());
  for (std::size_t i = 0; i < c.xyz.size(); ++i)
    c.stored[i] = double(c.xyz[i]) + c.origin[i % 3];  // exact: the sum is the stored value
}
}  // namespace

std::pair<PointsView, PointsView> search_views(Cloud& refs, Cloud* queries) {
  if (refs.exact && (!queries || queries->exact))
    return {refs.view(), queries ? queries->view() : PointsView{}};
  fill_stored(refs);
  if (queries) fill_stored(*queries);
  const auto of = [](const Cloud& c) { return host_points(c.stored.data(), c.size()); };
  return {of(refs), queries ? of(*queries) : PointsView{}};
}

}  // namespace pcnn
