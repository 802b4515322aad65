// The distributed index over MPI: one part per rank, forwarded queries and their answers
// exchanged with MPI_Alltoallv, the merge on exact distances (dist/part.hpp).
#include "pcnn/mpi.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <exception>
#include <string>

#include "dist/part.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"

namespace pcnn::mpi {
namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw error(std::string("MPI: ") + what + " failed: " + std::string(text, len));
  }
}

// Runs `f` on every rank; if it threw on any rank, every rank throws: the failing ranks their
// own error, the others peer_failure naming the first failing rank. Keeps every rank out of a
// collective that a failed rank will never enter.
template <class F>
void collectively(MPI_Comm comm, F&& f) {
  std::exception_ptr e;
  try {
    f();
  } catch (...) {
    e = std::current_exception();
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = e ? rank : size;
  int first = size;
  check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (e) std::rethrow_exception(e);
  if (first < size) throw peer_failure("rank " + std::to_string(first) + " failed", first);
}

// A contiguous MPI type of `n` elements of `base`, freed with its owner.
class RowType {
 public:
  RowType(int n, MPI_Datatype base) {
    check(MPI_Type_contiguous(n, base, &type_), "MPI_Type_contiguous");
    check(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  ~RowType() { MPI_Type_free(&type_); }
  RowType(const RowType&) = delete;
  RowType& operator=(const RowType&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_;
};

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  long long sum = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    d[i] = static_cast<int>(sum);
    sum += counts[i];
    if (sum > INT_MAX) throw error("MPI exchange: more than 2^31-1 rows to one rank");
  }
  return d;
}

}  // namespace

struct DistributedIndex::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::int64_t n = 0;
  Partitioning partitioning;
  std::vector<dist::Bounds> bounds;
  dist::Part part;
  IndexOptions options;
  RankStats stats;
  double build_ms = 0;

  RankRows search(const PointsView* queries, const KnnParams& params);
};

DistributedIndex::DistributedIndex(MPI_Comm comm, PointsView points, IndexOptions options,
                                   bool keep_device)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  check(MPI_Comm_dup(comm, &m.comm), "MPI_Comm_dup");
  MPI_Comm_rank(m.comm, &m.rank);
  MPI_Comm_size(m.comm, &m.size);
  collectively(m.comm, [&] {
    PCNN_EXPECTS(points.memory == Memory::host, "a distributed index takes points in host memory");
    dist::require_float32(points, "references");
    PCNN_EXPECTS(points.count >= 0 && points.count <= INT32_MAX &&
                     (points.count == 0 || points.data) && points.stride >= 3,
                 "references: invalid view");
    m.n = points.count;
    if (options.backend == Backend::automatic)
      options.backend = query_device(options.device).available ? Backend::cuda : Backend::cpu;
    if (options.backend == Backend::cuda && !keep_device) {
      // The rank's place among the ranks of its host picks the device.
      MPI_Comm local;
      check(MPI_Comm_split_type(m.comm, MPI_COMM_TYPE_SHARED, m.rank, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
      int local_rank = 0;
      MPI_Comm_rank(local, &local_rank);
      MPI_Comm_free(&local);
      const int devices = device_count();
      if (devices == 0)
        throw no_device_error("rank " + std::to_string(m.rank) + ": no CUDA device");
      options.device = local_rank % devices;
    }
    m.options = options;
    m.partitioning = Partitioning(points, m.size);
    // Every rank assigns every point (the same answer everywhere) and keeps its own part; the
    // other parts' bounds decide where queries go.
    auto ids = m.partitioning.assign(points);
    for (int p = 0; p < m.size; ++p)
      m.bounds.push_back(dist::bounds_of(m.partitioning, points, &ids[p]));
    m.part.take(m.partitioning, points, std::move(ids[m.rank]));
    const auto t = clock_type::now();
    m.part.build(m.options);
    m.build_ms = ms_since(t);
  });
}

DistributedIndex::~DistributedIndex() {
  if (impl_ && impl_->comm != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&impl_->comm);
  }
}
DistributedIndex::DistributedIndex(DistributedIndex&&) noexcept = default;
DistributedIndex& DistributedIndex::operator=(DistributedIndex&&) noexcept = default;

