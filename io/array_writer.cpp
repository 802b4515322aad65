// Writing result arrays as NumPy .npy or CSV, through the one output path (output_file.hpp).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

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

void write_pairs(io_detail::OutputFile& file, const std::int64_t* offsets, std::int64_t rows,
                 const std::int32_t* indices, const float* sqdist) {
  std::string text = "query,neighbor,sqdist\n";
  for (std::int64_t q = 0; q < rows; ++q) {
    for (std::int64_t i = offsets[q]; i < offsets[q + 1]; ++i) {
      append_value(text, q);
      text += ',';
      append_value(text, indices[i]);
      text += ',';
      append_value(text, sqdist[i]);
      text += '\n';
    }
    if (text.size() > (1 << 20)) {
      file.write(text);
      text.clear();
    }
  }
  file.write(text);
  file.finish();
}

}  // namespace

void write_array(OutputSet& outputs, const std::string& path, const std::int32_t* data,
                 std::int64_t rows, int cols, const std::string& prefix) {
  write_whole(&outputs, path, data, rows, cols, "<i4", prefix);
}

void write_array(OutputSet& outputs, const std::string& path, const float* data, std::int64_t rows,
                 int cols, const std::string& prefix) {
  write_whole(&outputs, path, data, rows, cols, "<f4", prefix);
}

void write_array(OutputSet& outputs, const std::string& path, const std::int64_t* data,
                 std::int64_t rows, int cols, const std::string& prefix) {
  write_whole(&outputs, path, data, rows, cols, "<i8", prefix);
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
  write_whole(nullptr, path, data, rows, cols, "<i4", prefix);
}

void write_array(const std::string& path, const float* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_whole(nullptr, path, data, rows, cols, "<f4", prefix);
}

void write_array(const std::string& path, const std::int64_t* data, std::int64_t rows, int cols,
                 const std::string& prefix) {
  write_whole(nullptr, path, data, rows, cols, "<i8", prefix);
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

void write_radius(OutputSet& outputs, const std::string& path, const std::int64_t* offsets,
                  std::int64_t rows, const std::int32_t* indices, const float* sqdist) {
  const std::vector<std::string> files = outputs.files(path);
  if (files.size() == 1 && io_detail::output_format(outputs, files[0]) == Format::pairs_csv) {
    write_pairs(io_detail::begin_output(outputs, files[0]), offsets, rows, indices, sqdist);
    return;
  }
  if (files.size() != 3)
    throw output_error("cannot write '" + path + "': it was not declared as radius results", path);
  const std::int64_t total = offsets[rows];
  write_vector(outputs, files[0], offsets, rows + 1, "offset");
  write_vector(outputs, files[1], indices, total, "index");
  write_vector(outputs, files[2], sqdist, total, "sqdist");
}

void write_pairs_csv(const std::string& path, const std::int64_t* offsets, std::int64_t rows,
                     const std::int32_t* indices, const float* sqdist) {
  OutputSet outputs;
  outputs.add(path, OutputKind::radius);
  if (io_detail::output_format(outputs, path) != Format::pairs_csv)
    throw output_error("cannot write '" + path + "': pairs are written as .csv", path);
  write_pairs(io_detail::begin_output(outputs, path), offsets, rows, indices, sqdist);
  outputs.commit();
}

}  // namespace pcnn
