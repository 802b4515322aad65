// The pieces every distributed search is made of, shared by PartitionedIndex (parts in one
// process) and the MPI layer (one part per rank): a part and its index, the forwarding test, the
// exact candidate lists and their merge.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/fresh_pages.hpp"
#include "core/row_shares.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/index.hpp"
#include "pcnn/radius.hpp"

namespace pcnn::dist {

/// Packed xyz coordinates, 3 per point, of one type: float32 (`f`) or float64 (`d`; then `f` is
/// null). Parts keep their points, and batches of queries travel, in the type they were given:
/// spatial parts read every coordinate exactly as stored (as double, exact for a float).
struct Coords {
  const float* f = nullptr;
  const double* d = nullptr;

  void get(std::int64_t j, double p[3]) const {
    for (int a = 0; a < 3; ++a) p[a] = d ? d[3 * j + a] : static_cast<double>(f[3 * j + a]);
  }
  /// The points from point j on.
  Coords from(std::int64_t j) const { return {f ? f + 3 * j : nullptr, d ? d + 3 * j : nullptr}; }
  /// A view of the first m points.
  PointsView view(std::int64_t m) const { return d ? host_points(d, m) : host_points(f, m); }
};

/// Point i of a host view, as doubles (exact for float32).
inline void read_point(const PointsView& v, std::int64_t i, double p[3]) {
  for (int a = 0; a < 3; ++a)
    p[a] = v.data64 ? v.data64[i * v.stride + a] : static_cast<double>(v.data[i * v.stride + a]);
}

/// Owned packed coordinates of one type, filled point by point.
struct Packed {
  bool is_double = false;
  std::vector<float> f;
  std::vector<double> d;

  Packed() = default;
  explicit Packed(bool as_double) : is_double(as_double) {}
  std::int64_t size() const {
    return static_cast<std::int64_t>((is_double ? d.size() : f.size()) / 3);
  }
  Coords coords() const {
    return is_double ? Coords{nullptr, d.data()} : Coords{f.data(), nullptr};
  }
  /// The points `ids` of `v` (of this type), in that order, replacing what it held; copied on
  /// `threads` threads.
  void gather(const PointsView& v, const std::vector<std::int32_t>& ids, int threads);
  /// Appends point i of `v` (of this type).
  void push(const PointsView& v, std::int64_t i) {
    if (is_double)
      d.insert(d.end(), v.data64 + i * v.stride, v.data64 + i * v.stride + 3);
    else
      f.insert(f.end(), v.data + i * v.stride, v.data + i * v.stride + 3);
  }
  /// Appends point j of `c` (of this type).
  void push(const Coords& c, std::int64_t j) {
    if (is_double)
      d.insert(d.end(), c.d + 3 * j, c.d + 3 * j + 3);
    else
      f.insert(f.end(), c.f + 3 * j, c.f + 3 * j + 3);
  }
};

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
/// smaller local index, is the global one), their coordinates packed in their own type, their
/// box, their index.
struct Part {
  std::vector<std::int32_t> ids;  // global index of each local point, ascending
  Packed xyz;                     // packed coordinates of those points, exactly as given
  Bounds bounds;                  // of the finite ones
  std::optional<Index> index;     // while built (an Index made up front would take a device pool)
  bool built = false;

  std::int64_t size() const { return static_cast<std::int64_t>(ids.size()); }
  Coords coords() const { return xyz.coords(); }
  /// Takes the points `ids` of `points`.
  void take(const Partitioning& partitioning, PointsView points, std::vector<std::int32_t> ids);
  void build(const IndexOptions& options);
  void release();  ///< frees the index (tiles: the device memory goes to the next part)
};

/// A dense search (rows of k): kNN, or hybrid (the k nearest within `radius`).
struct DenseSearch {
  int k = 1;
  bool exclude_self = false;
  bool hybrid = false;
  double radius = 0;

