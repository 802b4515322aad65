// Writing result arrays as NumPy .npy or CSV, through the one output path (output_file.hpp).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "output_file.hpp"
#include "pcnn/io.hpp"

namespace pcnn {
namespace {

using io_detail::Format;

// NPY format 1.0: magic, version, little-endian header length, a Python dict literal padded
// with spaces and ending in '\n' so that the data starts on a 64-byte boundary.
// A 1-D array (`cols` < 0) has the shape (rows,).
std::string npy_header(const char* descr, std::int64_t rows, int cols) {
  std::ostringstream dict;
  dict << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (" << rows;
  if (cols >= 0)
    dict << ", " << cols;
  else
    dict << ',';
  dict << "), }";
  std::string h = dict.str();
  const std::size_t unpadded = 10 + h.size() + 1;
  h.append((64 - unpadded % 64) % 64, ' ');
  h.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(h.size() & 0xff));
  out.push_back(static_cast<char>(h.size() >> 8));
  return out + h;
}

// As `ostream << setprecision(max_digits10) << v` writes it (printf's %.*g), infinities as
// inf / -inf.
template <class T>
void append_value(std::string& out, T v) {
  char buf[64];
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isinf(v)) {
      out += v > 0 ? "inf" : "-inf";
      return;
    }
    const int n = std::snprintf(buf, sizeof buf, "%.*g", std::numeric_limits<T>::max_digits10,
                                static_cast<double>(v));
    out.append(buf, static_cast<std::size_t>(n));
  } else {
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
}

template <class T>
void append_value_line(std::string& out, std::int64_t row, const T* values, int cols) {
  append_value(out, row);
  for (int j = 0; j < cols; ++j) {
    out += ',';
    append_value(out, values[j]);
  }
  out += '\n';
}

}  // namespace

bool can_share_array(OutputSet& outputs, const std::string& path) {
  const Format f = io_detail::output_format(outputs, path);
  return (f == Format::npy || f == Format::csr_npy) &&
         !io_detail::staged_temporary(outputs, path).empty();
}

namespace {
const char* descr_of(ArrayType t) {
  return t == ArrayType::int32 ? "<i4" : t == ArrayType::float32 ? "<f4" : "<i8";
}
std::int64_t bytes_of(ArrayType t) { return t == ArrayType::int64 ? 8 : 4; }
}  // namespace

std::string begin_shared_array(OutputSet& outputs, const std::string& path, std::int64_t rows,
                               int cols, ArrayType type) {
  if (!can_share_array(outputs, path))
    throw output_error("cannot write '" + path + "' from several processes (not a .npy file)",
                       path);
  if (rows < 0) throw output_error("cannot write '" + path + "': a negative shape", path);
  const std::string temporary = io_detail::staged_temporary(outputs, path);
  const std::string header = npy_header(descr_of(type), rows, cols);
  io_detail::OutputFile& file = io_detail::begin_output(outputs, path);
  file.write(header);  // at offset 0 when the file is finished; the rows go after it
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) file.fail(std::string("cannot open its temporary: ") + std::strerror(errno));
  const std::int64_t bytes =
      static_cast<std::int64_t>(header.size()) + rows * std::max(cols, 1) * bytes_of(type);
  const int rc = ::ftruncate(fd, static_cast<off_t>(bytes));
  const int err = errno;
  ::close(fd);
  if (rc != 0) file.fail(std::string("cannot size its temporary: ") + std::strerror(err));
  return temporary;
}

void finish_shared_array(OutputSet& outputs, const std::string& path) {
  io_detail::begun_output(outputs, path).finish();
}

