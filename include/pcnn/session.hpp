// pcnn — a kNN session for frame loops: the index, staging buffers, streams and device workspace
// kept between calls, transfers staged as the machine does them best, overlapped with the search.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

namespace pcnn {

/// How points go to the device and results come back.
enum class Staging {
  automatic,   ///< mapped on integrated GPUs (Jetson: host and device share memory), else pinned
  pageable,    ///< plain copies from and to ordinary memory (the driver stages them)
  pinned,      ///< through page-locked staging buffers the session keeps (cudaHostAlloc)
  registered,  ///< the caller's own buffers page-locked for the transfer (cudaHostRegister)
  mapped,      ///< zero-copy: kernels read the points from and write results to host memory
};

/// Parses "auto", "pageable", "pinned", "registered" or "mapped"; throws pcnn::error otherwise.
Staging parse_staging(const std::string& name);
const char* to_string(Staging staging);
/// What Staging::automatic means on device `ordinal`.
Staging resolve_staging(Staging staging, int ordinal = 0);

struct SessionOptions {
  Staging staging = Staging::automatic;
  /// Queries per chunk of the pipeline (chunk c + 1 is searched while chunk c downloads);
  /// 0: automatic (a quarter of the queries, at least 64k, fewer when memory is short).
  std::int64_t chunk_rows = 0;
};

/// Results of a session query, in host memory the session owns (pinned, mapped or ordinary,
/// by staging mode): valid until the session's next call or its destruction.
struct KnnView {
  std::int64_t rows = 0;
  int k = 0;
  const std::int32_t* indices = nullptr;  ///< rows × k, as in KnnResult
  const float* sqdist = nullptr;          ///< rows × k
};

/// Transfer and overlap figures of the last call (CUDA events, wall clock for the whole).
struct SessionTimings {
  Staging staging = Staging::automatic;  ///< the mode that ran
  double total_ms = 0;                   ///< wall clock, from the call to results in host memory
  double host_staging_ms = 0;  ///< host time preparing uploads (copies into staging buffers,
                               ///< page-locking the caller's memory)
  float upload_ms = 0;         ///< device time of the host-to-device transfers
  float build_ms = 0;          ///< building the index (set_reference)
  float search_ms = 0;         ///< device time of the search kernels, all chunks
  float download_ms = 0;       ///< device time of the device-to-host transfers, all chunks
  std::int64_t upload_bytes = 0, download_bytes = 0;
  int chunks = 0;
  double upload_gbps() const { return upload_ms > 0 ? upload_bytes / (upload_ms * 1e6) : 0; }
  double download_gbps() const {
    return download_ms > 0 ? download_bytes / (download_ms * 1e6) : 0;
  }
};

/// A kNN session. set_reference() indexes a cloud; query() searches it for the references
/// themselves or for another cloud. When every row fits on the device, the search runs in passes
/// along the index's curve (its fastest order) and each chunk of rows goes to the host on a
/// second stream as soon as all its queries are done; otherwise chunks of rows are searched and
/// downloaded alternately on two streams (query_stream always works that way). After the first
/// call of a given size, a call makes no device allocation and no page-locked allocation (the
/// session keeps its device blocks and staging buffers; see pcnn::device_memory_stats). The same
/// neighbors as gpu_knn with Algorithm::grid.
///
/// Thread safety: a session is used by one thread at a time (calls are not synchronized);
/// different sessions may be used from different threads at once. Move-only.
class KnnSession {
 public:
  explicit KnnSession(SessionOptions options = {});
  ~KnnSession();
  KnnSession(KnnSession&&) noexcept;
  KnnSession& operator=(KnnSession&&) noexcept;
  KnnSession(const KnnSession&) = delete;
  KnnSession& operator=(const KnnSession&) = delete;

  /// Uploads `refs` (host memory) and builds the index; replaces the previous one.
  void set_reference(PointsView refs, SessionTimings* timings = nullptr);

  /// kNN of `queries` (host memory), or of the references themselves when null (then
  /// `params.exclude_self` may be set). Results in session memory (see KnnView).
  KnnView query(const PointsView* queries, KnnParams params, SessionTimings* timings = nullptr);

  /// The same, into the caller's buffers (rows × k each): in registered mode these are
  /// page-locked for the transfer and released afterwards, even when the search throws.
  void query_into(const PointsView* queries, KnnParams params, std::int32_t* indices, float* sqdist,
                  SessionTimings* timings = nullptr);

  /// Receives the rows of a streamed query, chunk by chunk in order: rows [first_row,
  /// first_row + rows.rows). The view is valid during the call only.
  using KnnSink = std::function<void(std::int64_t first_row, const KnnView& rows)>;

  /// The same search with the rows handed to `sink` as each chunk arrives (SessionOptions::
  /// chunk_rows rows at a time, or automatic), so that results larger than the device's or the
  /// host's memory can go straight to a file. Host memory used: two chunks.
  void query_stream(const PointsView* queries, KnnParams params, const KnnSink& sink,
                    SessionTimings* timings = nullptr);

  Staging staging() const;    ///< the resolved mode
  std::int64_t size() const;  ///< indexed points

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcnn
