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

template <class T>
void write_any(const std::string& path, const T* data, std::int64_t rows, int cols,
               const char* descr, const std::string& prefix) {
  io_detail::write_atomically(path, [&](const std::string& tmp) -> std::string {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) return std::strerror(errno);
    if (ends_with_csv(path)) {
      os << "row";
      for (int j = 0; j < cols; ++j) os << ',' << prefix << j;
      os << '\n';
      for (std::int64_t r = 0; r < rows; ++r) {
        os << r;
        for (int j = 0; j < cols; ++j) {
          os << ',';
          write_value(os, data[static_cast<std::size_t>(r) * cols + j]);
        }
        os << '\n';
      }
    } else {
      os << npy_header(descr, rows, cols);  // the data below is little-endian, as on x86/ARM
      os.write(reinterpret_cast<const char*>(data),
               static_cast<std::streamsize>(static_cast<std::size_t>(rows) * cols * sizeof(T)));
    }
    os.flush();
    return os ? "" : std::strerror(errno);
  });
}

}  // namespace

void write_array(const std::string& path, const std::int32_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_any(path, data, rows, cols, "<i4", prefix);
}

void write_array(const std::string& path, const float* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_any(path, data, rows, cols, "<f4", prefix);
}

void write_array(const std::string& path, const std::int64_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_any(path, data, rows, cols, "<i8", prefix);
}

struct ArrayStreamWriter::Impl {
  std::string path, tmp, prefix;
  std::int64_t rows, written = 0;
  int cols;
  bool is_float, csv, done = false;
  std::ofstream os;
};

ArrayStreamWriter::ArrayStreamWriter(const std::string& path, std::int64_t rows, int cols,
                                     bool is_float, const std::string& prefix)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.tmp = path + ".pcnn-tmp";
  m.prefix = prefix;
  m.rows = rows;
  m.cols = cols;
  m.is_float = is_float;
  m.csv = ends_with_csv(path);
  m.os.open(m.tmp, std::ios::binary | std::ios::trunc);
  if (!m.os) throw output_error("cannot write '" + path + "': " + std::strerror(errno));
  if (m.csv) {
    m.os << "row";
    for (int j = 0; j < cols; ++j) m.os << ',' << prefix << j;
    m.os << '\n';
  } else {
    m.os << npy_header(is_float ? "<f4" : "<i4", rows, cols);
  }
}

ArrayStreamWriter::~ArrayStreamWriter() {
  if (impl_ && !impl_->done) {
    impl_->os.close();
    std::remove(impl_->tmp.c_str());
  }
}

void ArrayStreamWriter::append(const void* data, std::int64_t rows) {
  Impl& m = *impl_;
  if (m.written + rows > m.rows)
    throw output_error("cannot write '" + m.path + "': more rows than announced");
  const std::size_t values = static_cast<std::size_t>(rows) * m.cols;
  if (!m.csv) {
    m.os.write(static_cast<const char*>(data), static_cast<std::streamsize>(values * 4));
  } else {
    for (std::int64_t r = 0; r < rows; ++r) {
      m.os << m.written + r;
      for (int j = 0; j < m.cols; ++j) {
        m.os << ',';
        const std::size_t at = static_cast<std::size_t>(r) * m.cols + j;
        if (m.is_float)
          write_value(m.os, static_cast<const float*>(data)[at]);
        else
          write_value(m.os, static_cast<const std::int32_t*>(data)[at]);
      }
      m.os << '\n';
    }
  }
  m.written += rows;
  if (!m.os) throw output_error("cannot write '" + m.path + "': " + std::strerror(errno));
}

void ArrayStreamWriter::finish() {
  Impl& m = *impl_;
  if (m.written != m.rows)
    throw output_error("cannot write '" + m.path + "': " + std::to_string(m.written) + " of " +
                       std::to_string(m.rows) + " rows");
  m.os.flush();
  m.os.close();
  if (!m.os) throw output_error("cannot write '" + m.path + "': " + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(m.tmp, m.path, ec);
  if (ec) throw output_error("cannot write '" + m.path + "': " + ec.message());
  m.done = true;
}

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
