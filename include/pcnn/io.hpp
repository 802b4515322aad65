// pcnn — reading clouds and writing results (the pcnn::io library; PCL stays inside it).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pcnn/error.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

namespace pcnn {

/// Every field of every point as the file stored it (opaque; defined by the io library).
struct StoredFields;

/// How load_cloud decides a file's format: from its extension, or as named.
enum class CloudFormat { by_extension, pcd, ply };

/// A loaded cloud: float coordinates re-centered on a double-precision origin, so that
/// georeferenced coordinates (1e5..1e7 m) keep their resolution. stored = xyz + origin.
struct Cloud {
  std::string path;
  std::vector<float> xyz;          ///< 3 floats per point; non-finite points hold NaN
  std::array<double, 3> origin{};  ///< added back to get the stored coordinates
  std::uint32_t width = 0;         ///< organized clouds: columns; otherwise the point count
  std::uint32_t height = 0;        ///< organized clouds: rows (> 1); otherwise 1
  std::int64_t finite = 0;         ///< points with finite x, y and z
  std::string coordinate_type;     ///< type x/y/z were stored in: "float32", "float64", ...
  /// xyz + origin equals the stored coordinates exactly (the origin is chosen so whenever one
  /// exists: always for float32 files). When false (doubles that no float offset represents),
  /// `xyz` is rounded, and `stored` keeps the coordinates as stored for the searches.
  bool exact = true;
  /// The coordinates as stored, 3 doubles per point (NaN where not finite): kept when `exact` is
  /// false, or filled by search_views(); empty otherwise.
  std::vector<double> stored;
  std::vector<std::string> field_names;        ///< every field of the file, in order
  std::shared_ptr<const StoredFields> fields;  ///< kept for writing subsets with every field