  static DenseSearch of(const KnnParams& p) { return {p.k, p.exclude_self, false, 0}; }
  static DenseSearch of(const HybridParams& p) {
    return {p.max_nn, p.exclude_self, true, p.radius};
  }
  /// The largest squared distance a row may hold: the index's own r² (radius * radius in double,
  /// as every backend computes it) for hybrid, +infinity for kNN.
  double limit() const { return hybrid ? radius * radius : INFINITY; }
  /// Runs the search on `index`: separate queries `q`, or the index's own points (q null).
  void run(Index& index, const PointsView* q, MatrixView<std::int32_t> iv,
           MatrixView<float> dv) const;
  /// Rows [first_row, first_row + iv.rows) of the self-search on `index` (a replica's share).
  void run_rows(Index& index, std::int64_t first_row, MatrixView<std::int32_t> iv,
                MatrixView<float> dv) const;
  /// run() in calls of queries_per_call(index, m) queries each: `m` separate queries `q`, or
  /// the index's own `m` points (q null); rows × k to host `idx` and `d`.
  void run_chunked(Index& index, const Coords* q, std::int64_t m, std::int32_t* idx,
                   float* d) const;
};

/// Queries per search call on `index` under a device memory cap (its memory resource given, as
/// for tiles): no more than a quarter of what the cap has left holds at 128 bytes a query (the
/// staged query, its sort keys and the search's scratch per row: about 100 bytes), in blocks of
/// 128; without a cap, all `m`.
std::int64_t queries_per_call(const Index& index, std::int64_t m);

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
inline bool may_hold(const Bounds& b, const double* q, double kth) {
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

/// The contract's squared distance of two points, in double, bit for bit as every backend
/// computes it (this file is compiled with -ffp-contract=off).
double exact_sqdist(const double* a, const double* b);

/// Appends the candidates of one index row (`n` local indices into `part`, -1 ends the row early)
/// for query `q`, with exact distances recomputed from the part's coordinates and global indices.
void append_exact(const Part& part, const double* q, const std::int32_t* local_row, std::int64_t n,
                  std::vector<Candidate>& out);

/// Sorts `c` by (exact distance, global index) and writes the first k as a result row: the
/// indices, the distances rounded to float, -1 / +infinity padding.
void write_merged(std::vector<Candidate>& c, int k, std::int32_t* idx_row, float* d_row);

/// Maps local indices to global ones in place (-1 stays).
void to_global(const Part& part, std::int32_t* idx, std::int64_t n);

/// Which other parts (`bounds`, indexed by part; `home` excluded) may hold a neighbor of each of
/// `m` queries `qs` within `bound(j)` (a squared distance): `forwarded`, the rows sent at least
/// once, ascending; `to[t]`, the rows part t must search, ascending. `threads` for the work.
void route(const std::vector<Bounds>& bounds, int home, const Coords& qs, std::int64_t m,
           int threads, const std::function<double(std::int64_t)>& bound,
           std::vector<std::int32_t>& forwarded, std::vector<std::vector<std::int32_t>>& to);

/// The queries whose home is one part and what its index answered: after search_home, every
/// row's global indices and float distances are at row_idx(j) / row_d(j) (in `idx` / `d`, or,
/// placed, in the caller's outputs); rows no other part can change are final. The others
/// (`forwarded`) wait for the answers of the parts in `to`.
struct HomeRows {
  std::int64_t rows = 0;
  std::vector<std::int32_t> idx;  // rows × k (empty when the rows are placed, below)
  std::vector<float> d;
  // Placed rows: row j is row place[j] of the caller's outputs out_idx / out_d (rows × k), where
  // the search writes it once; unset, rows live in idx / d.
  std::int32_t* out_idx = nullptr;
  float* out_d = nullptr;
  const std::int32_t* place = nullptr;
  std::int32_t* row_idx(std::int64_t j, int k) {
    return out_idx ? out_idx + std::int64_t(place[j]) * k : idx.data() + j * k;
  }
  float* row_d(std::int64_t j, int k) {
    return out_idx ? out_d + std::int64_t(place[j]) * k : d.data() + j * k;
  }
  std::vector<std::int32_t> forwarded;          // rows sent elsewhere, ascending
  std::vector<std::vector<std::int32_t>> to;    // per part: the rows it must search
  std::vector<std::vector<Candidate>> merging;  // per forwarded row: candidates so far
  double build_ms = 0, search_ms = 0;
};

/// Searches `m` queries (`q`: packed; null: the part's own points, a self-search) in their home
/// part `home`, builds its index first when needed, and decides which of the other parts
/// (`bounds`, indexed by part) must search which rows. `threads` for the host-side work.
/// `map_on_device` (CUDA parts whose device memory is not capped; kNN only): the rows go through
/// knn_global_cuda (`sharing`: parts searching on that device at once; rows placed straight
/// into `out`'s placed outputs when it has them), else through host memory with the indices made
/// global on the host (placed rows are then copied to their place).
void search_home(Part& part, int home, const std::vector<Bounds>& bounds, const Coords* q,
                 std::int64_t m, const DenseSearch& search, const IndexOptions& options,
                 int threads, bool map_on_device, HomeRows& out, int sharing = 1);

/// Copies rows [0, n) of `idx` / `d` (n × k) to rows place[first + j] of `out_idx` / `out_d`.
inline void place_rows(const std::int32_t* idx, const float* d, std::int64_t first, std::int64_t n,
                       int k, const std::int32_t* place, std::int32_t* out_idx, float* out_d) {
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t to = std::int64_t(place[first + j]) * k;
    std::copy_n(idx + j * k, k, out_idx + to);
    std::copy_n(d + j * k, k, out_d + to);
  }
}

/// How knn_global_cuda hands its rows over.
struct GlobalRows {
  /// Row j goes to row place[j] of out_idx / out_d (null: row j).
  const std::int32_t* place = nullptr;
  int sharing = 1;  ///< parts searching on the same device at once (they share its free memory)
  /// > 0 (tests): at most this many rows per search call and per piece.
  std::int64_t call_rows = 0, piece_rows = 0;
};
/// The CUDA part's kNN rows (`q` null: its own points) into host rows of `out_idx` / `out_d`
/// (row j at row j, or at row how.place[j]), indices made global on the device: every row in one
/// call when half the device's free memory holds them (a self-search then runs in the index's
/// order), back through two page-locked pieces of 2 × 32 MB. Allocates outside the index's memory
/// resource (hence not under a cap).
void knn_global_cuda(Part& part, const Coords* q, std::int64_t m, const KnnParams& params,
                     int threads, std::int32_t* out_idx, float* out_d, const GlobalRows& how = {});

/// The CUDA device whose memory `ptr` points to (device or managed memory), else -1.
int device_of(const void* ptr);

/// Host points copied into the memory of every one of several distinct devices, each device
/// uploading a share (page-locked from its own thread) and taking the others' shares from their
/// devices (peer copies: NVLink where the devices have it), all at once: the host's link to each
/// device carries 1/n of the cloud instead of all of it. For replicas of one cloud.
class SpreadPoints {
 public:
  /// Whether `devices` are at least two, distinct, and each may access every other's memory.
  /// @throws pcnn::cuda_error
  static bool possible(const std::vector<int>& devices);
  /// `points` (host memory, float32 or float64, any stride); `devices` distinct. Each device
  /// holds a whole copy for the life of the object.
  /// @throws pcnn::cuda_error, pcnn::out_of_memory_error (a device without room for the copy)
  SpreadPoints(PointsView points, const std::vector<int>& devices);
  ~SpreadPoints();
  SpreadPoints(const SpreadPoints&) = delete;
  SpreadPoints& operator=(const SpreadPoints&) = delete;
  /// The copy on devices[d]: a device view of the same count, stride and type.
  PointsView on(int d) const;

