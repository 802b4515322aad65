// pcnn — a distributed index over an MPI communicator (component `mpi`, built where MPI is found):
// one spatial part of the cloud per rank, queries exchanged with MPI_Alltoallv, kNN, radius and
// hybrid rows byte-identical to one pcnn::Index over the whole cloud (see pcnn/distributed.hpp
// for why). Or, where the whole cloud fits each rank's device, replicas (Layout::replicated):
// every rank indexes the whole cloud and answers one contiguous block of the rows, with no
// exchange at all. Float32 or float64 coordinates (PointsView::data64), as stored.
//
//   pcnn::mpi::DistributedIndex index(MPI_COMM_WORLD, pcnn::host_points(xyz.data(), n));
//   pcnn::mpi::RankRows mine = index.self_knn({8});     // this rank's rows
//   pcnn::KnnResult all = index.gather(mine, n);         // every row, on rank 0
//
// Every call is collective: every rank of the communicator makes it, with the same arguments.
// Those are compared (k, max_nn, radius, exclude_self, rows, root, the point and query counts,
// and a digest of their type and of up to 4,096 evenly spaced points): where they differ, every
// rank throws pcnn::invalid_argument_error naming the argument (clouds that differ only between
// the sampled points are not caught). When one rank fails (bad view, out of memory...), every
// rank throws: that rank its own error, the others pcnn::error saying which rank failed — no
// rank is left waiting in a collective.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pcnn/distributed.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"
#include "pcnn/radius.hpp"

namespace pcnn::mpi {

/// What every other rank throws when one rank of a collective call failed.
class peer_failure : public error {
 public:
  peer_failure(const std::string& what, int rank) : error(what), rank_(rank) {}
  int rank() const { return rank_; }  ///< the first rank that failed

 private:
  int rank_;
};

/// This rank's share of a search: the global rows it answered (ascending) and those rows.
/// Replicated layout: `rows` is empty and the rank answered the contiguous rows
/// [first, first + result.rows) (the search makes no list of 8 bytes a row; use row(i)).
/// A caller that reads `rows` directly must check for this: automatic picks replicas on GPUs.
struct RankRows {
  std::vector<std::int64_t> rows;
  std::int64_t first = 0;
  KnnResult result;  ///< rows × k, global indices
  /// The global row of this share's i-th row.
  std::int64_t row(std::int64_t i) const {
    return rows.empty() ? first + i : rows[static_cast<std::size_t>(i)];
  }
};

/// A contiguous block of the result rows: rows [first, first + result.rows).
struct RankBlock {
  std::int64_t first = 0;
  KnnResult result;
};

/// This rank's share of a radius search: the global rows it answered (ascending) and those rows
/// in CSR form (offsets from 0); a count alone holds the offsets only. Replicated layout:
/// `rows` is empty and the rows are [first, first + result.rows), as for RankRows.
struct RankRadius {
  std::vector<std::int64_t> rows;
  std::int64_t first = 0;
  RadiusResult result;
  std::int64_t row(std::int64_t i) const {
    return rows.empty() ? first + i : rows[static_cast<std::size_t>(i)];
  }
};

/// A contiguous block of radius rows: rows [first, first + result.rows), offsets from 0.
struct RankRadiusBlock {
  std::int64_t first = 0;
  RadiusResult result;
};

/// What one rank did in the last search (wall clock, milliseconds).
struct RankStats {
  int rank = 0;
  int device = -1;                     ///< CUDA device ordinal, -1 on the CPU backend
  std::int64_t points = 0;             ///< points of its part (replicated: the whole cloud)
  std::int64_t home_queries = 0;       ///< queries whose home is its part (replicated: its block)
  std::int64_t queries_forwarded = 0;  ///< of those, sent to at least one other rank
  std::int64_t queries_received = 0;   ///< other ranks' queries it searched
  double startup_ms = 0;               ///< CUDA: its device's context start-up (at construction)
  double build_ms = 0, search_ms = 0;  ///< its index: build (at construction) and searches
  double exchange_ms = 0;  ///< the all-to-all exchanges (the cut: its checks, the pools'
                           ///< opening the first time, the blocks' allocation and opening
                           ///< where they grew)
  double total_ms = 0;     ///< the whole search call
  /// Replicated, CUDA, ranks of one host: the last dense self-search was cut along the index's
  /// order, each rank writing rows into the device memory of the rank whose block holds them
  /// (false: each rank searched its block of rows as a separate query set; see
  /// DistributedIndex's layout).
  bool by_position = false;
};

class DistributedIndex {
 public:
  /// Collective. Every rank passes the same whole cloud `points` (host memory); each keeps and
  /// indexes its own part (Partitioning over the communicator's size), or, replicated, the whole
  /// cloud. With the CUDA backend, `options.device` is replaced by the rank's position among the
  /// ranks of its host modulo the devices there, unless `keep_device`. Float32 or float64 points
  /// (kept in their type).
  ///
  /// `layout`: Layout::spatial, Layout::replicated (rank r answers rows
  /// [rows * r / ranks, rows * (r + 1) / ranks) of every search: the blocks redistribute()
  /// gives), or Layout::automatic: replicated on CUDA devices when every rank's device has room
  /// for the whole cloud (128 bytes a point of its free memory, shared by the ranks of the host
  /// on that device: the index and a search's scratch; rows that do not fit go to the host in
  /// passes) and options.memory is not given, else spatial. Every rank must pass the same layout
  /// (where they differ, spatial wins). Replicated also works on the CPU backend (every rank a
  /// CPU index of the whole cloud), unlike PartitionedIndex's replicas, which are per device.
  /// A replicated radius self-search counts the whole cloud on every rank (an index counts its
  /// own rows only all at once): its count does not shrink with more ranks. A replicated dense
  /// (kNN, hybrid) self-search on the CUDA devices of ranks of one host is cut along the index's
  /// order from the index's second one on: each rank searches a run of the index's positions and
  /// writes every row into the device memory of the rank whose block holds it, through a memory
  /// pool per rank that the others open (its file descriptor passed over a Unix socket; the
  /// blocks, rows × k × 8 bytes in all, stay open between searches). Otherwise each rank searches
  /// its block as a separate query set: the first dense self-search (opening the pools across
  /// the processes costs ~40 ms, which one search does not earn back), a cloud stored in spatial
  /// order (its blocks are already pieces of the curve, and come down while their search runs),
  /// ranks on several hosts or more than 8, devices whose pools other processes cannot open or
  /// whose memory the others cannot reach, a device without room for its block, a memory
  /// resource given (RankStats::by_position says which way a search went).
  DistributedIndex(MPI_Comm comm, PointsView points, IndexOptions options = {},
                   bool keep_device = false, Layout layout = Layout::automatic);
  /// With the CUDA backend and no options.memory, waits for all work on the rank's device (its
  /// index's pool goes: see PoolResource).
  ~DistributedIndex();
  DistributedIndex(DistributedIndex&&) noexcept;
  DistributedIndex& operator=(DistributedIndex&&) noexcept;
  DistributedIndex(const DistributedIndex&) = delete;
  DistributedIndex& operator=(const DistributedIndex&) = delete;

