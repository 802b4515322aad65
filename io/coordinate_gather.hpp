// Gathering x, y and z of every point straight into memory: from the records of a binary file
// the input gate checked, from the values of its ascii rows as the gate parses them, or from the
// points PCL read. One buffer, in the coordinates' own precision, filled on several threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

/// Sizes `out` for `points` points of `layout`'s types (value-initialized; its pages mapped in
/// on up to `threads` threads), to be filled with put() from any number of threads.
void size_for(Coordinates& out, const XyzLayout& layout, std::uint64_t points, int threads);

/// Stores point `i` (its values, each already rounded to its axis's type, given as doubles) into
/// `out` sized by size_for; returns whether all three are finite (the caller counts them).
bool put(Coordinates& out, std::uint64_t i, const double v[3]);

/// Reads `points` records of `record` bytes from `fd` (the file `path`) at byte `offset` with
/// pread into `out`, on as many threads as the process may use (blocks of ~4 MiB taken in order;
/// errors are those of the first record a reading in order fails on). Records with a 64-bit
/// integer coordinate beyond ±2^53, which a double cannot hold exactly (the searches compute
/// exact distances of the coordinates as stored), are refused as an error of `path`, as the ascii
/// reader refuses such values. @throws pcnn::input_error when a read fails or the
/// file ends first (it changed after the gate checked it).
void gather_binary(const std::string& path, int fd, std::uint64_t offset, std::uint64_t points,
                   std::uint64_t record, const XyzLayout& layout, Coordinates& out);

/// gather_binary from `points` records in memory (what PCL read).
void gather_records(const std::string& path, const unsigned char* records, std::uint64_t points,
                    std::uint64_t record, const XyzLayout& layout, Coordinates& out);

/// Reads `bytes` bytes of `fd` (the file `path`) at `offset` into `dst` with pread, on up to
/// `threads` threads. @throws pcnn::input_error when a read fails or the file ends first.
void read_bytes(const std::string& path, int fd, std::uint64_t offset, std::uint64_t bytes,
                unsigned char* dst, int threads);

/// Records of `record` bytes in a thread's block of about 4 MiB (at least one): a 120 MB file
/// in some 29 blocks, each buffer small.
inline std::int64_t records_per_block(std::uint64_t record) {
  return static_cast<std::int64_t>(std::max<std::uint64_t>(1, (std::uint64_t(4) << 20) / record));
}

/// Whether the float32 (`wide` false) or float64 value at `p` is finite.
inline bool finite_at(const unsigned char* p, bool wide) {
  if (wide) {
    double v;
    std::memcpy(&v, p, sizeof v);
    return std::isfinite(v);
  }
  float v;
  std::memcpy(&v, p, sizeof v);
  return std::isfinite(v);
}

}  // namespace pcnn::io_detail
