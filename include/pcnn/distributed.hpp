// pcnn — one cloud split into spatial parts, each with its own index: several GPUs of one process,
// a reference cloud larger than one device (parts searched one after the other as tiles), and the
// building blocks the MPI layer (pcnn/mpi.hpp) uses across ranks. Or, on several GPUs, replicas
// of the whole cloud, each searching a share of it (Layout::replicated).
//
//   pcnn::PartitionedOptions o;
//   o.devices = {0, 1};                                  // one part per GPU, searched at once
//   pcnn::PartitionedIndex index(pcnn::host_points(xyz.data(), n), o);
//   pcnn::KnnResult r = index.self_knn({8});             // byte-identical to pcnn::Index's rows
//
// How the result stays exact: each query is searched first in its home part (the part its
// Morton code falls in). Every other part whose bounding box may hold a point at or below the
// query's k-th distance (or any part, while the row has fewer than k neighbors) searches the
// query too. Parts keep their points in ascending global order, so a part's own tie-break (the
// smaller local index) is the global one, and the union of the parts' k-lists holds the global
// k-list. The lists are merged on the exact double squared distances recomputed from the
// coordinates as stored (ties to the smaller global index) — the index's float distances are
// rounded and never decide an order — and the float reported is that double rounded, as every
// pcnn search reports it. Radius searches go to every part one of whose boxes lies within r² of
// the query (the index's own r², radius * radius in double), hybrid searches as kNN with the
// bound min(k-th distance, r²). Coordinates are read as stored, float32 or float64
// (PointsView::data64): parts keep their points, and queries travel, in their own type.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pcnn/index.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"
#include "pcnn/radius.hpp"

namespace pcnn {

/// An axis-aligned box of coordinates as stored (as doubles: exact for float32 points); `empty`
/// when it holds no finite point.
struct Box {
  std::array<double, 3> lo{0, 0, 0}, hi{0, 0, 0};
  bool empty = true;
};

/// A lower bound of the squared distance from `q` to any point inside `box`: the contract's
/// formula, ((gx*gx + gy*gy) + gz*gz) in double, on the gaps to the box's faces. Correctly rounded
/// subtraction, multiplication and addition are monotone, so this never exceeds the distance
/// pcnn computes for any point of the box (it can only under-estimate). +infinity for an empty
/// box.
double box_sqdist(const Box& box, const double* q);
double box_sqdist(const Box& box, const float* q);

/// Spatial parts of a cloud: Morton codes (21 bits per axis over the bounding box of the finite
/// points) ordered with the point index as a second key, cut at quantiles of a deterministic
/// sample (every (n / sample)-th finite point), so that the parts hold about equally many points
/// — duplicates included, which may then lie on both sides of a cut. The same points give the
/// same partitioning on every machine and rank.
class Partitioning {
 public:
  Partitioning() = default;
  /// Cuts `points` (host memory, float32 or float64) into `parts` (>= 1) parts from a sample of
  /// at most `sample` points (0: 65,536). @throws pcnn::invalid_argument_error
  Partitioning(PointsView points, int parts, std::int64_t sample = 0);

  int parts() const { return parts_; }
  /// The part of point `index` with coordinates `p`. Non-finite points go to part
  /// index % parts (they are never neighbors; their rows are empty).
  int part_of(const double* p, std::int64_t index) const;
  /// The home part of a query point (not one of the partitioned points): its Morton code alone.
  int home_of(const double* q) const;
  /// The indices of `points` (float32 or float64) in each part, ascending.
  std::vector<std::vector<std::int32_t>> assign(PointsView points) const;
  /// The 63-bit Morton code of `p` over the partitioned points' box (clamped to it).
  std::uint64_t morton_code(const double* p) const;

