// The pieces every distributed search is made of, shared by PartitionedIndex (parts in one
// process) and the MPI layer (one part per rank): a part and its index, the forwarding test, the
// exact candidate lists and their merge.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "pcnn/distributed.hpp"
#include "pcnn/index.hpp"

namespace pcnn::dist {

/// Where a part's points are: the box of them all and tight boxes of its points in each of the
/// 64 octants of the second level (a Morton range's box alone can span most of the cloud).
struct Bounds {
  Box all;
  std::vector<Box> cells;  // the occupied ones
};

/// The bounds of the finite points `ids` of `points` (all of them when `ids` is null).
Bounds bounds_of(const Partitioning& partitioning, PointsView points,
                 const std::vector<std::int32_t>* ids);

/// One spatial part: its points in ascending global order (so that the index's tie-break, the
/// smaller local index, is the global one), their coordinates packed, their box, their index.
struct Part {
  std::vector<std::int32_t> ids;  // global index of each local point, ascending
  std::vector<float> xyz;         // packed coordinates of those points, exactly as given
  Bounds bounds;                  // of the finite ones
  std::optional<Index> index;     // while built (an Index made up front would take a device pool)
  bool built = false;

  std::int64_t size() const { return static_cast<std::int64_t>(ids.size()); }
  /// Takes the points `ids` of `points`.
  void take(const Partitioning& partitioning, PointsView points, std::vector<std::int32_t> ids);
  void build(const IndexOptions& options);
  void release();  ///< frees the index (tiles: the device memory goes to the next part)
};

/// A query's k-th distance as the index reported it (a float, the exact double rounded to
/// nearest) bounds the exact k-th distance from above by the next float up: forwarding on that
/// bound can only forward more, never less. A row with fewer than k neighbors gets +infinity.
inline double kth_upper_bound(const float* row_sqdist, const std::int32_t* row_idx, int k) {
  if (row_idx[k - 1] < 0) return INFINITY;
  return static_cast<double>(std::nextafter(row_sqdist[k - 1], INFINITY));
}

/// Whether a part may hold a neighbor of query `q` whose k-th distance is at most `kth`: one of
/// its boxes is no farther than `kth` (equal may still win on the index). Empty boxes are at
/// +infinity.
inline bool may_hold(const Bounds& b, const float* q, double kth) {
  if (!(box_sqdist(b.all, q) <= kth)) return false;
  for (const Box& c : b.cells)
    if (box_sqdist(c, q) <= kth) return true;
  return false;
}

/// One candidate of a merge: the exact squared distance and the global index.
struct Candidate {
  double d;
  std::int32_t index;
  bool operator<(const Candidate& o) const { return d < o.d || (d == o.d && index < o.index); }
};

/// Spatial parts read float32 coordinates (Morton codes, boxes, the exact merge): a float64 view
/// (PointsView::data64) is refused with pcnn::invalid_argument_error naming `what`.
void require_float32(const PointsView& points, const char* what);

/// The contract's squared distance of two float points, in double, bit for bit as every backend
/// computes it (this file is compiled with -ffp-contract=off).
double exact_sqdist(const float* a, const float* b);

/// Appends the candidates of one index row (local indices into `part`) for query `q`, with exact
/// distances recomputed from the part's coordinates and global indices.
void append_exact(const Part& part, const float* q, const std::int32_t* local_row, int k,
                  std::vector<Candidate>& out);

/// Sorts `c` by (exact distance, global index) and writes the first k as a result row: the
/// indices, the distances rounded to float, -1 / +infinity padding.
void write_merged(std::vector<Candidate>& c, int k, std::int32_t* idx_row, float* d_row);

/// Maps local indices to global ones in place (-1 stays).
void to_global(const Part& part, std::int32_t* idx, std::int64_t n);

/// The queries whose home is one part and what its index answered: after search_home, `idx` holds
/// global indices and `d` the float distances of every row; rows no other part can change are
/// final. The others (`forwarded`) wait for the answers of the parts in `to`.
struct HomeRows {
  std::int64_t rows = 0;
  std::vector<std::int32_t> idx;  // rows × k
  std::vector<float> d;
  std::vector<std::int32_t> forwarded;          // rows sent elsewhere, ascending
  std::vector<std::vector<std::int32_t>> to;    // per part: the rows it must search
  std::vector<std::vector<Candidate>> merging;  // per forwarded row: candidates so far
  double build_ms = 0, search_ms = 0;
};

/// Searches `m` queries (`q`: packed xyz; null: the part's own points, a self-search) in their
/// home part `home`, builds its index first when needed, and decides which of the other parts
/// (`bounds`, indexed by part) must search which rows. `threads` for the host-side work.
/// `map_on_device` (CUDA parts whose device memory is not capped): the rows go through
/// knn_global_cuda, else through host memory with the indices made global on the host.
void search_home(Part& part, int home, const std::vector<Bounds>& bounds, const float* q,
                 std::int64_t m, const KnnParams& params, const IndexOptions& options, int threads,
                 bool map_on_device, HomeRows& out);

/// The CUDA part's kNN rows (`q` null: its own points) into host rows `out_idx` / `out_d`
/// (m × k), indices made global on the device; chunks of 2 × 32 MB of results through page-locked
/// memory. Allocates outside the index's memory resource (hence not under a memory cap).
void knn_global_cuda(Part& part, const float* q, std::int64_t m, const KnnParams& params,
                     int threads, std::int32_t* out_idx, float* out_d);

/// Page-locks host memory for every device of the process (cudaHostRegisterPortable) for the
/// life of the object, unless it already is page-locked: several devices then copy their shares
/// of one array at full speed without registering overlapping pages from several threads.
class PortableLock {
 public:
  PortableLock(const void* ptr, std::size_t bytes);
  ~PortableLock();
  PortableLock(const PortableLock&) = delete;
  PortableLock& operator=(const PortableLock&) = delete;

 private:
  void* ptr_ = nullptr;
};

/// A part's answer to forwarded queries: rows × k exact distances and global indices (padded
/// with +infinity / -1), for `m` packed queries `q`.
struct Answer {
  std::vector<double> d;
  std::vector<std::int32_t> idx;
};
void answer(Part& part, const float* q, std::int64_t m, int k, const IndexOptions& options,
            Answer& out, double& build_ms, double& search_ms);

/// Adds part `t`'s answers for the rows home.to[t] (row i of the answer at `d + i * k`).
void add_answers(HomeRows& home, int t, const double* d, const std::int32_t* idx, int k);

/// Writes each forwarded row's merge into home.idx / home.d.
void finish_merge(HomeRows& home, int k);

/// Runs body(begin, end) over [0, n) in `threads` contiguous slices, at once.
void parallel_for(std::int64_t n, int threads,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

/// Runs body(i) for i in [0, n), each in its own thread when `parallel`, else in order; rethrows
/// the first exception after every thread has finished.
void for_each(int n, bool parallel, const std::function<void(int)>& body);

/// Hardware threads (at least 1).
int hardware_threads();

}  // namespace pcnn::dist
