// The replicated layout's dense self-search cut along the index's order across the ranks of one
// host, as dist::ShareExchange cuts it across the devices of one process.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/part.hpp"
#include "pcnn/index.hpp"

namespace pcnn::mpi::internal {

/// Rank r searches a run of positions of its index of the whole cloud (dist::cut_position) and
/// writes each row into the device memory of the rank whose block holds it; once every rank has
/// searched, each copies its block into its views. A cloud stored in random order makes each
/// contiguous block a random sample of the cloud: searched as separate queries, every warp's
/// rows spread over twice the volume (round 19: 1.46-1.57x one GPU for two, against 1.97x cut).
///
/// The blocks live in memory pools of this object's own, one a rank, exported to the other ranks
/// (cudaMemPoolExportToShareableHandle: a file descriptor, passed over a Unix socket to the
/// processes whose ids the communicator reported) and opened there with access for their
/// device (cudaMemPoolSetAccess: the pool's state; no process-wide state such as peer access).
/// A block stays allocated, and open in the other ranks, between searches. One that must grow
/// is replaced: the new block is opened everywhere, then the old one closed everywhere, then
/// freed. The destructor is not collective: each rank closes the blocks it opened, waits up to 2 s
/// for the others to do the same (an empty message from each), then frees its own; no rank
/// writes or reads a block after the search that wrote it has ended on every rank. The pool's
/// descriptor goes only to the ranks' processes (their ids and user, as the kernel reports the
/// sender of each connection), and every wait on a socket is bounded (10 s): a stranger on the
/// socket makes the ranks fall back, never hang.
class RankShares {
 public:
  /// `comm`: the index's communicator (kept, not owned); `one_host`: every rank of it on this
  /// host; `device`: this rank's CUDA device. Not collective.
  RankShares(MPI_Comm comm, bool one_host, int device);
  ~RankShares();
  RankShares(const RankShares&) = delete;
  RankShares& operator=(const RankShares&) = delete;

  /// Collective. The self-search rows of this rank's block [first[rank], first[rank + 1]) (first:
  /// ranks + 1 boundaries, the last the rows) into host memory `idx` / `dist`, searched on
  /// `whole`, this rank's index of the whole cloud. False on every rank alike, having searched
  /// nothing, where it cannot run: more than 8 ranks or ranks on several hosts, devices without
  /// pools that other processes may open or that cannot reach each other's memory, replicas
  /// whose orders differ where the positions are cut, a device without room for its block; or
  /// where it would not pay: the first call of this object (opening the pools across the
  /// processes, ~40 ms, is for an index searched again), a cloud stored in spatial order
  /// (dist::kCutBreaks). Throws on every
  /// rank where the search failed on one (peer_failure on the others).
  /// `setup_ms`: the checks, and the blocks' allocation and opening where they grew.
  bool self_search(Index& whole, const dist::DenseSearch& search,
                   const std::vector<std::int64_t>& first, std::int32_t* idx, float* dist,
                   double& setup_ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcnn::mpi::internal