int DistributedIndex::rank() const { return impl_->rank; }
int DistributedIndex::ranks() const { return impl_->size; }
std::int64_t DistributedIndex::size() const { return impl_->n; }
const RankStats& DistributedIndex::last_stats() const { return impl_->stats; }

RankRows DistributedIndex::Impl::search(const PointsView* queries, const KnnParams& params) {
  const auto t_start = clock_type::now();
  const int k = params.k;
  RankRows out;
  std::vector<float> qxyz;
  dist::HomeRows home;
  stats = RankStats();
  stats.rank = rank;
  stats.device = options.backend == Backend::cuda ? options.device : -1;
  stats.points = part.size();
  stats.build_ms = build_ms;
  // 1. This rank's home queries.
  collectively(comm, [&] {
    PCNN_EXPECTS(k >= 1 && k <= kMaxK,
                 "k must be between 1 and " + std::to_string(kMaxK) + ", got " + std::to_string(k));
    PCNN_EXPECTS(!(params.exclude_self && queries),
                 "exclude_self applies to a self-search only (no separate query set)");
    if (queries) {
      dist::require_float32(*queries, "queries");
      PCNN_EXPECTS(queries->memory == Memory::host && queries->count >= 0 &&
                       queries->count <= INT32_MAX && (queries->count == 0 || queries->data) &&
                       queries->stride >= 3,
                   "queries: invalid view (host memory, stride >= 3)");
      for (std::int64_t r = 0; r < queries->count; ++r) {
        const float* q = queries->data + r * queries->stride;
        if (partitioning.home_of(q) != rank) continue;
        out.rows.push_back(r);
        qxyz.insert(qxyz.end(), q, q + 3);
      }
    } else {
      out.rows.assign(part.ids.begin(), part.ids.end());
    }
    dist::search_home(part, rank, bounds, queries ? qxyz.data() : nullptr,
                      static_cast<std::int64_t>(out.rows.size()), params, options,
                      dist::hardware_threads(), options.backend == Backend::cuda && !options.memory,
                      home);
  });
  const float* qs = queries ? qxyz.data() : part.xyz.data();
  stats.home_queries = home.rows;
  stats.queries_forwarded = static_cast<std::int64_t>(home.forwarded.size());
  stats.search_ms = home.search_ms;

  // 2. Forwarded queries out, answers back: row types keep every count a number of rows.
  auto t = clock_type::now();
  std::vector<int> send(static_cast<std::size_t>(size)), recv(static_cast<std::size_t>(size));
  std::vector<float> out_xyz;
  for (int p = 0; p < size; ++p) {
    send[p] = static_cast<int>(home.to[p].size());
    for (std::int32_t j : home.to[p]) out_xyz.insert(out_xyz.end(), qs + 3 * j, qs + 3 * j + 3);
  }
  check(MPI_Alltoall(send.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  std::vector<int> sdisp, rdisp;
  std::vector<float> in_xyz;
  collectively(comm, [&] {
    sdisp = displacements(send);
    rdisp = displacements(recv);
    in_xyz.resize(3 * static_cast<std::size_t>(rdisp.back() + recv.back()));
  });
  const RowType point(3, MPI_FLOAT), drow(k, MPI_DOUBLE), irow(k, MPI_INT32_T);
  check(MPI_Alltoallv(out_xyz.data(), send.data(), sdisp.data(), point.get(), in_xyz.data(),
                      recv.data(), rdisp.data(), point.get(), comm),
        "MPI_Alltoallv (queries)");
  stats.exchange_ms += ms_since(t);
  const std::int64_t received = static_cast<std::int64_t>(in_xyz.size() / 3);
  stats.queries_received = received;
  dist::Answer ans;
  std::vector<double> back_d;
  std::vector<std::int32_t> back_i;
  collectively(comm, [&] {
    double unused_build = 0;
    dist::answer(part, in_xyz.data(), received, k, options, ans, unused_build, stats.search_ms);
    back_d.resize(static_cast<std::size_t>(sdisp.back() + send.back()) * k);
    back_i.resize(back_d.size());
  });
  t = clock_type::now();
  check(MPI_Alltoallv(ans.d.data(), recv.data(), rdisp.data(), drow.get(), back_d.data(),
                      send.data(), sdisp.data(), drow.get(), comm),
        "MPI_Alltoallv (distances)");
  check(MPI_Alltoallv(ans.idx.data(), recv.data(), rdisp.data(), irow.get(), back_i.data(),
                      send.data(), sdisp.data(), irow.get(), comm),
        "MPI_Alltoallv (indices)");
  stats.exchange_ms += ms_since(t);

  // 3. The merge on exact distances.
  for (int p = 0; p < size; ++p)
    if (send[p] > 0)
      dist::add_answers(home, p, &back_d[static_cast<std::size_t>(sdisp[p]) * k],
                        &back_i[static_cast<std::size_t>(sdisp[p]) * k], k);
  dist::finish_merge(home, k);
  out.result.rows = home.rows;
  out.result.k = k;
  out.result.indices = std::move(home.idx);
  out.result.sqdist = std::move(home.d);
  stats.total_ms = ms_since(t_start);
  return out;
}

RankRows DistributedIndex::self_knn(const KnnParams& params) {
  return impl_->search(nullptr, params);
}

RankRows DistributedIndex::knn(PointsView queries, const KnnParams& params) {
  return impl_->search(&queries, params);
}

KnnResult DistributedIndex::gather(const RankRows& mine, std::int64_t rows, int root) {
  Impl& m = *impl_;
  const int k = mine.result.k;
  int count = static_cast<int>(mine.rows.size());
  std::vector<int> counts(static_cast<std::size_t>(m.size));
  check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, root, m.comm), "MPI_Gather");
  std::vector<int> disp;
  std::vector<std::int64_t> all_rows;
  KnnResult packed, out;
  collectively(m.comm, [&] {
    PCNN_EXPECTS(k >= 1 && k <= kMaxK, "gather: rows of a search expected");
    if (m.rank != root) return;
    disp = displacements(counts);
    const std::int64_t total = std::int64_t(disp.back()) + counts.back();
    PCNN_EXPECTS(total == rows, "gather: the ranks hold " + std::to_string(total) +
                                    " rows, expected " + std::to_string(rows));
    all_rows.resize(static_cast<std::size_t>(total));
    packed.indices.resize(static_cast<std::size_t>(total) * k);
    packed.sqdist.resize(packed.indices.size());
  });
  const RowType irow(k, MPI_INT32_T), frow(k, MPI_FLOAT);
  check(MPI_Gatherv(mine.rows.data(), count, MPI_INT64_T, all_rows.data(), counts.data(),
                    disp.data(), MPI_INT64_T, root, m.comm),
        "MPI_Gatherv (rows)");
  check(MPI_Gatherv(mine.result.indices.data(), count, irow.get(), packed.indices.data(),
                    counts.data(), disp.data(), irow.get(), root, m.comm),
        "MPI_Gatherv (indices)");
  check(MPI_Gatherv(mine.result.sqdist.data(), count, frow.get(), packed.sqdist.data(),
                    counts.data(), disp.data(), frow.get(), root, m.comm),
        "MPI_Gatherv (distances)");
  if (m.rank != root) return out;
  out.rows = rows;
  out.k = k;
  out.indices.assign(static_cast<std::size_t>(rows) * k, -1);
  out.sqdist.assign(out.indices.size(), INFINITY);
  for (std::size_t i = 0; i < all_rows.size(); ++i) {
    const std::size_t r = static_cast<std::size_t>(all_rows[i]);
    std::copy(&packed.indices[i * k], &packed.indices[i * k] + k, &out.indices[r * k]);
    std::copy(&packed.sqdist[i * k], &packed.sqdist[i * k] + k, &out.sqdist[r * k]);
  }
  return out;
}

std::vector<RankStats> DistributedIndex::all_stats() const {
  const Impl& m = *impl_;
  std::vector<RankStats> all(static_cast<std::size_t>(m.size));
  check(MPI_Allgather(&m.stats, sizeof(RankStats), MPI_BYTE, all.data(), sizeof(RankStats),
                      MPI_BYTE, m.comm),
        "MPI_Allgather (stats)");
  return all;
}

}  // namespace pcnn::mpi
