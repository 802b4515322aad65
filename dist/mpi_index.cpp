// The distributed index over MPI: one part per rank, forwarded queries and their answers
// exchanged with MPI_Alltoallv, the merge on exact distances (dist/part.hpp); or one replica of
// the whole cloud per rank, each answering a contiguous block of the rows.
#include "pcnn/mpi.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>

#include "core/fresh_pages.hpp"
#include "core/number_text.hpp"
#include "dist/mpi_common.hpp"
#include "dist/part.hpp"
#include "dist/rank_shares.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"

namespace pcnn::mpi {
namespace {

using internal::check;
using internal::collectively;
using internal::Same;
using internal::same_on_every_rank;
using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
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

// The counts and displacements of one all-to-all exchange, in rows.
struct Exchange {
  std::vector<int> send, recv, sdisp, rdisp;
  int sent() const { return sdisp.back() + send.back(); }
  int received() const { return rdisp.back() + recv.back(); }
};

// The MPI type of `n` coordinates of the type `packed` holds.
MPI_Datatype scalar_of(bool is_double) { return is_double ? MPI_DOUBLE : MPI_FLOAT; }

void* data_of(dist::Packed& p) {
  return p.is_double ? static_cast<void*>(p.d.data()) : static_cast<void*>(p.f.data());
}

// The global rows of a share as a list: its own, or its contiguous block's made into one.
template <class Share>
const std::vector<std::int64_t>& row_list(const Share& mine, std::vector<std::int64_t>& made) {
  if (!mine.rows.empty() || mine.result.rows == 0) return mine.rows;
  made.resize(static_cast<std::size_t>(mine.result.rows));
  std::iota(made.begin(), made.end(), mine.first);
  return made;
}

// A rank's dense share, before it is gathered or redistributed: rows of one search, whole.
void check_share(const RankRows& mine, const std::string& call) {
  const KnnResult& r = mine.result;
  PCNN_EXPECTS(r.k >= 1 && r.k <= kMaxK && r.rows >= 0 &&
                   (mine.rows.empty() || mine.rows.size() == static_cast<std::size_t>(r.rows)) &&
                   r.indices.size() == static_cast<std::size_t>(r.rows) * r.k &&
                   r.sqdist.size() == r.indices.size(),
               call + ": rows of a search expected");
}

// What a rank's radius share holds: no pairs at all, its rows' pairs, or their counts alone
// (radius_count).
enum class RadiusShare { empty, filled, counts };
RadiusShare radius_share(const RankRadius& mine, const std::string& call) {
  const RadiusResult& r = mine.result;
  PCNN_EXPECTS(
      r.rows >= 0 && (mine.rows.empty() || mine.rows.size() == static_cast<std::size_t>(r.rows)) &&
          r.offsets.size() == static_cast<std::size_t>(r.rows) + 1 && r.offsets.front() == 0 &&
          std::is_sorted(r.offsets.begin(), r.offsets.end()) &&
          r.sqdist.size() == r.indices.size() &&
          (r.indices.empty() || r.indices.size() == static_cast<std::size_t>(r.offsets.back())),
      call + ": radius rows of a search expected");
  if (r.offsets.back() == 0) return RadiusShare::empty;
  return r.indices.empty() ? RadiusShare::counts : RadiusShare::filled;
}

// Rank r's block of `rows` rows: [rows * r / ranks, rows * (r + 1) / ranks).
std::int64_t block_begin(std::int64_t rows, int r, int ranks) { return rows * r / ranks; }

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A digest of a checked host view: its count, its type and the stored bits of up to 4,096 evenly
// spaced points. Ranks that pass different clouds or query sets (each its own, as some
// distributed trees take them) differ in it; a difference between the samples can pass.
std::uint64_t sampled_digest(const PointsView& v) {
  std::uint64_t h = mix(static_cast<std::uint64_t>(v.count) * 2 + (v.is_double() ? 1 : 0));
  const std::int64_t samples = std::min<std::int64_t>(v.count, 4096);
  for (std::int64_t j = 0; j < samples; ++j) {
    const std::int64_t i = j * v.count / samples;
    for (int a = 0; a < 3; ++a) {
      std::uint64_t bits = 0;
      if (v.data64) {
        std::memcpy(&bits, &v.data64[i * v.stride + a], sizeof(double));
      } else {
        std::uint32_t b32 = 0;
        std::memcpy(&b32, &v.data[i * v.stride + a], sizeof(float));
        bits = b32;
      }
      h = mix(h ^ (bits + static_cast<std::uint64_t>(3 * i + a)));
    }
  }
  return h;
}

// A radius's bits, -0 as 0 (equal radii compare equal).
std::uint64_t bits_of(double x) {
  if (x == 0) x = 0;
  std::uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// The query set's arguments of a search: none (a self-search) or its digest.
Same queries_arg(const PointsView* queries) {
  return {"query set (count, type and sampled coordinates)",
          queries ? sampled_digest(*queries) : ~std::uint64_t(0), Same::digest};
}

// Collective over `local` (the ranks of one host): those on the same CUDA device as this rank
// (PCI address; 1 on the CPU backend or when the address is not known).
int ranks_on_my_device(MPI_Comm local, const IndexOptions& options) {
  char bus[32] = {0};
  if (options.backend == Backend::cuda &&
      cudaDeviceGetPCIBusId(bus, sizeof bus - 1, options.device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    bus[0] = 0;
  }
  int size = 1;
  MPI_Comm_size(local, &size);
  std::vector<char> all(static_cast<std::size_t>(size) * sizeof bus);
  check(MPI_Allgather(bus, sizeof bus, MPI_CHAR, all.data(), sizeof bus, MPI_CHAR, local),
        "MPI_Allgather (devices)");
  if (!bus[0]) return 1;
  int same = 0;
  for (int r = 0; r < size; ++r) same += std::strncmp(bus, &all[r * sizeof bus], sizeof bus) == 0;
  return std::max(same, 1);
}

}  // namespace

struct DistributedIndex::Impl {
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  // The duplicated communicator, also when the constructor threw.
  ~Impl() {
    cut.reset();  // it uses the communicator
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::int64_t n = 0;
  Partitioning partitioning;
  std::vector<dist::Bounds> bounds;
  dist::Part part;
  std::optional<Index> whole;  // replicated: this rank's index of the whole cloud
  // Replicated on CUDA devices of one host: self-searches cut along the order across the ranks.
  std::unique_ptr<internal::RankShares> cut;
  int sharing = 1;  // CUDA: ranks of this host on this rank's device
  double startup_ms = 0;
  IndexOptions options;
  RankStats stats;
  double build_ms = 0;

  // This rank's home queries: their global rows and coordinates (a self-search: its points).
  struct Batch {
    std::vector<std::int64_t> rows;
    dist::Packed qxyz;
    const PointsView* queries = nullptr;
    dist::Coords c;
    const dist::Coords* q() {
      if (!queries) return nullptr;
      c = qxyz.coords();
      return &c;
    }
  };
  void start_stats();
  void check_root(int root) const {
    PCNN_EXPECTS(root >= 0 && root < size, "gather: root " + std::to_string(root) +
                                               " is not a rank of the communicator's " +
                                               std::to_string(size));
  }
  // Collective, first in every search: each rank checks its own arguments, then every rank
  // must have passed the same ones (mpi.hpp).
  void agree_dense(const PointsView* queries, const dist::DenseSearch& search);
  void agree_radius(const PointsView* queries, const RadiusParams& params, bool count_only);
  Batch home_batch(const PointsView* queries);
  // Sends the rows `to[p]` of `qs` to rank p, receives the queries of the others.
  dist::Packed exchange_queries(const std::vector<std::vector<std::int32_t>>& to,
                                const dist::Coords& qs, bool is_double, Exchange& x);
  RankRows dense(const PointsView* queries, const dist::DenseSearch& search);
  RankRadius radius(const PointsView* queries, const RadiusParams& params, bool count_only);
  // Replicated: this rank's block of the rows, searched on its whole index.
  RankRows dense_block(const PointsView* queries, const dist::DenseSearch& search,
                       const MatrixView<std::int32_t>* into_idx = nullptr,
                       const MatrixView<float>* into_d = nullptr);
  RankRadius radius_block(const PointsView* queries, const RadiusParams& params, bool count_only);
  bool fits_whole_cloud(const PointsView& points) const;
  void check_queries(const PointsView* queries, bool exclude_self) const;
  void check_dense(const PointsView* queries, const dist::DenseSearch& search) const;
};

DistributedIndex::DistributedIndex(MPI_Comm comm, PointsView points, IndexOptions options,
                                   bool keep_device, Layout layout)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = impl();
  check(MPI_Comm_dup(comm, &m.comm), "MPI_Comm_dup");
  MPI_Comm_rank(m.comm, &m.rank);
  MPI_Comm_size(m.comm, &m.size);
  // The rank's place among the ranks of its host, on every rank (a collective call must not
  // depend on what a rank resolved its backend to).
  MPI_Comm local;
  check(MPI_Comm_split_type(m.comm, MPI_COMM_TYPE_SHARED, m.rank, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  struct FreeLocal {
    MPI_Comm& c;
    ~FreeLocal() { MPI_Comm_free(&c); }
  } free_local{local};
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  collectively(m.comm, [&] {
    PCNN_EXPECTS(points.memory == Memory::host, "a distributed index takes points in host memory");
    PCNN_EXPECTS(points.count >= 0 && points.count <= INT32_MAX &&
                     (points.count == 0 || points.address()) && points.stride >= 3,
                 "references: invalid view");
    m.n = points.count;
    if (options.backend == Backend::automatic)
      options.backend = query_device(options.device).available ? Backend::cuda : Backend::cpu;
    if (options.backend == Backend::cuda && !keep_device) {
      // The rank's place among the ranks of its host picks the device.
      const int devices = device_count();
      if (devices == 0)
        throw no_device_error("rank " + std::to_string(m.rank) + ": no CUDA device");
      options.device = local_rank % devices;
    }
    // The context's start-up (hundreds of ms) apart from the build, as one process reports it.
    if (options.backend == Backend::cuda) m.startup_ms = initialize_device(options.device);
    m.options = options;
  });
  same_on_every_rank(
      m.comm, "DistributedIndex",
      {{"point count", static_cast<std::uint64_t>(points.count)},
       {"points (type and sampled coordinates)", sampled_digest(points), Same::digest}});
  // How many ranks of this host share its device (by PCI address: ordinals differ between
  // ranks that see different devices), then the same layout on every rank: replicas only if
  // every rank's device holds the cloud.
  m.sharing = ranks_on_my_device(local, m.options);
  int replicate =
      layout == Layout::replicated || (layout == Layout::automatic && m.fits_whole_cloud(points));
  check(MPI_Allreduce(MPI_IN_PLACE, &replicate, 1, MPI_INT, MPI_MIN, m.comm), "MPI_Allreduce");
  collectively(m.comm, [&] {
    if (replicate) {
      const auto t = clock_type::now();
      m.whole.emplace(points, m.options);
      m.build_ms = ms_since(t);
      return;
    }
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
  // The cut's blocks come from pools of its own: not under a memory resource of the caller's.
  const bool cuda = replicate && m.options.backend == Backend::cuda && !m.options.memory;
  if (internal::on_every_rank(m.comm, cuda))
    m.cut = std::make_unique<internal::RankShares>(m.comm, local_size == m.size, m.options.device);
}

DistributedIndex::~DistributedIndex() = default;
DistributedIndex::Impl& DistributedIndex::impl() const {
  PCNN_EXPECTS(impl_ != nullptr, "use of a moved-from pcnn::mpi::DistributedIndex");
  return *impl_;
}
DistributedIndex::DistributedIndex(DistributedIndex&&) noexcept = default;
DistributedIndex& DistributedIndex::operator=(DistributedIndex&&) noexcept = default;

int DistributedIndex::rank() const { return impl().rank; }
int DistributedIndex::ranks() const { return impl().size; }
bool DistributedIndex::replicated() const { return impl().whole.has_value(); }
std::int64_t DistributedIndex::size() const { return impl().n; }
const RankStats& DistributedIndex::last_stats() const { return impl().stats; }

void DistributedIndex::Impl::start_stats() {
  stats = RankStats();
  stats.rank = rank;
  stats.device = options.backend == Backend::cuda ? options.device : -1;
  stats.points = whole ? whole->size() : part.size();
  stats.startup_ms = startup_ms;
  stats.build_ms = build_ms;
}

// Free device memory, shared by the ranks on the device, against 128 bytes a point.
bool DistributedIndex::Impl::fits_whole_cloud(const PointsView& points) const {
  if (options.backend != Backend::cuda || options.memory) return false;
  std::size_t free_bytes = 0, total = 0;
  int was = 0;
  if (cudaGetDevice(&was) != cudaSuccess || cudaSetDevice(options.device) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  static_cast<void>(cudaSetDevice(was));
  return static_cast<std::int64_t>(free_bytes / static_cast<std::size_t>(sharing)) >=
         128 * points.count;
}

void DistributedIndex::Impl::agree_dense(const PointsView* queries,
                                         const dist::DenseSearch& search) {
  collectively(comm, [&] { check_dense(queries, search); });
  same_on_every_rank(comm, search.hybrid ? "hybrid" : "knn",
                     {{"search (knn or hybrid)", search.hybrid ? 1u : 0u},
                      {search.hybrid ? "max_nn" : "k", static_cast<std::uint64_t>(search.k)},
                      {"radius", bits_of(search.radius), Same::real},
                      {"exclude_self", search.exclude_self ? 1u : 0u},
                      queries_arg(queries)});
}

void DistributedIndex::Impl::agree_radius(const PointsView* queries, const RadiusParams& params,
                                          bool count_only) {
  collectively(comm, [&] {
    PCNN_EXPECTS(std::isfinite(params.radius) && params.radius >= 0,
                 "radius must be finite and >= 0, got " + detail::number_text(params.radius));
    check_queries(queries, params.exclude_self);
  });
  same_on_every_rank(comm, "radius",
                     {{"radius", bits_of(params.radius), Same::real},
                      {"exclude_self", params.exclude_self ? 1u : 0u},
                      {"count_only (radius or radius_count)", count_only ? 1u : 0u},
                      queries_arg(queries)});
}

void DistributedIndex::Impl::check_queries(const PointsView* queries, bool exclude_self) const {
  PCNN_EXPECTS(!(exclude_self && queries),
               "exclude_self applies to a self-search only (no separate query set)");
  if (queries)
    PCNN_EXPECTS(queries->memory == Memory::host && queries->count >= 0 &&
                     queries->count <= INT32_MAX && (queries->count == 0 || queries->address()) &&
                     queries->stride >= 3,
                 "queries: invalid view (host memory, stride >= 3)");
}

void DistributedIndex::Impl::check_dense(const PointsView* queries,
                                         const dist::DenseSearch& search) const {
  PCNN_EXPECTS(search.k >= 1 && search.k <= kMaxK,
               std::string(search.hybrid ? "max_nn" : "k") + " must be between 1 and " +
                   std::to_string(kMaxK) + ", got " + std::to_string(search.k));
  PCNN_EXPECTS(!search.hybrid || (std::isfinite(search.radius) && search.radius >= 0),
               "radius must be finite and >= 0");
  check_queries(queries, search.exclude_self);
}

// Into the caller's views (into_idx, into_d) or an owning result.
RankRows DistributedIndex::Impl::dense_block(const PointsView* queries,
                                             const dist::DenseSearch& search,
                                             const MatrixView<std::int32_t>* into_idx,
                                             const MatrixView<float>* into_d) {
  agree_dense(queries, search);
  const auto t_start = clock_type::now();
  RankRows out;
  start_stats();
  const std::int64_t rows = queries ? queries->count : n, k = search.k;
  KnnResult& r = out.result;
  MatrixView<std::int32_t> iv;
  MatrixView<float> dv;
  collectively(comm, [&] {
    PCNN_EXPECTS(whole, "rows into the caller's memory need the replicated layout");
    out.first = block_begin(rows, rank, size);
    r.rows = block_begin(rows, rank + 1, size) - out.first;
    r.k = search.k;
    iv = {nullptr, r.rows, k};
    dv = {nullptr, r.rows, k};
    if (into_idx) {
      for (const auto& [memory, vr, vc, data] :
           {std::tuple{into_idx->memory, into_idx->rows, into_idx->cols,
                       static_cast<const void*>(into_idx->data)},
            std::tuple{into_d->memory, into_d->rows, into_d->cols,
                       static_cast<const void*>(into_d->data)}})
        PCNN_EXPECTS(memory == Memory::host && vr == r.rows && vc == k && (r.rows == 0 || data),
                     "this rank's block: views of " + std::to_string(r.rows) + " x " +
                         std::to_string(k) + " in host memory expected");
      iv.data = into_idx->data;
      dv.data = into_d->data;
    } else {
      detail::resize_fresh(r.indices, static_cast<std::size_t>(r.rows * k));
      detail::resize_fresh(r.sqdist, r.indices.size());
      iv.data = r.indices.data();
      dv.data = r.sqdist.data();
    }
  });
  const auto t = clock_type::now();
  if (!queries && cut) {
    std::vector<std::int64_t> first(static_cast<std::size_t>(size) + 1);
    for (int b = 0; b <= size; ++b) first[static_cast<std::size_t>(b)] = block_begin(rows, b, size);
    stats.by_position =
        cut->self_search(*whole, search, first, iv.data, dv.data, stats.exchange_ms);
  }
  if (!stats.by_position)
    collectively(comm, [&] {
      if (r.rows > 0 && queries) {
        const PointsView q = queries->slice(out.first, r.rows);
        search.run(*whole, &q, iv, dv);
      } else if (r.rows > 0) {
        search.run_rows(*whole, out.first, iv, dv);
      }
    });
  stats.search_ms = ms_since(t);
  stats.home_queries = out.result.rows;
  stats.total_ms = ms_since(t_start);
  return out;
}

// A self-search's rows are counted all at once (an index counts its own rows only so), then
// this rank keeps its block's counts; separate queries count the block alone.
RankRadius DistributedIndex::Impl::radius_block(const PointsView* queries,
                                                const RadiusParams& params, bool count_only) {
  agree_radius(queries, params, count_only);
  const auto t_start = clock_type::now();
  RankRadius out;
  start_stats();
  collectively(comm, [&] {
    const std::int64_t rows = queries ? queries->count : n;
    out.first = block_begin(rows, rank, size);
    RadiusResult& r = out.result;
    r.rows = block_begin(rows, rank + 1, size) - out.first;
    const auto t = clock_type::now();
    r.offsets.assign(static_cast<std::size_t>(r.rows) + 1, 0);
    std::optional<PointsView> q;
    if (queries) {
      q = queries->slice(out.first, r.rows);
      whole->radius_count(*q, params, {r.offsets.data(), r.rows + 1});
    } else if (r.rows > 0) {
      std::vector<std::int64_t> all(static_cast<std::size_t>(rows) + 1);
      whole->self_radius_count(params, {all.data(), rows + 1});
      for (std::int64_t i = 0; i <= r.rows; ++i) r.offsets[i] = all[out.first + i] - all[out.first];
    }
    if (!count_only) {
      const std::int64_t pairs = r.offsets.back();
      detail::resize_fresh(r.indices, static_cast<std::size_t>(pairs));
      detail::resize_fresh(r.sqdist, r.indices.size());
      const ArrayView<const std::int64_t> off{r.offsets.data(), r.rows + 1};
      const ArrayView<std::int32_t> iv{r.indices.data(), pairs};
      const ArrayView<float> dv{r.sqdist.data(), pairs};
      if (q)
        whole->radius_fill(*q, params, off, iv, dv);
      else if (r.rows > 0)
        whole->self_radius_fill_rows(out.first, params, off, iv, dv);
    }
    stats.search_ms = ms_since(t);
  });
  stats.home_queries = out.result.rows;
  stats.total_ms = ms_since(t_start);
  return out;
}

// After agree_dense / agree_radius, which checked the queries.
DistributedIndex::Impl::Batch DistributedIndex::Impl::home_batch(const PointsView* queries) {
  Batch b;
  b.queries = queries;
  if (queries) {
    b.qxyz = dist::Packed(queries->is_double());
    for (std::int64_t r = 0; r < queries->count; ++r) {
      double q[3];
      dist::read_point(*queries, r, q);
      if (partitioning.home_of(q) != rank) continue;
      b.rows.push_back(r);
      b.qxyz.push(*queries, r);
    }
  } else {
    b.rows.assign(part.ids.begin(), part.ids.end());
  }
  return b;
}

dist::Packed DistributedIndex::Impl::exchange_queries(
    const std::vector<std::vector<std::int32_t>>& to, const dist::Coords& qs, bool is_double,
    Exchange& x) {
  const auto t = clock_type::now();
  x.send.assign(static_cast<std::size_t>(size), 0);
  x.recv.assign(static_cast<std::size_t>(size), 0);
  dist::Packed out(is_double);
  collectively(comm, [&] {
    for (int p = 0; p < size; ++p) {
      x.send[p] = static_cast<int>(to[p].size());
      for (std::int32_t j : to[p]) out.push(qs, j);
    }
  });
  check(MPI_Alltoall(x.send.data(), 1, MPI_INT, x.recv.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  dist::Packed in(is_double);
  collectively(comm, [&] {
    x.sdisp = displacements(x.send);
    x.rdisp = displacements(x.recv);
    if (is_double)
      in.d.resize(3 * static_cast<std::size_t>(x.received()));
    else
      in.f.resize(3 * static_cast<std::size_t>(x.received()));
  });
  const RowType point(3, scalar_of(is_double));
  check(MPI_Alltoallv(data_of(out), x.send.data(), x.sdisp.data(), point.get(), data_of(in),
                      x.recv.data(), x.rdisp.data(), point.get(), comm),
        "MPI_Alltoallv (queries)");
  stats.exchange_ms += ms_since(t);
  stats.queries_received = in.size();
  return in;
}

RankRows DistributedIndex::Impl::dense(const PointsView* queries, const dist::DenseSearch& search) {
  if (whole) return dense_block(queries, search);
  agree_dense(queries, search);
  const auto t_start = clock_type::now();
  const int k = search.k;
  RankRows out;
  Batch b;
  dist::HomeRows home;
  start_stats();
  // 1. This rank's home queries.
  collectively(comm, [&] {
    b = home_batch(queries);
    dist::search_home(part, rank, bounds, b.q(), static_cast<std::int64_t>(b.rows.size()), search,
                      options, dist::hardware_threads(),
                      options.backend == Backend::cuda && !options.memory, home);
  });
  out.rows = std::move(b.rows);
  const dist::Coords qs = queries ? b.qxyz.coords() : part.coords();
  const bool is_double = queries ? queries->is_double() : part.xyz.is_double;
  stats.home_queries = home.rows;
  stats.queries_forwarded = static_cast<std::int64_t>(home.forwarded.size());
  stats.search_ms = home.search_ms;

  // 2. Forwarded queries out, answers back: row types keep every count a number of rows.
  Exchange x;
  const dist::Packed in = exchange_queries(home.to, qs, is_double, x);
  dist::Answer ans;
  std::vector<double> back_d;
  std::vector<std::int32_t> back_i;
  collectively(comm, [&] {
    double unused_build = 0;
    dist::answer(part, in.coords(), in.size(), search, options, ans, unused_build, stats.search_ms);
    back_d.resize(static_cast<std::size_t>(x.sent()) * k);
    back_i.resize(back_d.size());
  });
  const auto t = clock_type::now();
  const RowType drow(k, MPI_DOUBLE), irow(k, MPI_INT32_T);
  check(MPI_Alltoallv(ans.d.data(), x.recv.data(), x.rdisp.data(), drow.get(), back_d.data(),
                      x.send.data(), x.sdisp.data(), drow.get(), comm),
        "MPI_Alltoallv (distances)");
  check(MPI_Alltoallv(ans.idx.data(), x.recv.data(), x.rdisp.data(), irow.get(), back_i.data(),
                      x.send.data(), x.sdisp.data(), irow.get(), comm),
        "MPI_Alltoallv (indices)");
  stats.exchange_ms += ms_since(t);

  // 3. The merge on exact distances (it allocates: a rank out of memory fails every rank).
  collectively(comm, [&] {
    for (int p = 0; p < size; ++p)
      if (x.send[p] > 0)
        dist::add_answers(home, p, &back_d[static_cast<std::size_t>(x.sdisp[p]) * k],
                          &back_i[static_cast<std::size_t>(x.sdisp[p]) * k], k);
    dist::finish_merge(home, k);
  });
  out.result.rows = home.rows;
  out.result.k = k;
  out.result.indices = std::move(home.idx);
  out.result.sqdist = std::move(home.d);
  stats.total_ms = ms_since(t_start);
  return out;
}

RankRadius DistributedIndex::Impl::radius(const PointsView* queries, const RadiusParams& params,
                                          bool count_only) {
  if (whole) return radius_block(queries, params, count_only);
  agree_radius(queries, params, count_only);
  const auto t_start = clock_type::now();
  RankRadius out;
  Batch b;
  dist::RadiusHome home;
  start_stats();
  const int threads = dist::hardware_threads();
  // 1. This rank's home queries, and where else their balls reach.
  collectively(comm, [&] {
    b = home_batch(queries);
    dist::radius_home(part, rank, bounds, b.q(), static_cast<std::int64_t>(b.rows.size()), params,
                      count_only, options, threads, home);
  });
  out.rows = std::move(b.rows);
  const dist::Coords qs = queries ? b.qxyz.coords() : part.coords();
  const bool is_double = queries ? queries->is_double() : part.xyz.is_double;
  stats.home_queries = home.rows;
  stats.queries_forwarded = static_cast<std::int64_t>(home.forwarded.size());
  stats.search_ms = home.search_ms;

  // 2. Forwarded queries out; their rows back: the row sizes, then the entries.
  Exchange x;
  const dist::Packed in = exchange_queries(home.to, qs, is_double, x);
  dist::RadiusRows ans;
  std::vector<std::int64_t> sizes_out, sizes_back;
  std::vector<int> entries_out(static_cast<std::size_t>(size)), entries_back(entries_out.size());
  collectively(comm, [&] {
    double unused_build = 0;
    const dist::Coords c = in.coords();
    dist::radius_in_part(part, &c, in.size(), params, count_only, options, threads, ans,
                         unused_build, stats.search_ms);
    sizes_out.resize(static_cast<std::size_t>(in.size()));
    for (std::int64_t r = 0; r < in.size(); ++r) sizes_out[r] = ans.offsets[r + 1] - ans.offsets[r];
    for (int p = 0; p < size; ++p) {
      const std::int64_t e = ans.offsets[x.rdisp[p] + x.recv[p]] - ans.offsets[x.rdisp[p]];
      PCNN_EXPECTS(e <= INT_MAX, "MPI exchange: more than 2^31-1 radius pairs to one rank");
      entries_out[p] = count_only ? 0 : static_cast<int>(e);
    }
    sizes_back.resize(static_cast<std::size_t>(x.sent()));
  });
  auto t = clock_type::now();
  check(MPI_Alltoallv(sizes_out.data(), x.recv.data(), x.rdisp.data(), MPI_INT64_T,
                      sizes_back.data(), x.send.data(), x.sdisp.data(), MPI_INT64_T, comm),
        "MPI_Alltoallv (row sizes)");
  check(MPI_Alltoall(entries_out.data(), 1, MPI_INT, entries_back.data(), 1, MPI_INT, comm),
        "MPI_Alltoall (entries)");
  stats.exchange_ms += ms_since(t);
  // The answers of every rank, in one CSR of the rows this rank sent, in rank order.
  dist::RadiusRows back;
  std::vector<int> edisp_out, edisp_back;
  collectively(comm, [&] {
    back.offsets.assign(sizes_back.size() + 1, 0);
    for (std::size_t r = 0; r < sizes_back.size(); ++r)
      back.offsets[r + 1] = back.offsets[r] + sizes_back[r];
    edisp_out = displacements(entries_out);
    edisp_back = displacements(entries_back);
    if (!count_only) {
      back.d.resize(static_cast<std::size_t>(back.offsets.back()));
      back.idx.resize(back.d.size());
    }
  });
  if (!count_only) {
    t = clock_type::now();
    check(MPI_Alltoallv(ans.d.data(), entries_out.data(), edisp_out.data(), MPI_DOUBLE,
                        back.d.data(), entries_back.data(), edisp_back.data(), MPI_DOUBLE, comm),
          "MPI_Alltoallv (radius distances)");
    check(MPI_Alltoallv(ans.idx.data(), entries_out.data(), edisp_out.data(), MPI_INT32_T,
                        back.idx.data(), entries_back.data(), edisp_back.data(), MPI_INT32_T, comm),
          "MPI_Alltoallv (radius indices)");
    stats.exchange_ms += ms_since(t);
  }

  // 3. The merge on exact distances (it allocates: a rank out of memory fails every rank).
  collectively(comm, [&] {
    const std::vector<const dist::RadiusRows*> answers(static_cast<std::size_t>(size), &back);
    std::vector<std::int64_t> first(x.sdisp.begin(), x.sdisp.end());
    dist::merge_radius(home, answers, first, count_only);
    RadiusResult& r = out.result;
    r.rows = home.rows;
    r.offsets = std::move(home.merged.offsets);
    r.indices = std::move(home.merged.idx);
    r.sqdist.assign(home.merged.d.begin(), home.merged.d.end());  // the exact doubles, rounded
  });
  stats.total_ms = ms_since(t_start);
  return out;
}

RankRows DistributedIndex::self_knn(const KnnParams& params) {
  return impl().dense(nullptr, dist::DenseSearch::of(params));
}

RankRows DistributedIndex::knn(PointsView queries, const KnnParams& params) {
  return impl().dense(&queries, dist::DenseSearch::of(params));
}

void DistributedIndex::self_knn(const KnnParams& params, MatrixView<std::int32_t> indices,
                                MatrixView<float> sqdist) {
  impl().dense_block(nullptr, dist::DenseSearch::of(params), &indices, &sqdist);
}

void DistributedIndex::knn(PointsView queries, const KnnParams& params,
                           MatrixView<std::int32_t> indices, MatrixView<float> sqdist) {
  impl().dense_block(&queries, dist::DenseSearch::of(params), &indices, &sqdist);
}

std::pair<std::int64_t, std::int64_t> DistributedIndex::block(std::int64_t rows) const {
  return {block_begin(rows, impl().rank, impl().size),
          block_begin(rows, impl().rank + 1, impl().size)};
}

RankRows DistributedIndex::self_hybrid(const HybridParams& params) {
  return impl().dense(nullptr, dist::DenseSearch::of(params));
}

RankRows DistributedIndex::hybrid(PointsView queries, const HybridParams& params) {
  return impl().dense(&queries, dist::DenseSearch::of(params));
}

RankRadius DistributedIndex::self_radius(const RadiusParams& params) {
  return impl().radius(nullptr, params, false);
}

RankRadius DistributedIndex::radius(PointsView queries, const RadiusParams& params) {
  return impl().radius(&queries, params, false);
}

RankRadius DistributedIndex::self_radius_count(const RadiusParams& params) {
  return impl().radius(nullptr, params, true);
}

RankRadius DistributedIndex::radius_count(PointsView queries, const RadiusParams& params) {
  return impl().radius(&queries, params, true);
}

KnnResult DistributedIndex::gather(const RankRows& mine, std::int64_t rows, int root) {
  Impl& m = impl();
  std::vector<std::int64_t> made;
  const std::vector<std::int64_t>* listed = nullptr;
  const int k = mine.result.k;
  collectively(m.comm, [&] {
    m.check_root(root);
    check_share(mine, "gather");
    listed = &row_list(mine, made);  // it allocates: inside collectively()
  });
  same_on_every_rank(m.comm, "gather",
                     {{"rows", static_cast<std::uint64_t>(rows)},
                      {"root", static_cast<std::uint64_t>(root)},
                      {"k (rows of one search)", static_cast<std::uint64_t>(k)}});
  const std::vector<std::int64_t>& list = *listed;
  int count = static_cast<int>(list.size());
  std::vector<int> counts(static_cast<std::size_t>(m.size));
  check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, root, m.comm), "MPI_Gather");
  std::vector<int> disp;
  std::vector<std::int64_t> all_rows;
  KnnResult packed, out;
  collectively(m.comm, [&] {
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
  check(MPI_Gatherv(list.data(), count, MPI_INT64_T, all_rows.data(), counts.data(), disp.data(),
                    MPI_INT64_T, root, m.comm),
        "MPI_Gatherv (rows)");
  check(MPI_Gatherv(mine.result.indices.data(), count, irow.get(), packed.indices.data(),
                    counts.data(), disp.data(), irow.get(), root, m.comm),
        "MPI_Gatherv (indices)");
  check(MPI_Gatherv(mine.result.sqdist.data(), count, frow.get(), packed.sqdist.data(),
                    counts.data(), disp.data(), frow.get(), root, m.comm),
        "MPI_Gatherv (distances)");
  collectively(m.comm, [&] {  // root allocates: out of memory there fails every rank
    if (m.rank != root) return;
    out.rows = rows;
    out.k = k;
    out.indices.assign(static_cast<std::size_t>(rows) * k, -1);
    out.sqdist.assign(out.indices.size(), INFINITY);
    for (std::size_t i = 0; i < all_rows.size(); ++i) {
      const std::int64_t r = all_rows[i];
      PCNN_EXPECTS(r >= 0 && r < rows, "gather: row " + std::to_string(r) + " outside");
      std::copy(&packed.indices[i * k], &packed.indices[i * k] + k, &out.indices[r * k]);
      std::copy(&packed.sqdist[i * k], &packed.sqdist[i * k] + k, &out.sqdist[r * k]);
    }
  });
  return out;
}

RankBlock DistributedIndex::redistribute(const RankRows& mine, std::int64_t rows) {
  Impl& m = impl();
  std::vector<std::int64_t> made;
  const std::vector<std::int64_t>* listed = nullptr;
  const int k = mine.result.k;
  collectively(m.comm, [&] {
    check_share(mine, "redistribute");
    listed = &row_list(mine, made);  // it allocates: inside collectively()
  });
  same_on_every_rank(m.comm, "redistribute",
                     {{"rows", static_cast<std::uint64_t>(rows)},
                      {"k (rows of one search)", static_cast<std::uint64_t>(k)}});
  const std::vector<std::int64_t>& list = *listed;
  const auto begin = [&](int p) { return block_begin(rows, p, m.size); };
  std::vector<int> send(static_cast<std::size_t>(m.size), 0), recv(send.size());
  RankBlock out;
  out.first = begin(m.rank);
  collectively(m.comm, [&] {
    int p = 0;
    for (const std::int64_t r : list) {  // ascending: the owners too
      PCNN_EXPECTS(r >= 0 && r < rows, "redistribute: row " + std::to_string(r) + " outside");
      while (r >= begin(p + 1)) ++p;
      ++send[p];
    }
  });
  check(MPI_Alltoall(send.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, m.comm), "MPI_Alltoall");
  std::vector<int> sdisp, rdisp;
  std::vector<std::int64_t> in_rows;
  KnnResult in;
  collectively(m.comm, [&] {
    sdisp = displacements(send);
    rdisp = displacements(recv);
    const std::int64_t n = std::int64_t(rdisp.back()) + recv.back();
    PCNN_EXPECTS(n == begin(m.rank + 1) - out.first,
                 "redistribute: " + std::to_string(n) + " rows for a block of " +
                     std::to_string(begin(m.rank + 1) - out.first));
    in_rows.resize(static_cast<std::size_t>(n));
    in.indices.resize(static_cast<std::size_t>(n) * k);
    in.sqdist.resize(in.indices.size());
  });
  const RowType irow(k, MPI_INT32_T), frow(k, MPI_FLOAT);
  check(MPI_Alltoallv(list.data(), send.data(), sdisp.data(), MPI_INT64_T, in_rows.data(),
                      recv.data(), rdisp.data(), MPI_INT64_T, m.comm),
        "MPI_Alltoallv (rows)");
  check(MPI_Alltoallv(mine.result.indices.data(), send.data(), sdisp.data(), irow.get(),
                      in.indices.data(), recv.data(), rdisp.data(), irow.get(), m.comm),
        "MPI_Alltoallv (indices)");
  check(MPI_Alltoallv(mine.result.sqdist.data(), send.data(), sdisp.data(), frow.get(),
                      in.sqdist.data(), recv.data(), rdisp.data(), frow.get(), m.comm),
        "MPI_Alltoallv (distances)");
  collectively(m.comm, [&] {  // it allocates: out of memory on a rank fails every rank
    KnnResult& r = out.result;
    r.rows = static_cast<std::int64_t>(in_rows.size());
    r.k = k;
    r.indices.resize(in.indices.size());
    r.sqdist.resize(in.sqdist.size());
    for (std::size_t i = 0; i < in_rows.size(); ++i) {
      const std::size_t at = static_cast<std::size_t>(in_rows[i] - out.first) * k;
      std::copy(&in.indices[i * k], &in.indices[i * k] + k, &r.indices[at]);
      std::copy(&in.sqdist[i * k], &in.sqdist[i * k] + k, &r.sqdist[at]);
    }
  });
  return out;
}

RankRadiusBlock DistributedIndex::redistribute(const RankRadius& mine, std::int64_t rows) {
  Impl& m = impl();
  same_on_every_rank(m.comm, "redistribute", {{"rows", static_cast<std::uint64_t>(rows)}});
  std::vector<std::int64_t> made;
  const std::vector<std::int64_t>* listed = nullptr;
  const RadiusResult& r = mine.result;
  const auto begin = [&](int p) { return block_begin(rows, p, m.size); };
  std::vector<int> send(static_cast<std::size_t>(m.size), 0), recv(send.size());
  std::vector<int> esend(send.size(), 0), erecv(send.size());
  std::vector<std::int64_t> sizes;
  RankRadiusBlock out;
  out.first = begin(m.rank);
  collectively(m.comm, [&] {
    PCNN_EXPECTS(radius_share(mine, "redistribute") != RadiusShare::counts,
                 "redistribute: filled radius rows of a search expected (not counts alone)");
    listed = &row_list(mine, made);  // it allocates: inside collectively()
    const std::vector<std::int64_t>& list = *listed;
    sizes.resize(list.size());
    int p = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {  // ascending: the owners too
      const std::int64_t row = list[i];
      PCNN_EXPECTS(row >= 0 && row < rows, "redistribute: row " + std::to_string(row) + " outside");
      while (row >= begin(p + 1)) ++p;
      sizes[i] = r.offsets[i + 1] - r.offsets[i];
      ++send[p];
      PCNN_EXPECTS(esend[p] + sizes[i] <= INT_MAX,
                   "redistribute: more than 2^31-1 radius pairs to one rank");
      esend[p] += static_cast<int>(sizes[i]);
    }
  });
  const std::vector<std::int64_t>& list = *listed;
  check(MPI_Alltoall(send.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, m.comm), "MPI_Alltoall");
  check(MPI_Alltoall(esend.data(), 1, MPI_INT, erecv.data(), 1, MPI_INT, m.comm), "MPI_Alltoall");
  std::vector<int> sdisp, rdisp, esdisp, erdisp;
  std::vector<std::int64_t> in_rows, in_sizes;
  std::vector<std::int32_t> in_idx;
  std::vector<float> in_d;
  collectively(m.comm, [&] {
    sdisp = displacements(send);
    rdisp = displacements(recv);
    esdisp = displacements(esend);
    erdisp = displacements(erecv);
    const std::int64_t n = std::int64_t(rdisp.back()) + recv.back();
    PCNN_EXPECTS(n == begin(m.rank + 1) - out.first,
                 "redistribute: " + std::to_string(n) + " rows for a block of " +
                     std::to_string(begin(m.rank + 1) - out.first));
    in_rows.resize(static_cast<std::size_t>(n));
    in_sizes.resize(in_rows.size());
    in_idx.resize(static_cast<std::size_t>(erdisp.back()) + erecv.back());
    in_d.resize(in_idx.size());
  });
  check(MPI_Alltoallv(list.data(), send.data(), sdisp.data(), MPI_INT64_T, in_rows.data(),
                      recv.data(), rdisp.data(), MPI_INT64_T, m.comm),
        "MPI_Alltoallv (rows)");
  check(MPI_Alltoallv(sizes.data(), send.data(), sdisp.data(), MPI_INT64_T, in_sizes.data(),
                      recv.data(), rdisp.data(), MPI_INT64_T, m.comm),
        "MPI_Alltoallv (row sizes)");
  check(MPI_Alltoallv(r.indices.data(), esend.data(), esdisp.data(), MPI_INT32_T, in_idx.data(),
                      erecv.data(), erdisp.data(), MPI_INT32_T, m.comm),
        "MPI_Alltoallv (radius indices)");
  check(MPI_Alltoallv(r.sqdist.data(), esend.data(), esdisp.data(), MPI_FLOAT, in_d.data(),
                      erecv.data(), erdisp.data(), MPI_FLOAT, m.comm),
        "MPI_Alltoallv (radius distances)");
  collectively(m.comm, [&] {  // it allocates: out of memory on a rank fails every rank
    RadiusResult& b = out.result;
    b.rows = static_cast<std::int64_t>(in_rows.size());
    b.offsets.assign(static_cast<std::size_t>(b.rows) + 1, 0);
    for (std::size_t i = 0; i < in_rows.size(); ++i)
      b.offsets[in_rows[i] - out.first + 1] = in_sizes[i];
    for (std::int64_t q = 0; q < b.rows; ++q) b.offsets[q + 1] += b.offsets[q];
    b.indices.resize(in_idx.size());
    b.sqdist.resize(in_d.size());
    std::int64_t at = 0;  // the received pairs follow the received rows
    for (std::size_t i = 0; i < in_rows.size(); ++i) {
      const std::int64_t to = b.offsets[in_rows[i] - out.first];
      std::copy(in_idx.data() + at, in_idx.data() + at + in_sizes[i], b.indices.data() + to);
      std::copy(in_d.data() + at, in_d.data() + at + in_sizes[i], b.sqdist.data() + to);
      at += in_sizes[i];
    }
  });
  return out;
}

RadiusResult DistributedIndex::gather(const RankRadius& mine, std::int64_t rows, int root) {
  Impl& m = impl();
  std::vector<std::int64_t> made;
  const std::vector<std::int64_t>* listed = nullptr;
  const RadiusResult& r = mine.result;
  int count = 0;
  std::vector<int> counts(static_cast<std::size_t>(m.size)), ecounts(counts.size());
  std::vector<std::int64_t> sizes;
  int entries = 0;
  RadiusShare kind = RadiusShare::empty;
  collectively(m.comm, [&] {
    m.check_root(root);
    kind = radius_share(mine, "gather");
    listed = &row_list(mine, made);  // it allocates: inside collectively()
    count = static_cast<int>(listed->size());
    PCNN_EXPECTS(kind != RadiusShare::filled || r.offsets.back() <= INT_MAX,
                 "gather: more than 2^31-1 radius pairs on one rank");
    entries = kind == RadiusShare::filled ? static_cast<int>(r.offsets.back()) : 0;
    sizes.resize(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) sizes[i] = r.offsets[i + 1] - r.offsets[i];
  });
  same_on_every_rank(
      m.comm, "gather",
      {{"rows", static_cast<std::uint64_t>(rows)}, {"root", static_cast<std::uint64_t>(root)}});
  const std::vector<std::int64_t>& list = *listed;
  // Filled rows and counts alone do not mix (a rank without pairs goes with either).
  int kinds[2] = {kind == RadiusShare::filled ? 1 : 0, kind == RadiusShare::counts ? 1 : 0};
  check(MPI_Allreduce(MPI_IN_PLACE, kinds, 2, MPI_INT, MPI_MAX, m.comm), "MPI_Allreduce");
  if (kinds[0] && kinds[1])
    throw invalid_argument_error(
        "gather: some ranks pass filled radius rows, others counts alone (radius_count)");
  const bool counts_alone = kinds[1] != 0;
  check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, root, m.comm), "MPI_Gather");
  check(MPI_Gather(&entries, 1, MPI_INT, ecounts.data(), 1, MPI_INT, root, m.comm), "MPI_Gather");
  std::vector<int> disp, edisp;
  std::vector<std::int64_t> all_rows, all_sizes;
  std::vector<std::int32_t> all_idx;
  std::vector<float> all_d;
  collectively(m.comm, [&] {
    if (m.rank != root) return;
    disp = displacements(counts);
    edisp = displacements(ecounts);
    const std::int64_t total = std::int64_t(disp.back()) + counts.back();
    PCNN_EXPECTS(total == rows, "gather: the ranks hold " + std::to_string(total) +
                                    " rows, expected " + std::to_string(rows));
    all_rows.resize(static_cast<std::size_t>(total));
    all_sizes.resize(all_rows.size());
    all_idx.resize(static_cast<std::size_t>(edisp.back()) + ecounts.back());
    all_d.resize(all_idx.size());
  });
  check(MPI_Gatherv(list.data(), count, MPI_INT64_T, all_rows.data(), counts.data(), disp.data(),
                    MPI_INT64_T, root, m.comm),
        "MPI_Gatherv (rows)");
  check(MPI_Gatherv(sizes.data(), count, MPI_INT64_T, all_sizes.data(), counts.data(), disp.data(),
                    MPI_INT64_T, root, m.comm),
        "MPI_Gatherv (row sizes)");
  check(MPI_Gatherv(r.indices.data(), entries, MPI_INT32_T, all_idx.data(), ecounts.data(),
                    edisp.data(), MPI_INT32_T, root, m.comm),
        "MPI_Gatherv (radius indices)");
  check(MPI_Gatherv(r.sqdist.data(), entries, MPI_FLOAT, all_d.data(), ecounts.data(), edisp.data(),
                    MPI_FLOAT, root, m.comm),
        "MPI_Gatherv (radius distances)");
  RadiusResult out;
  collectively(m.comm, [&] {  // root allocates: out of memory there fails every rank
    if (m.rank != root) return;
    out.rows = rows;
    out.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
    for (std::size_t i = 0; i < all_rows.size(); ++i) {
      PCNN_EXPECTS(all_rows[i] >= 0 && all_rows[i] < rows,
                   "gather: row " + std::to_string(all_rows[i]) + " outside");
      out.offsets[all_rows[i] + 1] = all_sizes[i];
    }
    for (std::int64_t q = 0; q < rows; ++q) out.offsets[q + 1] += out.offsets[q];
    if (counts_alone) return;
    out.indices.resize(static_cast<std::size_t>(out.offsets.back()));
    out.sqdist.resize(out.indices.size());
    std::int64_t at = 0;  // the gathered entries follow the gathered rows
    for (std::size_t i = 0; i < all_rows.size(); ++i) {
      const std::int64_t to = out.offsets[all_rows[i]];
      std::copy(all_idx.data() + at, all_idx.data() + at + all_sizes[i], out.indices.data() + to);
      std::copy(all_d.data() + at, all_d.data() + at + all_sizes[i], out.sqdist.data() + to);
      at += all_sizes[i];
    }
  });
  return out;
}

std::vector<RankStats> DistributedIndex::all_stats() const {
  const Impl& m = impl();
  std::vector<RankStats> all(static_cast<std::size_t>(m.size));
  check(MPI_Allgather(&m.stats, sizeof(RankStats), MPI_BYTE, all.data(), sizeof(RankStats),
                      MPI_BYTE, m.comm),
        "MPI_Allgather (stats)");
  return all;
}

}  // namespace pcnn::mpi