  std::int64_t size() const { return static_cast<std::int64_t>(xyz.size() / 3); }
  PointsView view() const { return PointsView{xyz.data(), size(), 3}; }
};

/// Loads a .pcd (ascii, binary, binary_compressed) or .ply (ascii, binary little- or big-endian)
/// file. x, y and z are read in their stored type (float or double, or an integer type).
/// Re-centers on `origin` when given (to put a query cloud in its reference cloud's frame),
/// otherwise on an origin that keeps the stored coordinates exact (pcnn::exact_origin).
/// Before PCL parses the file, pcnn's input gate accepts only what pcnn and PCL read identically
/// (a whitelist): header keywords in PCL's order, each once; only the PLY elements and properties
/// PCL reads as pcnn means them (or provably skips); one strict number grammar for ascii data
/// (integers integral and in their type's range); compressed data that decodes exactly; and point
/// counts the file's size holds — no rows, points or bytes the header does not announce.
/// @throws pcnn::input_error naming the file, the line or byte offset, and the reason (missing,
///         unreadable, unknown extension, outside the whitelist, no x/y/z, coordinates too large
///         for float distances).
/// `keep_fields` keeps every field of every point (Cloud::fields) for save_cloud_subset; without
/// it only the coordinates stay in memory, and for ascii and binary .pcd and ascii and
/// little-endian binary .ply (vertices first, no range grid) the gate itself gathers x, y and z
/// in its one pass over the file (each ascii value parsed once) instead of PCL — the same Cloud,
/// byte for byte.
/// `format` reads the file as .pcd or .ply whatever its name; `path` "-" is standard input, read
/// to its end first (it needs a format; messages and Cloud::path name it `<stdin>`).
Cloud load_cloud(const std::string& path, const std::array<double, 3>* origin = nullptr,
                 bool keep_fields = true, CloudFormat format = CloudFormat::by_extension);

/// The views a search of `refs` (and of `queries`, when given) should use, in one frame and
/// exact for the coordinates as stored: the float offsets (`xyz`, one origin) when both clouds'
/// are exact, else the stored float64 coordinates of both (Cloud::stored, filled here from
/// xyz + origin where the cloud did not keep it; that sum is exact). The views point into the
/// clouds. The query cloud must have been loaded with the reference cloud's origin.
std::pair<PointsView, PointsView> search_views(Cloud& refs, Cloud* queries);

/// What an output holds, which decides the formats its path may name.
enum class OutputKind {
  array,   ///< rows of numbers: .npy or .csv
  cloud,   ///< a point cloud: .pcd or .ply (binary)
  radius,  ///< radius results: OUT.csv (one line per pair), or OUT / OUT.npy for the three files
           ///< OUT.offsets.npy, OUT.indices.npy and OUT.sqdist.npy
};

/// The outputs of one command: every one checked before any work, all committed together or none.
///
/// add() checks an output at once: a known extension for its kind (case-insensitive); not a
/// directory; not the same file as an input or another output, by any name (symlinks, hard
/// links); and its directory writable — proved by creating the output's temporary file there,
/// with an unpredictable name, O_EXCL and O_NOFOLLOW (a symlink planted at that name is never
/// followed). The writers below then fill the temporaries, checking every write, flush, fsync
/// and close (a full disk or a file size limit is a pcnn::output_error naming the file), and
/// commit() renames them all into place; should one rename fail, the ones done are undone. An
/// OutputSet destroyed before commit() (an error on the way) removes its temporaries.
///
/// A target that is not a regular file — `-` (stdout), /dev/stdout, /dev/fd/N, a FIFO, a device
/// such as /dev/null — is written to directly as the data comes (it cannot be staged and is never
/// replaced); without a known extension it gets its kind's default format (.npy, .pcd, and for
/// radius results the .csv of pairs). A symlink is written through: the file it finally points to
/// is replaced, the link stays (a link to /dev/stdout or /dev/fd/N writes to that descriptor).
/// For a file size limit (RLIMIT_FSIZE) to be reported instead of killing the process, the
/// program must ignore SIGXFSZ (the pcnn command does).
///
/// A replaced file gets a new inode with the old one's permission bits (set-user-ID and
/// set-group-ID only where its owner and group could be kept): other hard links to it keep the
/// old content, as with sed -i. A file the caller may not write, or may not replace (another
/// user's, in a sticky directory such as /tmp), is refused at add(). Standard error (where the
/// pcnn command writes its messages) is no output. commit() refuses a target that changed kind
/// since add() (a FIFO or symlink made there, another file moved there), leaving it as it is.
class OutputSet {
 public:
  OutputSet();
  ~OutputSet();  ///< removes every temporary not committed
  OutputSet(OutputSet&&) noexcept;
  OutputSet& operator=(OutputSet&&) noexcept;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  /// A file the command reads: no output may be it (`-`, standard input, is never an output).
  void add_input(const std::string& path);
  /// Something else writes to stdout (`what`, e.g. "--json"): no output may go there.
  void reserve_stdout(const std::string& what);
  /// Outputs added after this that are not regular files and whose names have no extension
  /// (`-`, /dev/stdout, a FIFO) are written as CSV where they hold arrays, instead of .npy.
  void prefer_csv_streams(bool csv);
  /// Declares and checks an output (see above). @throws pcnn::output_error naming `path` and why
  void add(const std::string& path, OutputKind kind);
  /// Whether add() would write `path` directly as a stream (`-`, /dev/stdout, /dev/fd/N, an
  /// existing FIFO or device) rather than stage it, as it stands now.
  static bool is_stream(const std::string& path);
  /// The files `path` (as given to add) writes: itself, or the three files of radius results.
  std::vector<std::string> files(const std::string& path) const;
  /// Checks, before anything is written, that the outputs' files fit: each file's size within
  /// the file size limit (RLIMIT_FSIZE), and the files staged on each file system within its
  /// free space (the space of a file being replaced is only freed once the new one is in place).
  /// Targets written directly (stdout, FIFOs, devices) are not counted. `files`: each file (as
  /// files() names them) with the bytes it will take at least (see output_sizes); `what` names
  /// the results in the message. @throws pcnn::output_error with the bytes needed and free
  void check_space(const std::vector<std::pair<std::string, std::int64_t>>& files,
                   const std::string& what) const;
  /// Renames every written output into place. Every declared output must have been written.
  /// @throws pcnn::output_error (then no staged output was put in place)
  void commit();