 private:
  void release() noexcept;
  void release(int d) noexcept;
  PointsView points_;
  std::vector<int> devices_;
  std::vector<void*> copies_;
};

/// The first position that replica d of nd searches in a self-search of `rows` rows cut along
/// the index's order: the finite points (sorted first) cut evenly, the non-finite ones (empty
/// rows) to the last replica; d == nd gives `rows`.
inline std::int64_t cut_position(std::int64_t finite, std::int64_t rows, int d, int nd) {
  return d == nd ? rows : finite * d / nd;
}

/// The index's order where a self-search of `rows` rows is cut for `nd` replicas: its finite
/// points, then the original index at each cut position (-1 past the last point). Replicas that
/// order the points the same give the same (a guard: identical rows rest on it). CUDA only.
std::vector<std::int64_t> order_at_cuts(Index& index, std::int64_t rows, int nd);

/// Whether `index`'s cloud is stored in spatial order for rows shared out as `shares`
/// (Backend_::order_breaks below kCutBreaks): contiguous shares then beat the cut for rows to the
/// host. On the index's device, synchronized. CUDA only.
bool stored_in_spatial_order(Index& index, const pcnn::detail::RowShares& shares);

/// Rows shared out as `first` gives (shares + 1 boundaries, the last the rows; 1 to 8 shares),
/// the share pointers still null.
pcnn::detail::RowShares row_shares(const std::vector<std::int64_t>& first);

/// The fraction of neighboring positions of the index's order in different contiguous shares
/// (Backend_::order_breaks) from which a self-search for rows in host memory is cut along the
/// order: runs of the curve 64 positions long on average, two warps' queries. A cloud in random
/// order breaks at 1 - 1/replicas, one in blocks of spatial order at the blocks' boundaries only.
/// In spatial order, contiguous shares bring their rows down while their search runs; under the
/// cut none can before every device has finished (200M points in blocks of spatial order,
/// two H100s, round 19: contiguous shares 1.71-1.75x one device's search, the cut 1.65x).
inline constexpr double kCutBreaks = 1.0 / 64;

/// Where a share of a dense result's rows goes: host or device memory, rows × k each.
struct RowsPlace {
  std::int32_t* idx = nullptr;
  float* dist = nullptr;
  bool device = false;  // device memory (rows kept on the devices), not host memory
};

/// The self-search of replicas of one cloud, cut along the index's order: replica d searches
/// a run of positions of its index (the finite points cut evenly; the non-finite ones, sorted
/// last, to the last replica) — a piece of the curve, as coherent as the whole self-search, where
/// a contiguous share of the rows of a cloud stored in random order is scattered over all of it
/// — and writes each row into the share of the replica that owns it (rows [first[d], first[d +
/// 1]) by original index: replica d), in its own device's memory or another's. Once every search
/// has ended, each device copies its share to its place. The shares live in memory pools of this
/// object's own, one per device, that the other devices may write (cudaMemPoolSetAccess: no
/// process-wide state such as peer access is changed), kept between searches and grown as
/// needed (rows × k × 8 bytes over the devices).
class ShareExchange {
 public:
  /// The replicas' devices, in replica order (a device may hold several).
  explicit ShareExchange(std::vector<int> devices);
  ~ShareExchange();
  ShareExchange(const ShareExchange&) = delete;
  ShareExchange& operator=(const ShareExchange&) = delete;
  /// Searches, and copies replica d's share of the rows (`first`: n + 1 boundaries, the last the
  /// rows) to places[d] (host or device memory); adds each device's time to ms[d]. False, having
  /// searched nothing, where it cannot run: fewer than 2 or more than 8 replicas, no rows,
  /// devices without memory pools or that cannot reach each other's memory, replicas whose
  /// orders differ where the positions are cut, or a device without room for its shares; and
  /// where contiguous shares are faster: rows for the host of a cloud stored in spatial order
  /// (Backend_::order_breaks below kCutBreaks).
  bool self_search(std::vector<Index>& replicas, const DenseSearch& search,
                   const std::vector<std::int64_t>& first, const std::vector<RowsPlace>& places,
                   std::vector<double>& ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A part's answer to forwarded queries: rows × k exact distances and global indices (padded
/// with +infinity / -1), for `m` packed queries `q` (never a self-search: exclude_self is off).
struct Answer {
  std::vector<double> d;
  std::vector<std::int32_t> idx;
};
void answer(Part& part, const Coords& q, std::int64_t m, const DenseSearch& search,
            const IndexOptions& options, Answer& out, double& build_ms, double& search_ms);

/// Adds part `t`'s answers for the rows home.to[t] (row i of the answer at `d + i * k`).
void add_answers(HomeRows& home, int t, const double* d, const std::int32_t* idx, int k);

/// Writes each forwarded row's merge into home.idx / home.d.
void finish_merge(HomeRows& home, int k);

/// Radius rows of some queries in one part, or merged: CSR with exact distances and global
/// indices, each row sorted by (distance, index). Counted only: `offsets` alone.
struct RadiusRows {
  std::vector<std::int64_t> offsets{0};  // rows + 1
  std::vector<double> d;
  std::vector<std::int32_t> idx;
  std::int64_t rows() const { return static_cast<std::int64_t>(offsets.size()) - 1; }
};

/// The radius rows of `m` queries `q` in `part` (q null: its own points, with exclude_self as
/// given; separate queries never exclude), counted only or filled.
void radius_in_part(Part& part, const Coords* q, std::int64_t m, const RadiusParams& params,
                    bool count_only, const IndexOptions& options, int threads, RadiusRows& out,
                    double& build_ms, double& search_ms);

/// The queries whose home is one part in a radius search: their rows there, the parts each must
/// also go to (`to`), and, once the answers are in, the merged rows.
struct RadiusHome {
  std::int64_t rows = 0;
  RadiusRows own;                             // in the home part
  std::vector<std::int32_t> forwarded;        // ascending
  std::vector<std::vector<std::int32_t>> to;  // per part: the rows it must search
  RadiusRows merged;
  double build_ms = 0, search_ms = 0;
};

/// The home part's radius rows of `m` queries (q null: its own points) and their routing: every
/// other part one of whose boxes is within r² of the query.
void radius_home(Part& part, int home, const std::vector<Bounds>& bounds, const Coords* q,
                 std::int64_t m, const RadiusParams& params, bool count_only,
                 const IndexOptions& options, int threads, RadiusHome& out);

/// Merges the home rows with the answers: `answers[t]` holds part t's rows for home.to[t]
/// starting at its row `first[t]` (null where part t searched nothing). Count only: the
/// offsets alone.
void merge_radius(RadiusHome& home, const std::vector<const RadiusRows*>& answers,
                  const std::vector<std::int64_t>& first, bool count_only);

/// Runs body(begin, end) over [0, n) in `threads` contiguous slices, at once.
void parallel_for(std::int64_t n, int threads,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

/// Runs body(t, begin, end) for the slices t = 0 .. threads - 1 of [0, n) (slice t: [n t /
/// threads, n (t + 1) / threads), the same for the same n and threads), each in its own thread.
void parallel_slices(std::int64_t n, int threads,
                     const std::function<void(int, std::int64_t, std::int64_t)>& body);

/// Runs body(i) for i in [0, n), each in its own thread when `parallel`, else in order; rethrows
/// the first exception after every thread has finished.
void for_each(int n, bool parallel, const std::function<void(int)>& body);

/// The CPUs this process may run on (its affinity mask; at least 1).
int hardware_threads();

}  // namespace pcnn::dist