 private:
  int parts_ = 1;
  std::array<double, 3> lo_{0, 0, 0}, scale_{0, 0, 0};
  std::vector<std::uint64_t>
      cut_code_;  // parts - 1 cuts: part p starts at (code, index) of cut p-1
  std::vector<std::int64_t> cut_index_;
};

/// The bounding box of the finite points among `ids` of `points` (host memory).
/// @throws pcnn::invalid_argument_error (an id outside the points, a view it cannot read)
Box bounding_box(PointsView points, const std::vector<std::int32_t>& ids);

/// How several devices share one cloud.
enum class Layout {
  automatic,   ///< replicated on CUDA devices when untiled and uncapped, else spatial
  spatial,     ///< spatial parts, one per device: clouds larger than one device
  replicated,  ///< every device indexes the whole cloud and searches a share of it: no boundary
               ///< traffic, no merge (the cloud must fit every device). A dense self-search is
               ///< cut along the index's order, each device writing rows into the device owning
               ///< them, where the devices can reach each other's memory and the cloud is not
               ///< stored in spatial order (for rows to the host; see
               ///< PartitionedTimings::by_position); each device then keeps its share of the
               ///< rows' buffers (rows × k × 8 bytes in all) in a memory pool of the index's own
               ///< between searches. Otherwise, and for separate queries, each device searches a
               ///< contiguous share of the rows.
};

struct PartitionedOptions {
  /// What each part's index runs on (backend, staging, memory, threads; `device` is replaced by
  /// the part's device).
  IndexOptions index;
  /// CUDA: one part per device ordinal, searched at once, each from its own thread. CPU backend:
  /// one part per entry (the ordinals are not used). Empty: one part on `index.device`.
  std::vector<int> devices;
  /// > 0: this many parts (tiles), searched one after the other on the device(s), each index
  /// built when needed and freed after: a reference cloud larger than one device's memory.
  /// 0: one part per device.
  int tiles = 0;
  /// CUDA: device memory each device may use, bytes (0: no cap); a pool per device, shared by
  /// the tiles on it. Ignored when `index.memory` is given (then one device only).
  std::int64_t max_device_memory = 0;
  std::int64_t sample = 0;  ///< partitioning sample (0: 65,536)
  /// Spatial parts or replicas (see Layout); tiles are always spatial.
  Layout layout = Layout::automatic;
};

/// What one part did in the last search.
struct PartStats {
  int device = 0;                      ///< the device ordinal (CUDA) or the part's number (CPU)
  std::int64_t points = 0;             ///< points of the part
  std::int64_t home_queries = 0;       ///< queries whose home is this part
  std::int64_t queries_forwarded = 0;  ///< of those, sent to at least one other part
  std::int64_t queries_received = 0;   ///< queries of other parts this part searched
  double build_ms = 0, search_ms = 0;  ///< wall clock of its builds and searches
};

/// Where the time of the last search went (wall clock, milliseconds).
struct PartitionedTimings {
  double partition_ms = 0;  ///< Morton codes, sample, assignment (at construction)
  double build_ms = 0;      ///< the indexes (CPU parts, replicas on distinct devices: the slowest;
                            ///< CUDA parts, tiles: the sum)
  double home_ms = 0;       ///< every query in its home part
  double boundary_ms = 0;   ///< forwarded queries searched in other parts, and the merge
  double total_ms = 0;      ///< build + search
  std::int64_t queries_forwarded = 0;
  bool replicated = false;  ///< the layout in use: replicas (true) or spatial parts
  /// Replicas' last dense self-search: each replica searched a piece of the index's order and
  /// wrote its rows into the devices owning them (true), or each searched its share of the rows
  /// as a separate query set (false: rows for the host of a cloud stored in spatial order, whose
  /// contiguous shares are already pieces of the curve and come down while the search runs;
  /// devices without memory pools or that cannot reach each other's memory, more than 8
  /// replicas, a memory resource or cap given, no room for the shares, or no rows).
  bool by_position = false;
  std::vector<PartStats> parts;
};

/// One device's share of a dense search's rows kept in that device's memory (the replicated
/// layout): rows [first_row, first_row + rows) of the whole result, rows × k, in memory of
/// `device`. For pipelines that go on on each GPU: no row crosses
/// host memory, which bounds the throughput of several GPUs writing rows to one host.
struct DeviceRows {
  int device = 0;                    ///< CUDA device ordinal
  std::int64_t first_row = 0;        ///< the share's first row of the whole result
  std::int64_t rows = 0;             ///< rows in the share
  MatrixView<std::int32_t> indices;  ///< Memory::device, memory of `device`, rows × k
  MatrixView<float> sqdist;          ///< likewise
};

/// A cloud split into spatial parts, each with its own pcnn::Index, or replicated on every device
/// (see Layout); kNN, radius and hybrid results byte-identical to one pcnn::Index over the whole
/// cloud. Host points in; results into host memory or, replicated, kept on each device
/// (DeviceRows). Move-only. Where its indexes own their pools (no `index.memory`), dropping it,
/// or a tile's index after its search, waits for all work on that device (see PoolResource).
class PartitionedIndex {
 public:
  /// Partitions `points` (host memory, float32 or float64; copied in their type) and, unless
  /// tiled, builds every part's index (CUDA: one after the other), or builds every replica (one
  /// after the other, the points page-locked once for all).
  /// @throws as pcnn::Index, and pcnn::invalid_argument_error for a device view or bad options
  /// (the replicated layout asked for on the CPU backend or with tiles).
  PartitionedIndex(PointsView points, PartitionedOptions options);
  ~PartitionedIndex();
  PartitionedIndex(PartitionedIndex&&) noexcept;
  PartitionedIndex& operator=(PartitionedIndex&&) noexcept;
  PartitionedIndex(const PartitionedIndex&) = delete;
  PartitionedIndex& operator=(const PartitionedIndex&) = delete;