  struct Impl;
  /// For the io library's writers (Impl is opaque). @throws pcnn::invalid_argument_error for a
  /// moved-from set
  Impl& impl() const;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Removes the staged temporaries (and commit's backups) of every OutputSet not yet committed.
/// Async-signal-safe (no allocation, no lock: only unlink), for a handler of the signals that end
/// the program (the pcnn command installs one for SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE and
/// SIGXCPU), so that an interrupted write leaves nothing behind. The targets keep what they held;
/// a commit() under way on another thread is waited for (all put in place, or all rolled back).
/// Meant for a program about to end: the files it removes stay counted as pending.
void remove_uncommitted_outputs() noexcept;

/// Writes the points `indices` (ascending or not, each once) of `cloud` with every field the
/// file had (colors, intensity, normals, labels...; coordinates in their stored type and
/// values, not re-centered) to a .pcd (binary) or .ply (binary little-endian) by extension.
/// The result is unorganized. `path` must have been added to `outputs` as OutputKind::cloud.
/// .ply cannot hold 64-bit integer fields, or uchar fields that PCL's PLY reader would merge
/// into colors (red, green, blue, alpha): those are refused. @throws pcnn::output_error
void save_cloud_subset(OutputSet& outputs, const Cloud& cloud,
                       const std::vector<std::int32_t>& indices, const std::string& path);

/// Writes `cloud` with its points moved to `xyz` (3 floats per point, in the cloud's re-centered
/// coordinates, as Cloud::xyz), every other field and the organization (width × height)
/// unchanged, to a .pcd (binary) or .ply (binary little-endian) by extension. A point whose
/// position equals its Cloud::xyz keeps its record as stored (a point not moved, non-finite
/// coordinates included); a moved one gets its stored coordinates plus the move, in their
/// original type (integers rounded; an integer coordinate stays as it was where the new one is
/// NaN). @throws pcnn::output_error
void save_cloud_moved(OutputSet& outputs, const Cloud& cloud, const std::vector<float>& xyz,
                      const std::string& path);

/// A float32 field written with every point of a cloud: point i's value is values[i * stride].
struct AddedField {
  std::string name;
  const float* values = nullptr;  ///< at least (points - 1) * stride + 1 values
  std::int64_t stride = 1;
};

/// Writes `cloud` with every field it had plus the `added` ones (float32, after the others; a
/// field of the same name the cloud already has is replaced in place, in its own type if that is
/// float32 or float64, else as float32), every
/// point and the organization unchanged, to a .pcd (binary) or .ply (binary little-endian) by
/// extension: what pcl::concatenateFields of a cloud and its normals gives.
/// @throws pcnn::output_error
void save_cloud_with_fields(OutputSet& outputs, const Cloud& cloud,
                            const std::vector<AddedField>& added, const std::string& path);

/// Writes packed xyz (in meters, stored = xyz) as a binary .pcd or .ply with fields x y z;
/// organized as `width` × (points / width) when `width` > 0 (NaN points allowed), else
/// unorganized. @throws pcnn::output_error
void save_xyz(OutputSet& outputs, const std::string& path, const std::vector<float>& xyz,
              std::uint32_t width = 0);

/// Writes a rows × cols row-major array as a NumPy .npy file (little-endian int32 / float32 /
/// int64), or as CSV (one row per line, a leading "row" column, a header line naming the
/// columns `prefix0..`), as `path` was declared. @throws pcnn::output_error
void write_array(OutputSet& outputs, const std::string& path, const std::int32_t* data,
                 std::int64_t rows, int cols, const std::string& prefix = "n");
void write_array(OutputSet& outputs, const std::string& path, const float* data, std::int64_t rows,
                 int cols, const std::string& prefix = "d");
void write_array(OutputSet& outputs, const std::string& path, const std::int64_t* data,
                 std::int64_t rows, int cols, const std::string& prefix = "n");

/// Writes `n` values as a 1-D NumPy .npy file (shape `(n,)`), or as CSV (a header line
/// "row,NAME", then one line "i,value" per value), as `path` was declared (OutputKind::array).
/// @throws pcnn::output_error
void write_vector(OutputSet& outputs, const std::string& path, const std::int32_t* data,
                  std::int64_t n, const std::string& name);
void write_vector(OutputSet& outputs, const std::string& path, const std::int64_t* data,
                  std::int64_t n, const std::string& name);
void write_vector(OutputSet& outputs, const std::string& path, const float* data, std::int64_t n,
                  const std::string& name);

/// Radius results in CSR form (`offsets`: rows + 1 entries) as `path` was declared
/// (OutputKind::radius): one CSV line "query,neighbor,sqdist" per pair after a header line, or
/// the three 1-D .npy files offsets (int64, rows + 1), indices (int32) and sqdist (float32).
/// @throws pcnn::output_error
void write_radius(OutputSet& outputs, const std::string& path, const std::int64_t* offsets,
                  std::int64_t rows, const std::int32_t* indices, const float* sqdist);

/// The same writers for a single output: each checks `path` as OutputSet::add does, writes it to
/// a temporary file and renames it into place (a failure leaves nothing behind).
void save_cloud_subset(const Cloud& cloud, const std::vector<std::int32_t>& indices,
                       const std::string& path);
void save_cloud_moved(const Cloud& cloud, const std::vector<float>& xyz, const std::string& path);
/// As save_xyz, for a single output.
void save_xyz_pcd(const std::string& path, const std::vector<float>& xyz, std::uint32_t width = 0);
void write_array(const std::string& path, const std::int32_t* data, std::int64_t rows, int cols,
                 const std::string& prefix = "n");
void write_array(const std::string& path, const float* data, std::int64_t rows, int cols,
                 const std::string& prefix = "d");
void write_array(const std::string& path, const std::int64_t* data, std::int64_t rows, int cols,
                 const std::string& prefix = "n");
/// Radius results as CSV pairs, as write_radius writes a .csv.
void write_pairs_csv(const std::string& path, const std::int64_t* offsets, std::int64_t rows,
                     const std::int32_t* indices, const float* sqdist);

/// The bytes the files of declared output `path` will take, as OutputSet::check_space takes them:
/// a rows × cols array of 4-byte values (exact for .npy; for .csv a lower bound, each value at
/// least one digit), or radius results with these CSR `offsets` (rows + 1; .npy exact, the CSV of
/// pairs a lower bound).
std::vector<std::pair<std::string, std::int64_t>> array_output_sizes(const OutputSet& outputs,
                                                                     const std::string& path,
                                                                     std::int64_t rows, int cols);
std::vector<std::pair<std::string, std::int64_t>> radius_output_sizes(const OutputSet& outputs,
                                                                      const std::string& path,
                                                                      const std::int64_t* offsets,
                                                                      std::int64_t rows);

/// Radius results written range by range, rows in order, in the formats of write_radius: the
/// offsets of every row are known from the count before any pair is found (written at once),
/// then each range's pairs follow. finish() completes the files; the set's commit() puts them in
/// place. @throws pcnn::output_error; pcnn::invalid_argument_error (before anything is written)
/// for offsets that do not start at 0 or decrease
class RadiusStreamWriter {
 public:
  /// `offsets`: rows + 1 entries, kept by the caller until finish().
  RadiusStreamWriter(OutputSet& outputs, const std::string& path, const std::int64_t* offsets,
                     std::int64_t rows);
  ~RadiusStreamWriter();
  RadiusStreamWriter(const RadiusStreamWriter&) = delete;
  RadiusStreamWriter& operator=(const RadiusStreamWriter&) = delete;
  /// The next `rows` rows: offsets[next + rows] - offsets[next] pairs in `indices` / `sqdist`.
  void append(std::int64_t rows, const std::int32_t* indices, const float* sqdist);
  void finish();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// A rows × cols array of int32 or float32 written piece by piece, rows in order, as .npy or .csv
/// (the same formats as write_array): for results streamed from the GPU that need not all be in
/// memory at once. With an OutputSet, finish() completes the file and the set's commit() puts it
/// in place; without one, finish() renames it into place itself. An unfinished writer leaves
/// nothing behind. @throws pcnn::output_error
class ArrayStreamWriter {
 public:
  ArrayStreamWriter(OutputSet& outputs, const std::string& path, std::int64_t rows, int cols,
                    bool is_float, const std::string& prefix);
  ArrayStreamWriter(const std::string& path, std::int64_t rows, int cols, bool is_float,
                    const std::string& prefix);
  ~ArrayStreamWriter();
  ArrayStreamWriter(const ArrayStreamWriter&) = delete;
  ArrayStreamWriter& operator=(const ArrayStreamWriter&) = delete;
  /// The next `rows` rows (rows × cols values of the writer's type).
  void append(const void* data, std::int64_t rows);
  /// All rows written: completes the file (and, without an OutputSet, renames it into place).
  void finish();

  struct Impl;  ///< also what write_array writes with

 private:
  std::unique_ptr<Impl> impl_;
  bool is_float_;
};

/// The element type of a shared array.
enum class ArrayType { int32, float32, int64 };

/// A rows × cols int32, float32 or int64 .npy array written by several processes at once, each its
/// own block of rows at their offsets (MPI ranks): the process that owns the OutputSet begins it
/// with begin_shared_array (the header written, the staged temporary given its full size) and hands
/// the temporary's path to the others; every process writes its rows through a SharedArrayWriter
/// and finishes it (fsync) before a barrier; the owner then calls finish_shared_array and
/// commits the set as usual (an error anywhere: the set's destructor removes the temporary, so
/// the output is complete or absent). `cols` < 0: a 1-D array of `rows` values.
/// Only staged regular-file .npy targets can be shared (can_share_array; radius results' three
/// files, as OutputSet::files names them, too): stdout, FIFOs and .csv outputs are written by one
/// process.
bool can_share_array(OutputSet& outputs, const std::string& path);
/// Returns the path of the staged temporary the writers open. @throws pcnn::output_error
std::string begin_shared_array(OutputSet& outputs, const std::string& path, std::int64_t rows,
                               int cols, ArrayType type);
void finish_shared_array(OutputSet& outputs, const std::string& path);

class SharedArrayWriter {
 public:
  /// Opens `temporary` (from begin_shared_array) to write rows of the array `path` (for
  /// messages) of that shape. @throws pcnn::output_error
  SharedArrayWriter(const std::string& temporary, const std::string& path, std::int64_t rows,
                    int cols, ArrayType type);
  ~SharedArrayWriter();
  SharedArrayWriter(const SharedArrayWriter&) = delete;
  SharedArrayWriter& operator=(const SharedArrayWriter&) = delete;
  /// Rows [first, first + n): n × cols values of the array's type. @throws pcnn::output_error
  void write_rows(std::int64_t first, std::int64_t n, const void* data);
  /// fsync and close. @throws pcnn::output_error
  void finish();

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t rows_, row_bytes_, data_offset_;
};

}  // namespace pcnn
