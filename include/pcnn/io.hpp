// pcnn — reading clouds and writing results (the pcnn::io library; PCL stays inside it).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pcnn/error.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

namespace pcnn {

/// A file could not be read as a cloud; the message names the file and the reason.
class input_error : public error {
 public:
  using error::error;
};

/// A result could not be written; the message names the file and the reason.
class output_error : public error {
 public:
  using error::error;
};

/// Every field of every point as the file stored it (opaque; defined by the io library).
struct StoredFields;

/// A loaded cloud: float coordinates re-centered on a double-precision origin, so that
/// georeferenced coordinates (1e5..1e7 m) keep their resolution. stored = xyz + origin.
struct Cloud {
  std::string path;
  std::vector<float> xyz;                ///< 3 floats per point; non-finite points hold NaN
  std::array<double, 3> origin{};        ///< added back to get the stored coordinates
  std::uint32_t width = 0;               ///< organized clouds: columns; otherwise the point count
  std::uint32_t height = 0;              ///< organized clouds: rows (> 1); otherwise 1
  std::int64_t finite = 0;               ///< points with finite x, y and z
  std::string coordinate_type;           ///< type x/y/z were stored in: "float32", "float64", ...
  std::vector<std::string> field_names;  ///< every field of the file, in order
  std::shared_ptr<const StoredFields> fields;  ///< kept for writing subsets with every field

  std::int64_t size() const { return static_cast<std::int64_t>(xyz.size() / 3); }
  PointsView view() const { return PointsView{xyz.data(), size(), 3}; }
};

/// Loads a .pcd (ascii, binary, binary_compressed) or .ply (ascii, binary little- or big-endian)
/// file. x, y and z are read in their stored type (float or double, or an integer type).
/// Re-centers on `origin` when given (to put a query cloud in its reference cloud's frame),
/// otherwise on the center of the finite points' bounding box.
/// Before PCL parses the file, pcnn's input gate accepts only what pcnn and PCL read identically
/// (a whitelist): header keywords in PCL's order, each once; only the PLY elements and properties
/// PCL reads as pcnn means them (or provably skips); one strict number grammar for ascii data
/// (integers integral and in their type's range); compressed data that decodes exactly; and point
/// counts the file's size holds — no rows, points or bytes the header does not announce.
/// @throws pcnn::input_error naming the file, the line or byte offset, and the reason (missing,
///         unreadable, unknown extension, outside the whitelist, no x/y/z, coordinates too large
///         for float distances).
/// `keep_fields` keeps every field of every point (Cloud::fields) for save_cloud_subset; without
/// it only the coordinates stay in memory.
Cloud load_cloud(const std::string& path, const std::array<double, 3>* origin = nullptr,
                 bool keep_fields = true);

/// Writes the points `indices` (ascending or not, each once) of `cloud` with every field the
/// file had (colors, intensity, normals, labels...; coordinates in their stored type and
/// values, not re-centered) to a .pcd (binary) or .ply (binary little-endian) by extension.
/// The result is unorganized. Written to a temporary file and renamed.
/// @throws pcnn::output_error
void save_cloud_subset(const Cloud& cloud, const std::vector<std::int32_t>& indices,
                       const std::string& path);

/// Writes `cloud` with its points moved to `xyz` (3 floats per point, in the cloud's re-centered
/// coordinates, as Cloud::xyz), every other field and the organization (width × height)
/// unchanged, to a .pcd (binary) or .ply (binary little-endian) by extension. Coordinates are
/// stored in their original type (integers rounded; an integer coordinate stays as it was where
/// the new one is NaN). Written to a temporary file and renamed. @throws pcnn::output_error
void save_cloud_moved(const Cloud& cloud, const std::vector<float>& xyz, const std::string& path);

/// Writes packed xyz (in meters, stored = xyz) as a binary PCD with fields x y z; organized as
/// `width` × (points / width) when `width` > 0 (NaN points allowed), else unorganized.
/// @throws pcnn::output_error
void save_xyz_pcd(const std::string& path, const std::vector<float>& xyz, std::uint32_t width = 0);

/// Writes a rows × cols row-major array as a NumPy .npy file (little-endian int32 / float32),
/// or as CSV when `path` ends in .csv (one row per line, a leading "row" column, a header line
/// naming the columns `prefix0..`). Written to a temporary file and renamed, so a failed write
/// leaves no partial file. @throws pcnn::output_error
void write_array(const std::string& path, const std::int32_t* data, std::int64_t rows, int cols,
                 const std::string& prefix = "n");
void write_array(const std::string& path, const float* data, std::int64_t rows, int cols,
                 const std::string& prefix = "d");
void write_array(const std::string& path, const std::int64_t* data, std::int64_t rows, int cols,
                 const std::string& prefix = "n");

/// A rows × cols array of int32 or float32 written piece by piece, rows in order, as .npy or .csv
/// (the same formats as write_array): for results streamed from the GPU that need not all be in
/// memory at once. Written to a temporary file, renamed by finish(); removed when the writer is
/// destroyed unfinished (an error on the way leaves nothing behind). @throws pcnn::output_error
class ArrayStreamWriter {
 public:
  ArrayStreamWriter(const std::string& path, std::int64_t rows, int cols, bool is_float,
                    const std::string& prefix);
  ~ArrayStreamWriter();
  ArrayStreamWriter(const ArrayStreamWriter&) = delete;
  ArrayStreamWriter& operator=(const ArrayStreamWriter&) = delete;
  /// The next `rows` rows (rows × cols values of the writer's type).
  void append(const void* data, std::int64_t rows);
  /// All rows written: closes and renames the file into place.
  void finish();

  struct Impl;  ///< also what write_array writes with

 private:
  std::unique_ptr<Impl> impl_;
  bool is_float_;
};

/// Variable-length rows (radius results in CSR form) as CSV: a header line, then one line
/// "query,neighbor,sqdist" per pair, rows in order. Written atomically. @throws pcnn::output_error
void write_pairs_csv(const std::string& path, const std::int64_t* offsets, std::int64_t rows,
                     const std::int32_t* indices, const float* sqdist);

}  // namespace pcnn
