// Writing result arrays as NumPy .npy or CSV.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "atomic_file.hpp"
#include "pcnn/io.hpp"

namespace pcnn {
namespace {

bool ends_with_csv(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == ".csv";
}

// NPY format 1.0: magic, version, little-endian header length, a Python dict literal padded
// with spaces and ending in '\n' so that the data starts on a 64-byte boundary.
std::string npy_header(const char* descr, std::int64_t rows, int cols) {
  std::ostringstream dict;
  dict << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (" << rows << ", " << cols
       << "), }";
  std::string h = dict.str();
  const std::size_t unpadded = 10 + h.size() + 1;
  h.append((64 - unpadded % 64) % 64, ' ');
  h.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(h.size() & 0xff));
  out.push_back(static_cast<char>(h.size() >> 8));
  return out + h;
}

template <class T>
void write_value(std::ostream& os, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isinf(v)) {
      os << (v > 0 ? "inf" : "-inf");
      return;
    }
    os << std::setprecision(std::numeric_limits<T>::max_digits10) << v;
  } else {
    os << v;
  }
}

}  // namespace

// An array file being written: the header, then rows appended in order, into a temporary file
// that finish() renames into place and that is removed if the writing stops before.
struct ArrayStreamWriter::Impl {
  std::string path, tmp;
  std::int64_t rows, written = 0;
  int cols;
  bool csv, done = false;
  std::ofstream os;

  Impl(const std::string& p, std::int64_t r, int c, const char* descr, const std::string& prefix)
      : path(p), tmp(p + ".pcnn-tmp"), rows(r), cols(c), csv(ends_with_csv(p)) {
    os.open(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw output_error("cannot write '" + path + "': " + std::strerror(errno));
    if (csv) {
      os << "row";
      for (int j = 0; j < cols; ++j) os << ',' << prefix << j;
      os << '\n';
    } else {
      os << npy_header(descr, rows, cols);  // the data below is little-endian, as on x86/ARM
    }
  }
  ~Impl() {
    if (done) return;
    os.close();
    std::remove(tmp.c_str());
  }

  template <class T>
  void append(const T* data, std::int64_t n) {
    if (written + n > rows)
      throw output_error("cannot write '" + path + "': more rows than announced");
    if (!csv) {
      os.write(reinterpret_cast<const char*>(data),
               static_cast<std::streamsize>(static_cast<std::size_t>(n) * cols * sizeof(T)));
    } else {
      for (std::int64_t r = 0; r < n; ++r) {
        os << written + r;
        for (int j = 0; j < cols; ++j) {
          os << ',';
          write_value(os, data[static_cast<std::size_t>(r) * cols + j]);
        }
        os << '\n';
      }
    }
    written += n;
    if (!os) throw output_error("cannot write '" + path + "': " + std::strerror(errno));
  }

  void finish() {
    if (written != rows)
      throw output_error("cannot write '" + path + "': " + std::to_string(written) + " of " +
                         std::to_string(rows) + " rows");
    os.flush();
    os.close();
    if (!os) throw output_error("cannot write '" + path + "': " + std::strerror(errno));
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw output_error("cannot write '" + path + "': " + ec.message());
    done = true;
  }
};

namespace {

template <class T>
void write_whole(const std::string& path, const T* data, std::int64_t rows, int cols,
                 const char* descr, const std::string& prefix) {
  ArrayStreamWriter::Impl file(path, rows, cols, descr, prefix);
  file.append(data, rows);
  file.finish();
}

}  // namespace

void write_array(const std::string& path, const std::int32_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_whole(path, data, rows, cols, "<i4", prefix);
}

void write_array(const std::string& path, const float* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_whole(path, data, rows, cols, "<f4", prefix);
}

void write_array(const std::string& path, const std::int64_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_whole(path, data, rows, cols, "<i8", prefix);
}

ArrayStreamWriter::ArrayStreamWriter(const std::string& path, std::int64_t rows, int cols,
                                     bool is_float, const std::string& prefix)
    : impl_(std::make_unique<Impl>(path, rows, cols, is_float ? "<f4" : "<i4", prefix)),
      is_float_(is_float) {}

ArrayStreamWriter::~ArrayStreamWriter() = default;

void ArrayStreamWriter::append(const void* data, std::int64_t rows) {
  if (is_float_)
    impl_->append(static_cast<const float*>(data), rows);
  else
    impl_->append(static_cast<const std::int32_t*>(data), rows);
}

void ArrayStreamWriter::finish() { impl_->finish(); }

void write_pairs_csv(const std::string& path, const std::int64_t* offsets, std::int64_t rows,
                     const std::int32_t* indices, const float* sqdist) {
  io_detail::write_atomically(path, [&](const std::string& tmp) -> std::string {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) return std::strerror(errno);
    os << "query,neighbor,sqdist\n";
    for (std::int64_t q = 0; q < rows; ++q)
      for (std::int64_t i = offsets[q]; i < offsets[q + 1]; ++i) {
        os << q << ',' << indices[i] << ',';
        write_value(os, sqdist[i]);
        os << '\n';
      }
    os.flush();
    return os ? "" : std::strerror(errno);
  });
}

}  // namespace pcnn