  int rank() const;
  int ranks() const;
  bool replicated() const;    ///< the layout chosen: every rank indexes the whole cloud
  std::int64_t size() const;  ///< points of the whole cloud

  /// Collective: the kNN of the points this rank's part holds (replicated: of its block of the
  /// cloud's points; exclude_self allowed).
  RankRows self_knn(const KnnParams& params);
  /// Collective: every rank passes the same whole query set; each answers the queries whose
  /// home is its part (replicated: its block of the queries).
  RankRows knn(PointsView queries, const KnnParams& params);
  /// Replicated layout, collective: this rank's block of the kNN rows (self, or of the whole
  /// query set every rank passes) into the caller's host memory, block(rows).second -
  /// block(rows).first rows × k each: the rows self_knn / knn return, byte for byte, written
  /// into buffers a caller reuses from call to call. @throws pcnn::invalid_argument_error
  /// (spatial layout, views of another shape)
  void self_knn(const KnnParams& params, MatrixView<std::int32_t> indices,
                MatrixView<float> sqdist);
  void knn(PointsView queries, const KnnParams& params, MatrixView<std::int32_t> indices,
           MatrixView<float> sqdist);
  /// This rank's block [first, end) of a search's `rows` rows in the replicated layout.
  std::pair<std::int64_t, std::int64_t> block(std::int64_t rows) const;
  /// Collective: hybrid (the max_nn nearest within params.radius) of this rank's points, or of
  /// the queries whose home is its part (replicated: its block); result.k = max_nn.
  RankRows self_hybrid(const HybridParams& params);
  RankRows hybrid(PointsView queries, const HybridParams& params);
  /// Collective: radius rows (every point within params.radius) of this rank's points, or of
  /// the queries whose home is its part (replicated: its block). The `_count` forms find the
  /// row sizes only (offsets).
  RankRadius self_radius(const RadiusParams& params);
  RankRadius radius(PointsView queries, const RadiusParams& params);
  RankRadius self_radius_count(const RadiusParams& params);
  RankRadius radius_count(PointsView queries, const RadiusParams& params);
  /// Collective: every rank's rows, in order, on `root` (an empty result elsewhere). Here and
  /// in redistribute, a share's rows are a list or a contiguous block (RankRows::first).
  /// `rows` is the total row count (the cloud's, or the query set's).
  KnnResult gather(const RankRows& mine, std::int64_t rows, int root = 0);
  /// Collective: the rows redistributed so that rank r holds the contiguous block
  /// [rows * r / ranks, rows * (r + 1) / ranks) of them (for writing each rank's block at its
  /// offset, no rank holding every row).
  RankBlock redistribute(const RankRows& mine, std::int64_t rows);
  RankRadiusBlock redistribute(const RankRadius& mine, std::int64_t rows);
  /// Collective: every rank's radius rows (or, for counts, their offsets) on `root`.
  RadiusResult gather(const RankRadius& mine, std::int64_t rows, int root = 0);
  /// Collective: every rank's stats of the last search, on every rank.
  std::vector<RankStats> all_stats() const;
  const RankStats& last_stats() const;

  struct Impl;

 private:
  Impl& impl() const;  ///< @throws pcnn::invalid_argument_error once moved from
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcnn::mpi