  std::int64_t size() const;
  int parts() const;        ///< spatial parts, or replicas
  bool replicated() const;  ///< the layout chosen: replicas of the whole cloud
  const Partitioning& partitioning() const;

  /// kNN of every indexed point (params.exclude_self allowed), rows × k into host memory. (Here
  /// and below: when a search throws, the outputs' contents are unspecified.)
  void self_knn(const KnnParams& params, MatrixView<std::int32_t> indices,
                MatrixView<float> sqdist);
  KnnResult self_knn(const KnnParams& params);
  /// kNN of separate queries (host memory, float32 or float64).
  void knn(PointsView queries, const KnnParams& params, MatrixView<std::int32_t> indices,
           MatrixView<float> sqdist);
  KnnResult knn(PointsView queries, const KnnParams& params);

  /// Hybrid: the max_nn nearest within params.radius, rows × max_nn into host memory, as
  /// pcnn::Index::hybrid orders them (exclude_self: self-searches only).
  void self_hybrid(const HybridParams& params, MatrixView<std::int32_t> indices,
                   MatrixView<float> sqdist);
  HybridResult self_hybrid(const HybridParams& params);
  void hybrid(PointsView queries, const HybridParams& params, MatrixView<std::int32_t> indices,
              MatrixView<float> sqdist);
  HybridResult hybrid(PointsView queries, const HybridParams& params);

  /// Rows kept on the devices (replicated layout only): the share of `rows` rows each replica
  /// holds at the end, one entry per replica in device order, views empty for the caller to fill
  /// with memory of that device. @throws pcnn::invalid_argument_error (not replicated, rows < 0)
  std::vector<DeviceRows> device_rows(std::int64_t rows) const;
  /// kNN (self, or of host `queries`) with each share's rows written on its own device: `out` as
  /// device_rows(rows) gave it, views filled in (rows × k, Memory::device). Synchronizes.
  /// The rows are those of the host-memory calls, byte for byte.
  /// @throws pcnn::invalid_argument_error (not replicated, shares or views that do not match)
  void self_knn_on_devices(const KnnParams& params, const std::vector<DeviceRows>& out);
  void knn_on_devices(PointsView queries, const KnnParams& params,
                      const std::vector<DeviceRows>& out);
  void self_hybrid_on_devices(const HybridParams& params, const std::vector<DeviceRows>& out);
  void hybrid_on_devices(PointsView queries, const HybridParams& params,
                         const std::vector<DeviceRows>& out);

  /// Radius: every point within params.radius, CSR (int64 offsets), each row as
  /// pcnn::Index::radius orders it. The counts alone first (nothing is stored): writes the rows
  /// + 1 offsets and returns the total, so that a caller can refuse results too large to hold
  /// before any is found. Replicas count a self-search's rows on the first device (an index
  /// counts its own points' rows all at once) and share out the rest.
  std::int64_t self_radius_count(const RadiusParams& params, ArrayView<std::int64_t> offsets);
  std::int64_t radius_count(PointsView queries, const RadiusParams& params,
                            ArrayView<std::int64_t> offsets);
  RadiusResult self_radius(const RadiusParams& params);
  RadiusResult radius(PointsView queries, const RadiusParams& params);

  const PartitionedTimings& last_timings() const;

  struct Impl;

 private:
  Impl& impl() const;  ///< @throws pcnn::invalid_argument_error once moved from
  std::unique_ptr<Impl> impl_;
};

/// Parses a layout: "auto", "spatial" or "replicated". @throws pcnn::invalid_argument_error
Layout parse_layout(const std::string& name);

/// Parses a device list: "all" (every CUDA device; with the CPU backend, "all" is one part),
/// or comma-separated ordinals "0,1". @throws pcnn::invalid_argument_error
std::vector<int> parse_devices(const std::string& list, Backend backend);

}  // namespace pcnn