SharedArrayWriter::SharedArrayWriter(const std::string& temporary, const std::string& path,
                                     std::int64_t rows, int cols, ArrayType type)
    : path_(path),
      rows_(rows),
      row_bytes_(bytes_of(type) * std::max(cols, 1)),
      data_offset_(static_cast<std::int64_t>(npy_header(descr_of(type), rows, cols).size())) {
  fd_ = ::open(temporary.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw output_error("cannot write '" + path + "': cannot open its temporary '" + temporary +
                           "': " + std::strerror(errno),
                       path);
}

SharedArrayWriter::~SharedArrayWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SharedArrayWriter::write_rows(std::int64_t first, std::int64_t n, const void* data) {
  if (first < 0 || n < 0 || first + n > rows_)
    throw output_error("cannot write '" + path_ + "': rows outside the array", path_);
  const char* p = static_cast<const char*>(data);
  std::int64_t left = n * row_bytes_, at = data_offset_ + first * row_bytes_;
  while (left > 0) {
    const ssize_t w =
        ::pwrite(fd_, p, static_cast<std::size_t>(std::min<std::int64_t>(left, 1 << 30)),
                 static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw output_error("cannot write '" + path_ + "': " + std::strerror(w < 0 ? errno : ENOSPC),
                         path_);
    p += w;
    at += w;
    left -= w;
  }
}

void SharedArrayWriter::finish() {
  const int fd = std::exchange(fd_, -1);
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !synced)
    throw output_error("cannot write '" + path_ + "': " + std::strerror(synced ? errno : err),
                       path_);
}

// An array file being written: the header, then rows appended in order. Without an OutputSet,
// the writer makes a one-output set of its own and commits it in finish(). `c` < 0: a 1-D array
// of `r` values (CSV: one value per row, in a column named `prefix`).
struct ArrayStreamWriter::Impl {
  std::unique_ptr<OutputSet> own;
  io_detail::OutputFile* file = nullptr;
  std::int64_t rows, written = 0;
  int cols;
  bool csv = false;
  std::string text;

  Impl(OutputSet* set, const std::string& path, std::int64_t r, int c, const char* descr,
       const std::string& prefix)
      : rows(r), cols(c < 0 ? 1 : c) {
    if (!set) {
      own = std::make_unique<OutputSet>();
      own->add(path, OutputKind::array);
      set = own.get();
    }
    const Format f = io_detail::output_format(*set, path);
    if (f != Format::npy && f != Format::csv)
      throw output_error("cannot write '" + path + "': it was declared as another kind of output",
                         path);
    csv = f == Format::csv;
    if (rows < 0) throw output_error("cannot write '" + path + "': a negative shape", path);
    file = &io_detail::begin_output(*set, path);
    if (csv) {
      text = "row";
      if (c < 0) text += "," + prefix;
      for (int j = 0; j < c; ++j) text += "," + prefix + std::to_string(j);
      text += '\n';
      file->write(text);
    } else {
      file->write(npy_header(descr, rows, c));  // the data below is little-endian, as on x86/ARM
    }
  }

  template <class T>
  void append(const T* data, std::int64_t n) {
    if (n < 0 || written + n > rows) file->fail("more rows than announced");
    if (!csv) {
      file->write(data, static_cast<std::size_t>(n) * static_cast<std::size_t>(cols) * sizeof(T));
    } else {
      for (std::int64_t r = 0; r < n; ++r) {
        text.clear();
        append_value_line(text, written + r, data + static_cast<std::size_t>(r) * cols, cols);
        file->write(text);
      }
    }
    written += n;
  }

  void finish() {
    if (written != rows)
      file->fail(std::to_string(written) + " of " + std::to_string(rows) + " rows");
    file->finish();
    if (own) own->commit();
  }
};

namespace {

template <class T>
void write_whole(OutputSet* set, const std::string& path, const T* data, std::int64_t rows,
                 int cols, const char* descr, const std::string& prefix) {
  ArrayStreamWriter::Impl file(set, path, rows, cols, descr, prefix);
  file.append(data, rows);
  file.finish();
}

// A rows × cols array (write_whole takes cols = -1 for a 1-D one, write_vector).
template <class T>
void write_matrix(OutputSet* set, const std::string& path, const T* data, std::int64_t rows,
                  int cols, const char* descr, const std::string& prefix) {
  PCNN_EXPECTS(rows >= 0 && cols >= 0, "write_array '" + path + "': " + std::to_string(rows) +
                                           " x " + std::to_string(cols) + " is no array shape");
  write_whole(set, path, data, rows, cols, descr, prefix);
}

}  // namespace

void write_array(OutputSet& outputs, const std::string& path, const std::int32_t* data,
                 std::int64_t rows, int cols, const std::string& prefix) {
  write_matrix(&outputs, path, data, rows, cols, "<i4", prefix);
}

void write_array(OutputSet& outputs, const std::string& path, const float* data, std::int64_t rows,
                 int cols, const std::string& prefix) {
  write_matrix(&outputs, path, data, rows, cols, "<f4", prefix);
}

void write_array(OutputSet& outputs, const std::string& path, const std::int64_t* data,
                 std::int64_t rows, int cols, const std::string& prefix) {
  write_matrix(&outputs, path, data, rows, cols, "<i8", prefix);
}

void write_vector(OutputSet& outputs, const std::string& path, const std::int32_t* data,
                  std::int64_t n, const std::string& name) {
  write_whole(&outputs, path, data, n, -1, "<i4", name);
}

void write_vector(OutputSet& outputs, const std::string& path, const std::int64_t* data,
                  std::int64_t n, const std::string& name) {
  write_whole(&outputs, path, data, n, -1, "<i8", name);
}

void write_vector(OutputSet& outputs, const std::string& path, const float* data, std::int64_t n,
                  const std::string& name) {
  write_whole(&outputs, path, data, n, -1, "<f4", name);
}

void write_array(const std::string& path, const std::int32_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_matrix(nullptr, path, data, rows, cols, "<i4", prefix);
}

void write_array(const std::string& path, const float* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_matrix(nullptr, path, data, rows, cols, "<f4", prefix);
}

void write_array(const std::string& path, const std::int64_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_matrix(nullptr, path, data, rows, cols, "<i8", prefix);
}

ArrayStreamWriter::ArrayStreamWriter(OutputSet& outputs, const std::string& path, std::int64_t rows,
                                     int cols, bool is_float, const std::string& prefix)
    : impl_(std::make_unique<Impl>(&outputs, path, rows, cols, is_float ? "<f4" : "<i4", prefix)),
      is_float_(is_float) {}

ArrayStreamWriter::ArrayStreamWriter(const std::string& path, std::int64_t rows, int cols,
                                     bool is_float, const std::string& prefix)
    : impl_(std::make_unique<Impl>(nullptr, path, rows, cols, is_float ? "<f4" : "<i4", prefix)),
      is_float_(is_float) {}

ArrayStreamWriter::~ArrayStreamWriter() = default;

void ArrayStreamWriter::append(const void* data, std::int64_t rows) {
  if (is_float_)
    impl_->append(static_cast<const float*>(data), rows);
  else
    impl_->append(static_cast<const std::int32_t*>(data), rows);
}

void ArrayStreamWriter::finish() { impl_->finish(); }

// ---- radius results, streamed ----

struct RadiusStreamWriter::Impl {
  const std::int64_t* offsets;
  std::int64_t rows, next = 0;
  io_detail::OutputFile* pairs = nullptr;  // the CSV of pairs, or the three .npy files:
  std::unique_ptr<ArrayStreamWriter> indices, sqdist;
  std::string text;

  std::string path_;

  Impl(OutputSet& outputs, const std::string& path, const std::int64_t* off, std::int64_t r)
      : offsets(off), rows(r), path_(path) {
    PCNN_EXPECTS(rows >= 0, "radius results for '" + path + "': " + std::to_string(rows) + " rows");
    PCNN_EXPECTS(offsets != nullptr, "radius results for '" + path + "': no offsets");
    PCNN_EXPECTS(offsets[0] == 0, "radius results for '" + path + "': offsets must start at 0");
    for (std::int64_t q = 0; q < rows; ++q)
      PCNN_EXPECTS(offsets[q] <= offsets[q + 1],
                   "radius results for '" + path + "': offsets decrease at row " +
                       std::to_string(q) + " (" + std::to_string(offsets[q]) + " then " +
                       std::to_string(offsets[q + 1]) + ")");
    const std::vector<std::string> files = outputs.files(path);
    if (files.size() == 1 && io_detail::output_format(outputs, files[0]) == Format::pairs_csv) {
      pairs = &io_detail::begin_output(outputs, files[0]);
      pairs->write("query,neighbor,sqdist\n");
      return;
    }
    if (files.size() != 3)
      throw output_error("cannot write '" + path + "': it was not declared as radius results",
                         path);
    write_vector(outputs, files[0], offsets, rows + 1, "offset");  // 1-D arrays
    const std::int64_t total = offsets[rows];
    indices = std::make_unique<ArrayStreamWriter>(outputs, files[1], total, -1, false, "index");
    sqdist = std::make_unique<ArrayStreamWriter>(outputs, files[2], total, -1, true, "sqdist");
  }

  void append(std::int64_t n, const std::int32_t* idx, const float* dist) {
    if (n < 0 || next + n > rows)
      throw output_error("radius results: more rows than the offsets announce", path_);
    const std::int64_t base = offsets[next], entries = offsets[next + n] - base;
    if (indices) {
      indices->append(idx, entries);
      sqdist->append(dist, entries);
    } else {
      for (std::int64_t q = next; q < next + n; ++q) {
        for (std::int64_t i = offsets[q] - base; i < offsets[q + 1] - base; ++i) {
          append_value(text, q);
          text += ',';
          append_value(text, idx[i]);
          text += ',';
          append_value(text, dist[i]);
          text += '\n';
        }
        if (text.size() > (1 << 20)) {
          pairs->write(text);
          text.clear();
        }
      }
    }
    next += n;
  }

  void finish() {
    if (next != rows)
      throw output_error("radius results: " + std::to_string(next) + " of " + std::to_string(rows) +
                             " rows written",
                         path_);
    if (indices) {
      indices->finish();
      sqdist->finish();
      return;
    }
    pairs->write(text);
    text.clear();
    pairs->finish();
  }
};

RadiusStreamWriter::RadiusStreamWriter(OutputSet& outputs, const std::string& path,
                                       const std::int64_t* offsets, std::int64_t rows)
    : impl_(std::make_unique<Impl>(outputs, path, offsets, rows)) {}
RadiusStreamWriter::~RadiusStreamWriter() = default;
void RadiusStreamWriter::append(std::int64_t rows, const std::int32_t* indices,
                                const float* sqdist) {
  impl_->append(rows, indices, sqdist);
}
void RadiusStreamWriter::finish() { impl_->finish(); }

void write_radius(OutputSet& outputs, const std::string& path, const std::int64_t* offsets,
                  std::int64_t rows, const std::int32_t* indices, const float* sqdist) {
  RadiusStreamWriter w(outputs, path, offsets, rows);
  w.append(rows, indices, sqdist);
  w.finish();
}

void write_pairs_csv(const std::string& path, const std::int64_t* offsets, std::int64_t rows,
                     const std::int32_t* indices, const float* sqdist) {
  OutputSet outputs;
  outputs.add(path, OutputKind::radius);
  if (io_detail::output_format(outputs, path) != Format::pairs_csv)
    throw output_error("cannot write '" + path + "': pairs are written as .csv", path);
  write_radius(outputs, path, offsets, rows, indices, sqdist);
  outputs.commit();
}

// ---- what the outputs will take ----

namespace {

// Decimal digits of the numbers 0 .. n - 1, summed.
std::int64_t digits_below(std::int64_t n) {
  std::int64_t sum = 0;
  for (std::int64_t lo = 0, hi = 10, d = 1; lo < n; lo = hi, hi *= 10, ++d)
    sum += (std::min(n, hi) - lo) * d;
  return sum;
}

int digits_of(std::int64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

// An array file: .npy exact (the header as written, then the data); CSV at least the header,
// each row's number and comma-separated values of one character.
std::int64_t array_file_size(Format f, const char* descr, std::int64_t rows, int cols) {
  if (f == Format::csv)
    return 3 + 3 * std::int64_t(cols) + digits_below(rows) + rows * (2 * std::int64_t(cols) + 1);
  return static_cast<std::int64_t>(npy_header(descr, rows, cols).size()) +
         rows * std::max(cols, 1) * 4;
}

}  // namespace

std::vector<std::pair<std::string, std::int64_t>> array_output_sizes(const OutputSet& outputs,
                                                                     const std::string& path,
                                                                     std::int64_t rows, int cols) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const auto& f : outputs.files(path))
    out.emplace_back(f, array_file_size(io_detail::output_format(outputs, f), "<i4", rows, cols));
  return out;
}

std::vector<std::pair<std::string, std::int64_t>> radius_output_sizes(const OutputSet& outputs,
                                                                      const std::string& path,
                                                                      const std::int64_t* offsets,
                                                                      std::int64_t rows) {
  const std::vector<std::string> files = outputs.files(path);
  const std::int64_t total = offsets[rows];
  if (files.size() == 3)
    return {{files[0],
             static_cast<std::int64_t>(npy_header("<i8", rows + 1, -1).size()) + (rows + 1) * 8},
            {files[1], array_file_size(Format::npy, "<i4", total, -1)},
            {files[2], array_file_size(Format::npy, "<f4", total, -1)}};
  // "q,i,d\n": the query's digits, at least one for the neighbor and one for the distance.
  std::int64_t bytes = 22;
  for (std::int64_t q = 0; q < rows; ++q)
    bytes += (offsets[q + 1] - offsets[q]) * (digits_of(q) + 5);
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const auto& f : files) out.emplace_back(f, bytes);
  return out;
}

}  // namespace pcnn
