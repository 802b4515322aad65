// Gathering x, y and z of every point straight into memory: from the records of a binary file
// the input gate checked, from the values of its ascii rows as the gate parses them, or from the
// points PCL read. One buffer, written once, in the coordinates' own precision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "header_check.hpp"

namespace pcnn::io_detail {

/// x, y and z of every point as stored, 3 values a point, and what the loader needs besides.
struct Coordinates {
  bool gathered = false;  ///< set by whoever filled it (the gate: only for layouts it reads)
  Scalar type[3] = {Scalar::f32, Scalar::f32, Scalar::f32};
  std::vector<float> single;             ///< when every axis is float32
  std::vector<double> wide;              ///< otherwise: each value converted to double (exactly)
  std::int64_t finite = 0;               ///< points whose x, y and z are all finite
  std::vector<std::string> field_names;  ///< every field of the file, as PCL names them
  bool is_single() const {
    return type[0] == Scalar::f32 && type[1] == Scalar::f32 && type[2] == Scalar::f32;
  }
};

/// Where x, y and z are in a point: their types, and their byte offsets in a binary record.
struct XyzLayout {
  Scalar type[3];
  std::uint64_t offset[3] = {0, 0, 0};
};

/// Appends points to a Coordinates (sized for `points`, never zero-filled), counting the finite
/// ones; finish() when done. Records with a 64-bit integer coordinate beyond ±2^53, which a
/// double cannot hold exactly (the searches compute exact distances of the coordinates as
/// stored), are refused as an error of `path`, as the ascii reader refuses such values.
class CoordinateSink {
 public:
  CoordinateSink(const std::string& path, Coordinates& out, const XyzLayout& layout,
                 std::uint64_t points);
  CoordinateSink(const CoordinateSink&) = delete;
  CoordinateSink& operator=(const CoordinateSink&) = delete;
  /// A point whose values, each already rounded to its axis's type, are given as doubles.
  void add(const double v[3]);
  /// `count` records of `record` bytes each (x, y, z at the layout's offsets, little-endian).
  void add_records(const unsigned char* records, std::uint64_t count, std::uint64_t record);
  void finish();

 private:
  template <class T>
  void gather(const unsigned char* records, std::uint64_t count, std::uint64_t record);
  template <class T>
  void flush(std::vector<T>& to, const std::vector<T>& stage);

  std::string path_;
  Coordinates& out_;
  XyzLayout layout_;
  static constexpr std::uint64_t kBlock = 4096;  // points staged (in cache) before each append
  std::vector<float> single_stage_;
  std::vector<double> wide_stage_;
  std::uint64_t staged_ = 0;
};

/// Reads `points` records of `record` bytes from `fd` (the file `path`) at byte `offset` with
/// pread, in chunks of a few MiB, into `out`. @throws pcnn::input_error when a read fails or the
/// file ends first (it changed after the gate checked it).
void gather_binary(const std::string& path, int fd, std::uint64_t offset, std::uint64_t points,
                   std::uint64_t record, const XyzLayout& layout, Coordinates& out);

}  // namespace pcnn::io_detail
