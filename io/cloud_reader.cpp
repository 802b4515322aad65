// Loading .pcd / .ply clouds: x, y and z gathered by the input gate as it checks the data (the
// layouts it reads itself), or through pcl::PCLPointCloud2 (the rest, and every field when kept);
// then re-centered the same way on both paths.
#include <fcntl.h>
#include <pcl/PCLPointCloud2.h>
#include <pcl/console/print.h>
#include <pcl/exceptions.h>
#include <pcl/io/pcd_io.h>
#include <pcl/io/ply_io.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "../core/cpus.hpp"
#include "../core/fresh_pages.hpp"
#include "../core/parallel_blocks.hpp"
#include "cloud_reader.hpp"
#include "coordinate_gather.hpp"
#include "header_check.hpp"
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
  /// then read that regular file as they read any other (`path` names it in messages). Its
  /// header is checked as soon as it has come (`ply`: as .ply, else .pcd), so that a stream that
  /// is no cloud (`yes |`, /dev/zero) is refused at once rather than held in memory to its end;
  /// and it is read no further than a cloud with that header can reach, so that neither is a
  /// valid header followed by an endless stream (io_detail::largest_accepted_size).
  struct Stdin {
    bool ply = false;
  };
  OpenFile(const std::string& path, Stdin in) : path_(path) {
    fd_ = static_cast<int>(::memfd_create("pcnn-stdin", MFD_CLOEXEC));
    if (fd_ < 0) fail(path, std::string("cannot buffer it: ") + std::strerror(errno));
    std::vector<char> buf(1 << 20);
    bool header_seen = false;
    std::uint64_t held = 0, limit = ~std::uint64_t(0);
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
      held += static_cast<std::uint64_t>(n);
      try {
        if (!header_seen && (header_seen = io_detail::header_complete(path, fd_, in.ply)))
          limit = io_detail::largest_accepted_size(path, fd_, in.ply);
        if (held > limit)
          fail(path, "it goes on past the " + std::to_string(limit) +
                         " bytes a cloud with its header can hold (data after the last point?)");
      } catch (...) {
        ::close(fd_);
        throw;
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
    // The destructor does not run for a constructor that throws: the descriptor is closed here.
    std::string refused;
    if (::fstat(fd_, &st_) != 0)
      refused = std::string("cannot stat it: ") + std::strerror(errno);
    else if (S_ISDIR(st_.st_mode))
      refused = "is a directory";
    else if (!S_ISREG(st_.st_mode))
      refused = "not a regular file";
    else if (st_.st_size == 0)
      refused = "the file is empty";
    if (!refused.empty()) {
      ::close(fd_);
      fail(path, refused);
    }
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

// The gate's scalar type of a PCL field type; false for types pcnn does not read.
bool scalar_of(std::uint8_t type, io_detail::Scalar& s) {
  using io_detail::Scalar;
  switch (type) {
    case pcl::PCLPointField::INT8:
      s = Scalar::i8;
      return true;
    case pcl::PCLPointField::UINT8:
      s = Scalar::u8;
      return true;
    case pcl::PCLPointField::INT16:
      s = Scalar::i16;
      return true;
    case pcl::PCLPointField::UINT16:
      s = Scalar::u16;
      return true;
    case pcl::PCLPointField::INT32:
      s = Scalar::i32;
      return true;
    case pcl::PCLPointField::UINT32:
      s = Scalar::u32;
      return true;
    case pcl::PCLPointField::INT64:
      s = Scalar::i64;
      return true;
    case pcl::PCLPointField::UINT64:
      s = Scalar::u64;
      return true;
    case pcl::PCLPointField::FLOAT32:
      s = Scalar::f32;
      return true;
    case pcl::PCLPointField::FLOAT64:
      s = Scalar::f64;
      return true;
    default:
      return false;
  }
}

const pcl::PCLPointField& coordinate_field(const std::string& path,
                                           const pcl::PCLPointCloud2& cloud, const char* name,
                                           io_detail::Scalar& type) {
  const pcl::PCLPointField* found = nullptr;
  for (const auto& f : cloud.fields) {
    if (f.name != name) continue;
    if (found) fail(path, std::string("field '") + name + "' appears twice");
    found = &f;
  }
  if (!found) fail(path, std::string("no '") + name + "' field (x, y and z are required)");
  if (!scalar_of(found->datatype, type))
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
// The fields of a cloud of no points (whose data PCL refuses to read), from its header by PCL's
// header reader, so that a filtered, smoothed or normals cloud of no points keeps them; x, y and z
// as float32 where that reader finds none.
std::shared_ptr<StoredFields> fields_of_no_points(const std::string& name, const std::string& ext) {
  auto stored = std::make_shared<StoredFields>();
  pcl::PCLPointCloud2& pc = stored->cloud;
  int rc = -1;
  // PCL warns "No points to read" for what is, here, the expected case (a process-wide setting,
  // put back however the reader returns).
  struct Quiet {
    pcl::console::VERBOSITY_LEVEL level = pcl::console::getVerbosityLevel();
    Quiet() { pcl::console::setVerbosityLevel(pcl::console::L_ERROR); }
    ~Quiet() { pcl::console::setVerbosityLevel(level); }
  } quiet;
  try {
    Eigen::Vector4f origin;
    Eigen::Quaternionf orientation;
    int version = 0, data_type = 0;
    unsigned int data_idx = 0;
    if (ext == ".pcd")
      rc = pcl::PCDReader().readHeader(name, pc, origin, orientation, version, data_type, data_idx);
    else
      rc = pcl::PLYReader().readHeader(name, pc, origin, orientation, version, data_type, data_idx);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    rc = -1;
  }
  if (rc < 0 || pc.fields.empty()) {
    pc = pcl::PCLPointCloud2();
    for (std::uint32_t a = 0; a < 3; ++a) {
      pcl::PCLPointField f;
      f.name = std::string(1, "xyz"[a]);
      f.offset = 4 * a;
      f.datatype = pcl::PCLPointField::FLOAT32;
      f.count = 1;
      pc.fields.push_back(f);
    }
    pc.point_step = 12;
  }
  pc.width = 0;
  pc.height = 1;
  pc.row_step = 0;
  pc.data.clear();
  return stored;
}

// PCL's header reader on `file` (a .pcd), into `pc`: false where it fails. It sizes (and
// zero-fills) the records' buffer, here within room for `bytes` mapped in on every CPU first, so
// that it neither reallocates nor faults page by page.
bool read_pcd_header_into(const OpenFile& file, std::uint64_t bytes, pcl::PCLPointCloud2& pc,
                          int& data_type, unsigned int& data_idx) {
  pc.data.clear();
  pc.data.reserve(bytes);
  detail::prepare_fresh_pages_parallel(pc.data.data(), pc.data.capacity(), detail::usable_cpus());
  try {
    Eigen::Vector4f origin;
    Eigen::Quaternionf orientation;
    int version = 0;
    return pcl::PCDReader().readHeader(file.name_for_pcl(), pc, origin, orientation, version,
                                       data_type, data_idx) >= 0;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    return false;
  }
}

// The pcl::PCLPointField type of a column of type t (Scalar's order: i8, u8, i16, u16, i32, u32,
// i64, u64, f32, f64).
std::uint8_t pcl_type(io_detail::Scalar t) {
  using F = pcl::PCLPointField;
  constexpr std::uint8_t kTypes[] = {F::INT8,   F::UINT8, F::INT16,  F::UINT16,  F::INT32,
                                     F::UINT32, F::INT64, F::UINT64, F::FLOAT32, F::FLOAT64};
  return kTypes[static_cast<int>(t)];
}

// For an ascii .pcd whose every field is kept: the pcl::PCLPointCloud2 PCL's header reader makes
// of it, into `fields`, and where the gate is to store each column's values in its records
// (`rows`), as PCL's ascii reader would (pcl 1.13 PCDReader::readBodyASCII: '_' fields skipped,
// each value converted to its field's type, which the gate's grammar makes the value it parses;
// is_dense false for a literal "nan"). The gate checks the whole file first, without storing
// anything: a file it refuses is refused before the records are allocated (up to four times the
// file's size) and before PCL reads its header. False for other files, and where PCL's header
// disagrees with the gate's (PCL then reads the file itself). Throws the gate's errors.
bool prepare_ascii_fields(const std::string& path, const OpenFile& file,
                          std::shared_ptr<StoredFields>& fields, io_detail::RowValues& rows) {
  const io_detail::PcdHeader h = io_detail::read_pcd_header(path, file.fd());
  if (h.data != io_detail::PcdHeader::Data::ascii || h.points == 0) return false;
  io_detail::check_input(path, file.fd(), false, file.size());
  auto stored = std::make_shared<StoredFields>();
  pcl::PCLPointCloud2& pc = stored->cloud;
  int data_type = 0;
  unsigned int data_idx = 0;
  if (!read_pcd_header_into(file, h.points * h.point_size, pc, data_type, data_idx) ||
      data_type != 0 || std::uint64_t(pc.width) * pc.height != h.points ||
      pc.fields.size() != h.fields.size() || pc.data.size() != h.points * pc.point_step)
    return false;
  rows.offset.clear();
  rows.type.clear();
  for (std::size_t d = 0; d < pc.fields.size(); ++d) {
    const pcl::PCLPointField& f = pc.fields[d];
    if (f.count != h.fields[d].count || f.datatype != pcl_type(h.fields[d].type)) return false;
    for (std::uint32_t c = 0; c < f.count; ++c) {
      rows.type.push_back(h.fields[d].type);
      rows.offset.push_back(f.name == "_" ? -1
                                          : std::int64_t(f.offset) +
                                                std::int64_t(c) * pcl::getFieldSize(f.datatype));
    }
  }
  rows.data = pc.data.data();
  rows.point_step = pc.point_step;
  rows.rows = h.points;
  fields = std::move(stored);
  return true;
}

// A binary .pcd that the gate checked (its records at shape.binary_pcd_records), read into `pc`
// as PCL 1.13's PCDReader::read reads it (io/src/pcd_io.cpp): PCL's own header, the records
// copied whole, and is_dense false when a float value of any field is not finite. The records are
// read, and is_dense decided, on every CPU (PCL: one thread, 116 ms against ~30 for a 120 MB
// file on the development VM). False where PCL's header says otherwise than the gate (PCL then
// reads the file itself).
bool read_binary_pcd(const std::string& path, const OpenFile& file,
                     const io_detail::InputShape& shape, pcl::PCLPointCloud2& pc) {
  int data_type = 0;
  unsigned int data_idx = 0;
  if (!read_pcd_header_into(file, shape.points * shape.point_size, pc, data_type, data_idx) ||
      data_type != 1 || data_idx != shape.binary_pcd_records ||
      std::uint64_t(pc.width) * pc.height != shape.points ||
      pc.data.size() != shape.points * pc.point_step)
    return false;
  io_detail::read_bytes(path, file.fd(), data_idx, pc.data.size(), pc.data.data(),
                        detail::usable_cpus());
  // Where each float value of a point is (integers are always finite): 4 or 8 bytes.
  std::vector<std::pair<std::uint32_t, bool>> floats;  // offset, double
  for (const auto& f : pc.fields)
    if (f.datatype == pcl::PCLPointField::FLOAT32 || f.datatype == pcl::PCLPointField::FLOAT64)
      for (std::uint32_t c = 0; c < f.count; ++c) {
        const bool wide = f.datatype == pcl::PCLPointField::FLOAT64;
        floats.emplace_back(f.offset + c * (wide ? 8 : 4), wide);
      }
  std::atomic<bool> dense{true};
  if (!floats.empty())
    detail::parallel_blocks(detail::usable_cpus(), static_cast<std::int64_t>(shape.points),
                            std::int64_t(1) << 16, [&](std::int64_t b, std::int64_t e) {
                              if (!dense.load(std::memory_order_relaxed)) return;
                              bool all = true;
                              for (auto i = static_cast<std::size_t>(b);
                                   i < static_cast<std::size_t>(e); ++i) {
                                const std::uint8_t* p = &pc.data[i * pc.point_step];
                                for (const auto& [offset, wide] : floats)
                                  all &= io_detail::finite_at(p + offset, wide);
                              }
                              if (!all) dense = false;
                            });
  pc.is_dense = dense;
  return true;
}

// How PCL 1.13's PLYReader (io/src/ply_io.cpp) makes a field of its cloud from a vertex's
// properties: a field a property, in order, at consecutive offsets; red, green, blue (uchar,
// consecutive: the gate's rule) packed into one "rgb" (float32 bits of r << 16 | g << 8 | b), with
// alpha into "rgba" (uint32, | a << 24); a uchar "intensity" as a float32; nx, ny, nz named
// normal_x, normal_y, normal_z.
struct PlyPart {
  enum class Make { copy, rgb, rgba, intensity } make;
  std::size_t property;          // the (first) property it is made of
  std::uint32_t from, to, size;  // its bytes in a binary vertex, in the point; bytes copied
  bool is_float;                 // a float32 / float64 value (is_dense)
};

// The vertices, when pcnn fills PCL's cloud itself: the first element, of properties of fixed
// size, without obj_info grid, range_grid or camera (which make PCL organize the cloud). Null
// for other files (PCL then reads them).
const io_detail::PlyElement* plain_vertices(const io_detail::PlyHeader& h) {
  if (h.vertex != 0 || h.grid) return nullptr;
  for (const auto& e : h.elements)
    if (e.name == "range_grid" || e.name == "camera") return nullptr;
  const io_detail::PlyElement& v = h.elements[h.vertex];
  return v.count == 0 || v.has_list() ? nullptr : &v;
}

// The cloud PCL makes of vertices `v`, into `pc` (its fields and shape; no data), and how each
// field is made. The parts read every property: together, a binary vertex's every byte.
std::vector<PlyPart> ply_fields(const io_detail::PlyElement& v, pcl::PCLPointCloud2& pc) {
  using io_detail::Scalar;
  using Make = PlyPart::Make;
  std::vector<PlyPart> parts;
  pc = pcl::PCLPointCloud2();
  std::uint32_t from = 0, to = 0;
  const auto& props = v.properties;
  for (std::size_t i = 0; i < props.size(); ++i) {
    const io_detail::PlyProperty& p = props[i];
    pcl::PCLPointField f;
    f.offset = to;
    f.count = 1;
    const std::string prefix = p.name.compare(0, 8, "diffuse_") == 0 ? "diffuse_" : "";
    if (p.type == Scalar::u8 && p.name == prefix + "red") {  // then green, blue (the gate's rule)
      const bool alpha =
          i + 3 < props.size() && props[i + 3].type == Scalar::u8 && props[i + 3].name == "alpha";
      f.name = alpha ? "rgba" : "rgb";
      f.datatype = alpha ? pcl::PCLPointField::UINT32 : pcl::PCLPointField::FLOAT32;
      parts.push_back({alpha ? Make::rgba : Make::rgb, i, from, to, 4, false});
      from += alpha ? 4 : 3;
      i += alpha ? 3 : 2;
      to += 4;
    } else if (p.type == Scalar::u8 && p.name == "intensity") {
      f.name = p.name;
      f.datatype = pcl::PCLPointField::FLOAT32;
      parts.push_back({Make::intensity, i, from, to, 4, false});
      from += 1;
      to += 4;
    } else {
      const std::uint32_t size = io_detail::scalar_size(p.type);
      f.name = p.name == "nx"   ? "normal_x"
               : p.name == "ny" ? "normal_y"
               : p.name == "nz" ? "normal_z"
                                : p.name;
      f.datatype = pcl_type(p.type);
      parts.push_back(
          {Make::copy, i, from, to, size, p.type == Scalar::f32 || p.type == Scalar::f64});
      from += size;
      to += size;
    }
    pc.fields.push_back(f);
  }
  pc.width = static_cast<std::uint32_t>(v.count);
  pc.height = 1;
  pc.point_step = to;
  pc.row_step = to * pc.width;
  return parts;
}

// A binary_little_endian .ply of plain vertices (plain_vertices) read into `pc` as PCL 1.13's
// PLYReader::read reads it (ply_fields; is_dense false when a float32 or float64 property is not
// finite). The vertices are read, and converted, on every CPU. False for other files (PCL then
// reads them).
bool read_binary_ply(const std::string& path, const OpenFile& file,
                     const io_detail::InputShape& shape, pcl::PCLPointCloud2& pc) {
  using Make = PlyPart::Make;
  const io_detail::PlyHeader h = io_detail::read_ply_header(path, file.fd());
  const io_detail::PlyElement* v = plain_vertices(h);
  if (h.format != io_detail::PlyHeader::Format::binary_little_endian || !v ||
      v->count != shape.points)
    return false;
  const std::vector<PlyPart> parts = ply_fields(*v, pc);
  const std::uint32_t to = pc.point_step;
  const std::uint64_t record = v->fixed_size();
  detail::resize_fresh_parallel(pc.data, std::size_t(to) * v->count, detail::usable_cpus());
  const bool same_layout = std::all_of(parts.begin(), parts.end(),
                                       [](const PlyPart& q) { return q.make == Make::copy; });
  if (same_layout)
    io_detail::read_bytes(path, file.fd(), h.data_start, record * v->count, pc.data.data(),
                          detail::usable_cpus());
  std::atomic<bool> dense{true};
  const std::int64_t block = io_detail::records_per_block(record);  // each thread holds one's
  detail::parallel_blocks(
      detail::usable_cpus(), static_cast<std::int64_t>(v->count), block,
      [&](std::int64_t b, std::int64_t e) {
        std::vector<unsigned char> buf;
        if (!same_layout) {
          buf.resize(static_cast<std::size_t>(e - b) * record);
          io_detail::read_bytes(path, file.fd(), h.data_start + std::uint64_t(b) * record,
                                buf.size(), buf.data(), 1);
        }
        bool all = true;
        for (std::int64_t i = b; i < e; ++i) {
          unsigned char* out = &pc.data[std::size_t(i) * to];
          const unsigned char* in = same_layout ? out : buf.data() + std::size_t(i - b) * record;
          for (const PlyPart& q : parts) {
            if (q.make == Make::copy) {
              if (!same_layout) std::memcpy(out + q.to, in + q.from, q.size);
              if (q.is_float) all &= io_detail::finite_at(out + q.to, q.size == 8);
            } else if (q.make == Make::intensity) {
              const float x = in[q.from];
              std::memcpy(out + q.to, &x, 4);
            } else {
              std::uint32_t c = std::uint32_t(in[q.from]) << 16 |
                                std::uint32_t(in[q.from + 1]) << 8 | in[q.from + 2];
              if (q.make == Make::rgba) c |= std::uint32_t(in[q.from + 3]) << 24;
              std::memcpy(out + q.to, &c, 4);
            }
          }
        }
        if (!all) dense = false;
      });
  pc.is_dense = dense;
  return true;
}

// For an ascii .ply of plain vertices (plain_vertices) whose every field is kept: the
// pcl::PCLPointCloud2 PCL's PLYReader makes of it (ply_fields), its records sized, and where
// the gate is to store each vertex property's value in them (`rows`), converted as PCL's
// callbacks convert it (the gate's grammar makes each value the one PCL's ascii parser reads):
// a color's bytes at their place in the packed rgb / rgba word (b, g, r, a from the low byte;
// the rest zero), a uchar intensity as a float32, every other property in its own type;
// is_dense false for a float32 / float64 value that is not finite. As for an ascii .pcd, the
// gate checks the whole file first without storing anything. False for other files.
bool prepare_ascii_ply_fields(const std::string& path, const OpenFile& file,
                              std::shared_ptr<StoredFields>& fields, io_detail::RowValues& rows) {
  using io_detail::Scalar;
  using Make = PlyPart::Make;
  const io_detail::PlyHeader h = io_detail::read_ply_header(path, file.fd());
  const io_detail::PlyElement* v = plain_vertices(h);
  if (h.format != io_detail::PlyHeader::Format::ascii || !v) return false;
  io_detail::check_input(path, file.fd(), true, file.size());
  auto stored = std::make_shared<StoredFields>();
  pcl::PCLPointCloud2& pc = stored->cloud;
  const std::vector<PlyPart> parts = ply_fields(*v, pc);
  rows.offset.assign(v->properties.size(), -1);
  rows.type.resize(v->properties.size());
  for (const PlyPart& q : parts) {
    if (q.make == Make::copy || q.make == Make::intensity) {
      rows.offset[q.property] = q.to;
      rows.type[q.property] = q.make == Make::copy ? v->properties[q.property].type : Scalar::f32;
    } else {  // red, green, blue (, alpha): bytes 2, 1, 0 (, 3) of the little-endian word
      for (std::size_t c = 0; c < (q.make == Make::rgba ? 4u : 3u); ++c) {
        rows.offset[q.property + c] = q.to + (c < 3 ? 2 - c : 3);
        rows.type[q.property + c] = Scalar::u8;
      }
    }
  }
  detail::resize_fresh_parallel(pc.data, std::size_t(pc.point_step) * v->count,
                                detail::usable_cpus());
  rows.data = pc.data.data();
  rows.point_step = pc.point_step;
  rows.rows = v->count;
  rows.rule = io_detail::RowValues::Dense::finite_floats;
  fields = std::move(stored);
  return true;
}

// Reads the file with PCL (the layouts pcnn does not read itself, and every field for
// keep_fields; with `fast`, a binary .pcd by read_binary_pcd, a binary .ply by read_binary_ply)
// and gathers x, y and z from what was read.
std::shared_ptr<StoredFields> read_through_pcl(const std::string& path, const OpenFile& file,
                                               const std::string& ext,
                                               const io_detail::InputShape& shape,
                                               io_detail::Coordinates& xyz, bool fast) {
  auto stored = std::make_shared<StoredFields>();
  pcl::PCLPointCloud2& pc = stored->cloud;
  const bool read = fast && (ext == ".pcd" ? shape.binary_pcd_records > 0 &&
                                                 read_binary_pcd(path, file, shape, pc)
                                           : read_binary_ply(path, file, shape, pc));
  if (!read) read_with_pcl(path, file.name_for_pcl(), ext, pc);
  file.check_unchanged();

  // The gate promised this shape; a PCL that read something else is not trusted further.
  const std::uint64_t n = std::uint64_t(pc.width) * pc.height;
  if (n != shape.points || pc.width != shape.width || pc.height != shape.height)
    fail(path, "PCL read " + std::to_string(pc.width) + " x " + std::to_string(pc.height) +
                   " points where the file holds " + std::to_string(shape.width) + " x " +
                   std::to_string(shape.height));
  if (pc.data.size() < n * pc.point_step)
    fail(path, "the point data is shorter than width x height x point size");
  io_detail::XyzLayout layout;
  for (int a = 0; a < 3; ++a)
    layout.offset[a] =
        coordinate_field(path, pc, std::string(1, "xyz"[a]).c_str(), layout.type[a]).offset;
  io_detail::gather_records(path, pc.data.data(), n, pc.point_step, layout, xyz);
  for (const auto& field : pc.fields) xyz.field_names.push_back(field.name);
  return stored;
}

// An origin for `raw` (3 values a point, as stored): `origin` when given, else one that keeps
// the stored coordinates exact.
template <class T>
void choose_origin(Cloud& c, const std::vector<T>& raw, const std::array<double, 3>* origin) {
  const auto n = static_cast<std::int64_t>(raw.size() / 3);
  if (origin) {
    c.origin = *origin;
    c.exact = recenters_exactly(raw.data(), n, c.origin);
  } else {
    c.origin = exact_origin(raw.data(), n, c.exact);
  }
}

// The coordinates as stored, non-finite points as NaN (searches use them when not exact), on
// several threads.
template <class T>
std::vector<double> stored_coordinates(std::vector<T>& raw) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto n = static_cast<std::int64_t>(raw.size() / 3);
  constexpr std::int64_t kBlock = std::int64_t(1) << 18;  // points a thread's block
  std::vector<double> out;
  if constexpr (!std::is_same_v<T, double>)
    detail::resize_fresh_parallel(out, raw.size(), detail::usable_cpus());
  detail::parallel_blocks(detail::usable_cpus(), n, kBlock, [&](std::int64_t b, std::int64_t e) {
    for (auto i = static_cast<std::size_t>(3 * b); i < static_cast<std::size_t>(3 * e); i += 3) {
      const bool finite =
          std::isfinite(raw[i]) && std::isfinite(raw[i + 1]) && std::isfinite(raw[i + 2]);
      if constexpr (std::is_same_v<T, double>) {  // in place
        if (!finite) raw[i] = raw[i + 1] = raw[i + 2] = nan;
      } else {
        for (int a = 0; a < 3; ++a) out[i + a] = finite ? double(raw[i + a]) : nan;
      }
    }
  });
  if constexpr (std::is_same_v<T, double>)
    return std::move(raw);
  else
    return out;
}

// Re-centers gathered float32 coordinates into c, in their own buffer.
void place(const std::string& path, Cloud& c, std::vector<float>& raw,
           const std::array<double, 3>* origin) {
  choose_origin(c, raw, origin);
  if (!c.exact) c.stored = stored_coordinates(raw);
  const auto n = static_cast<std::int64_t>(raw.size() / 3);
  // With every point finite, an exact origin of +0.0 moves nothing: float(double(p) - 0.0) is p,
  // bit for bit (-0.0 - 0.0 is -0.0), and exact means within range. Common for float files.
  const bool moves = !c.exact || c.finite != n ||
                     std::any_of(c.origin.begin(), c.origin.end(),
                                 [](double o) { return o != 0.0 || std::signbit(o); });
  if (moves) {
    try {
      recenter_in_place(raw.data(), n, c.origin);
    } catch (const error& e) {
      fail(path, e.what());
    }
  }
  c.xyz = std::move(raw);
}

// Re-centers gathered coordinates of other types (as double) into c.
void place(const std::string& path, Cloud& c, std::vector<double>& raw,
           const std::array<double, 3>* origin) {
  choose_origin(c, raw, origin);
  try {
    c.xyz = recenter(raw.data(), static_cast<std::int64_t>(raw.size() / 3), c.origin);
  } catch (const error& e) {
    fail(path, e.what());
  }
  if (!c.exact) c.stored = stored_coordinates(raw);
}

}  // namespace

namespace io_detail {

Cloud load_cloud(const std::string& path_given, const std::array<double, 3>* origin,
                 bool keep_fields, CloudFormat format, CloudReader reader) {
  if (origin)  // the caller's argument, not the file's fault
    for (double o : *origin)
      PCNN_EXPECTS(std::isfinite(o), "load_cloud: the origin to re-center on must be finite");
  const bool from_stdin = path_given == "-";
  const std::string path = from_stdin ? std::string("<stdin>") : path_given;
  std::string ext = format == CloudFormat::pcd   ? ".pcd"
                    : format == CloudFormat::ply ? ".ply"
                                                 : lower_extension(path);
  if (from_stdin && format == CloudFormat::by_extension)
    fail(path, "standard input has no extension: name its format (--format pcd or ply)");
  if (ext != ".pcd" && ext != ".ply")
    fail(path, "unknown extension '" + ext + "' (expected .pcd or .ply, or name the format)");
  const OpenFile file =
      from_stdin ? OpenFile(path, OpenFile::Stdin{ext == ".ply"}) : OpenFile(path);
  // pcnn reads x, y and z itself (as the gate checks the data) where it can, and every field of
  // a .pcd when they are kept; PCL reads the other layouts and fields.
  Coordinates xyz;
  const bool fast = reader == CloudReader::fastest;
  // Every field of an ascii .pcd or .ply is stored by the gate too, as PCL would
  // (prepare_ascii_fields, prepare_ascii_ply_fields).
  std::shared_ptr<StoredFields> fields;
  io_detail::RowValues rows;
  const bool all_by_gate = keep_fields && fast &&
                           (ext == ".pcd" ? prepare_ascii_fields(path, file, fields, rows)
                                          : prepare_ascii_ply_fields(path, file, fields, rows));
  const bool own = (!keep_fields && fast) || all_by_gate;
  const InputShape shape = check_input(path, file.fd(), ext == ".ply", file.size(),
                                       own ? &xyz : nullptr, all_by_gate ? &rows : nullptr);
  Cloud c;
  c.path = path;
  if (shape.points == 0) {  // PCL refuses clouds of no points; the file was checked
    c.height = 1;
    c.coordinate_type = "none";
    if (keep_fields) {
      c.fields = fields_of_no_points(file.name_for_pcl(), ext);
      file.check_unchanged();
    }
    return c;
  }
  if (all_by_gate && rows.filled) {
    fields->cloud.is_dense = rows.dense;
    file.check_unchanged();
  } else if (xyz.gathered && !keep_fields) {
    file.check_unchanged();
  } else {
    fields = read_through_pcl(path, file, ext, shape, xyz, fast);
  }
  // The gate's shape (PCL's was checked against it), below 2^32 by the header checks.
  c.width = static_cast<std::uint32_t>(shape.width);
  c.height = static_cast<std::uint32_t>(shape.height);
  c.coordinate_type = scalar_name(xyz.type[0]);
  for (int a = 1; a < 3; ++a)
    if (xyz.type[a] != xyz.type[0]) c.coordinate_type = "mixed";
  c.field_names = std::move(xyz.field_names);
  c.finite = xyz.finite;
  if (xyz.is_single())
    place(path, c, xyz.single, origin);
  else
    place(path, c, xyz.wide, origin);
  if (keep_fields) c.fields = std::move(fields);
  return c;
}

}  // namespace io_detail

Cloud load_cloud(const std::string& path, const std::array<double, 3>* origin, bool keep_fields,
                 CloudFormat format) {
  return io_detail::load_cloud(path, origin, keep_fields, format, io_detail::CloudReader::fastest);
}

namespace {
void fill_stored(Cloud& c) {
  if (!c.stored.empty() || c.xyz.empty()) return;
  detail::resize_fresh_parallel(c.stored, c.xyz.size(), detail::usable_cpus());
  const auto n = static_cast<std::int64_t>(c.xyz.size() / 3);
  // Exact: each sum is the stored value.
  detail::parallel_blocks(
      detail::usable_cpus(), n, std::int64_t(1) << 18, [&](std::int64_t b, std::int64_t e) {
        for (auto i = static_cast<std::size_t>(3 * b); i < static_cast<std::size_t>(3 * e); ++i)
          c.stored[i] = double(c.xyz[i]) + c.origin[i % 3];
      });
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
