// A CUDA part's home search with its neighbor indices made global on the device: the part's
// index table lives on the device, so the one random read per neighbor (local index -> global
// index) runs at device memory speed instead of host memory latency. Rows come back through
// page-locked pieces into the caller's host rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "core/backend.hpp"
#include "dist/part.hpp"
#include "gpu/detail/cuda_try.cuh"
#include "gpu/detail/device_buffer.cuh"
#include "gpu/detail/device_scope.cuh"
#include "gpu/detail/stream.cuh"
#include "gpu/detail/upload.cuh"

namespace pcnn::dist {
namespace {

__global__ void map_to_global(std::int32_t* idx, std::int64_t n, const std::int32_t* gid) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int32_t v = idx[i];
    if (v >= 0) idx[i] = gid[v];
  }
}

// Device or page-locked host memory freed on every way out.
template <class T, bool Host>
class Buffer {
 public:
  explicit Buffer(std::int64_t count) {
    if (count <= 0) return;
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
    if (Host)
      PCNN_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&p_), bytes, cudaHostAllocDefault));
    else
      PCNN_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&p_), bytes));
  }
  ~Buffer() {
    if (!p_) return;
    if (Host)
      PCNN_CUDA_TRY_NO_THROW(cudaFreeHost(p_));
    else
      PCNN_CUDA_TRY_NO_THROW(cudaFree(p_));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

using pcnn::detail::Stream;

// Rows per search call: every row at once when the rows (k int32 + k float) and the search's
// scratch (about 128 bytes a query) fit in half the device's free memory, shared with the
// `sharing` parts that search on the same device at once, so that a self-search runs in the
// index's own order, as coherent as one index's; else as many as fit, and at least 2^20 (the
// search passes through what does not fit by itself). Measured on an H200 (round 8): 100M rows of
// a 200M-point self-search in calls of 2^20 rows took 5.9 s, each call a sparse 1 % of the part
// sorted on its own.
std::int64_t rows_per_call(std::int64_t m, int k, int sharing) {
  std::size_t free = 0, total = 0;
  PCNN_CUDA_TRY(cudaMemGetInfo(&free, &total));
  const std::int64_t fit =
      static_cast<std::int64_t>(free / 2 / std::max(1, sharing)) / (8 * k + 128);
  return std::min({m, std::max<std::int64_t>(fit, 1 << 20), std::int64_t(INT32_MAX)});
}

}  // namespace

int device_of(const void* ptr) {
  if (!ptr) return -1;
  cudaPointerAttributes attr{};
  const cudaError_t q = cudaPointerGetAttributes(&attr, ptr);
  if (q != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
}

void knn_global_cuda(Part& part, const Coords* q, std::int64_t m, const KnnParams& params,
                     int threads, std::int32_t* out_idx, float* out_d, const GlobalRows& how) {
  if (m <= 0) return;
  const int k = params.k;
  const pcnn::detail::DeviceScope on(part.index->options().device);
  const std::int64_t chunk =
      how.call_rows > 0 ? std::min(how.call_rows, m) : rows_per_call(m, k, how.sharing);
  // Rows come back in pieces of 32 MB of indices (and as much of distances) through two
  // page-locked buffers: a piece's copy out on the host threads overlaps the next one's download.
  const std::int64_t piece = std::min(
      chunk, how.piece_rows > 0 ? how.piece_rows : std::max<std::int64_t>(1, (1 << 23) / k));
  const Buffer<std::int32_t, false> gid(part.size()), d_idx(chunk * k);
  const Buffer<float, false> d_d(chunk * k);
  const Buffer<std::int32_t, true> h_idx0(piece * k), h_idx1(piece * k);
  const Buffer<float, true> h_d0(piece * k), h_d1(piece * k);
  std::int32_t* const h_idx[2] = {h_idx0.get(), h_idx1.get()};
  float* const h_d[2] = {h_d0.get(), h_d1.get()};
  // After the buffers: on every way out, the stream's work ends before they are freed.
  const Stream stream;
  const cudaStream_t s = stream.get();
  detail::cuda_event landed[2];
  PCNN_CUDA_TRY(cudaMemcpyAsync(gid.get(), part.ids.data(), part.ids.size() * sizeof(std::int32_t),
                                cudaMemcpyHostToDevice, s));
  for (std::int64_t a = 0; a < m; a += chunk) {
    const std::int64_t c = std::min(chunk, m - a);
    const MatrixView<std::int32_t> iv{d_idx.get(), c, k, Memory::device};
    const MatrixView<float> dv{d_d.get(), c, k, Memory::device};
    if (q)
      part.index->knn(q->from(a).view(c), params, iv, dv, s);
    else
      part.index->self_knn_rows(a, params, iv, dv, s);  // all rows: the whole self-search
    const std::int64_t cells = c * k;
    const int blocks = static_cast<int>(std::min<std::int64_t>((cells + 255) / 256, 65536));
    map_to_global<<<blocks, 256, 0, s>>>(d_idx.get(), cells, gid.get());
    PCNN_CHECK_LAUNCH();
    // Piece p lands in buffer p % 2; piece p - 1 is copied out while p downloads.
    const std::int64_t pieces = (c + piece - 1) / piece;
    const auto copy_out = [&](std::int64_t p) {
      const int b = static_cast<int>(p % 2);
      PCNN_CUDA_TRY(cudaEventSynchronize(landed[b].get()));
      const std::int64_t first = a + p * piece, n = std::min(piece, c - p * piece);
      parallel_for(n, threads, [&](std::int64_t x, std::int64_t e) {
        if (how.place) {
          place_rows(h_idx[b] + x * k, h_d[b] + x * k, first + x, e - x, k, how.place, out_idx,
                     out_d);
          return;
        }
        std::copy_n(h_idx[b] + x * k, (e - x) * k, out_idx + (first + x) * k);
        std::copy_n(h_d[b] + x * k, (e - x) * k, out_d + (first + x) * k);
      });
    };
    for (std::int64_t p = 0; p < pieces; ++p) {
      const int b = static_cast<int>(p % 2);
      const std::int64_t from = p * piece * k, n = std::min(piece, c - p * piece) * k;
      PCNN_CUDA_TRY(cudaMemcpyAsync(h_idx[b], d_idx.get() + from, n * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, s));
      PCNN_CUDA_TRY(
          cudaMemcpyAsync(h_d[b], d_d.get() + from, n * sizeof(float), cudaMemcpyDeviceToHost, s));
      landed[b].record(s);
      if (p > 0) copy_out(p - 1);
    }
    copy_out(pieces - 1);
  }
}

namespace {

// Copies host bytes to device memory through two page-locked chunks on `stream`
// (detail::upload_through_chunks), and waits. Measured on two H100s at once (200M points, 1.2 GB
// a device): page-locking each share in pieces instead took 157-220 ms, the two registrations
// slowing each other.
void upload_through_chunks(void* to, const char* from, std::size_t bytes, cudaStream_t stream) {
  const Buffer<char, true> staging(2 * static_cast<std::int64_t>(detail::kUploadChunkBytes));
  detail::cuda_event sent[2];
  detail::upload_through_chunks(to, from, bytes, staging.get(), sent, stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
}

// Device `device` may read and write the memory of `peer` for the life of the object (NVLink or
// PCIe peer to peer): a cudaMemcpyPeer between them then goes directly instead of through host
// memory. Access this object enabled is disabled again; access enabled before is left as it was
// (access the caller enables while this object lives is disabled with it: process-wide state).
class PeerAccess {
 public:
  PeerAccess(int device, int peer) : device_(device), peer_(peer) {
    pcnn::detail::DeviceScope on(device);
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    // Already enabled (by the caller: left as it is), or a device past its peers' limit (8
    // without NVSwitch): the copies then go without, staged by the driver.
    if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorTooManyPeers) {
      static_cast<void>(cudaGetLastError());
      return;
    }
    PCNN_CUDA_TRY(e);
    enabled_ = true;
  }
  ~PeerAccess() {
    if (!enabled_) return;
    int was = 0;
    PCNN_CUDA_TRY_NO_THROW(cudaGetDevice(&was));
    for (const int d : {peer_, device_}) {  // no copy between them is still running
      PCNN_CUDA_TRY_NO_THROW(cudaSetDevice(d));
      PCNN_CUDA_TRY_NO_THROW(cudaDeviceSynchronize());
    }
    PCNN_CUDA_TRY_NO_THROW(cudaDeviceDisablePeerAccess(peer_));
    PCNN_CUDA_TRY_NO_THROW(cudaSetDevice(was));
  }
  PeerAccess(const PeerAccess&) = delete;
  PeerAccess& operator=(const PeerAccess&) = delete;

 private:
  int device_, peer_;
  bool enabled_ = false;
};

}  // namespace

namespace {

// Whether each of `devices` can reach the memory of every other one of them (a device repeated
// reaches itself).
bool reach_each_other(const std::vector<int>& devices) {
  for (const int d : devices)
    for (const int e : devices) {
      int can = 1;
      if (d != e) PCNN_CUDA_TRY(cudaDeviceCanAccessPeer(&can, d, e));
      if (!can) return false;
    }
  return true;
}

}  // namespace

bool SpreadPoints::possible(const std::vector<int>& devices) {
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  return devices.size() >= 2 && distinct && reach_each_other(devices);
}

SpreadPoints::SpreadPoints(PointsView points, const std::vector<int>& devices)
    : points_(points), devices_(devices), copies_(devices.size(), nullptr) {
  const int nd = static_cast<int>(devices.size());
  const std::size_t bytes = points.count > 0
                                ? static_cast<std::size_t>((points.count - 1) * points.stride + 3) *
                                      static_cast<std::size_t>(points.scalar_bytes())
                                : 0;
  if (bytes == 0) return;
  const auto* host = static_cast<const char*>(points.address());
  // Shares cut on page boundaries (the host reads whole pages of each).
  const auto base = reinterpret_cast<std::uintptr_t>(host);
  std::vector<std::size_t> cut(static_cast<std::size_t>(nd) + 1, bytes);
  cut[0] = 0;
  for (int d = 1; d < nd; ++d) {
    const std::uintptr_t at = (base + bytes * d / nd + 4095) & ~std::uintptr_t(4095);
    cut[d] = std::min<std::size_t>(std::max<std::size_t>(at - base, cut[d - 1]), bytes);
  }
  try {
    for_each(nd, true, [&](int d) {  // each device: its copy, its share uploaded
      pcnn::detail::DeviceScope on(devices[d]);
      const cudaError_t err = cudaMalloc(&copies_[d], bytes);
      if (err == cudaErrorMemoryAllocation) {
        static_cast<void>(cudaGetLastError());
        copies_[d] = nullptr;
        std::size_t free_bytes = 0, total = 0;
        PCNN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
        detail::throw_out_of_memory("a copy of the points on device " + std::to_string(devices[d]),
                                    static_cast<std::int64_t>(bytes),
                                    static_cast<std::int64_t>(free_bytes));
      }
      PCNN_CUDA_TRY(err);
      const Stream stream;
      upload_through_chunks(static_cast<char*>(copies_[d]) + cut[d], host + cut[d],
                            cut[d + 1] - cut[d], stream.get());
    });
    // Then the others' shares, straight from their devices. Every pair's access stays enabled
    // until every copy is done: a copy may run on either device's engines.
    std::deque<PeerAccess> access;
    for (int d = 0; d < nd; ++d)
      for (int e = 0; e < nd; ++e)
        if (e != d) access.emplace_back(devices[d], devices[e]);
    for_each(nd, true, [&](int d) {  // on a stream of each device's own: at once
      pcnn::detail::DeviceScope on(devices[d]);
      const Stream stream;
      for (int e = 0; e < nd; ++e)
        if (e != d && cut[e + 1] > cut[e])
          PCNN_CUDA_TRY(cudaMemcpyPeerAsync(static_cast<char*>(copies_[d]) + cut[e], devices[d],
                                            static_cast<const char*>(copies_[e]) + cut[e],
                                            devices[e], cut[e + 1] - cut[e], stream.get()));
      PCNN_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    });
    for (int d = 0; d < nd; ++d) {  // a peer copy is ordered with both devices' work
      pcnn::detail::DeviceScope on(devices[d]);
      PCNN_CUDA_TRY(cudaDeviceSynchronize());
    }
  } catch (...) {
    release();
    throw;
  }
}

SpreadPoints::~SpreadPoints() { release(); }

void SpreadPoints::release() noexcept {
  for (std::size_t d = 0; d < copies_.size(); ++d) release(static_cast<int>(d));
}

void SpreadPoints::release(int d) noexcept {
  void*& copy = copies_[static_cast<std::size_t>(d)];
  if (!copy) return;
  int was = 0;
  PCNN_CUDA_TRY_NO_THROW(cudaGetDevice(&was));
  PCNN_CUDA_TRY_NO_THROW(cudaSetDevice(devices_[static_cast<std::size_t>(d)]));
  PCNN_CUDA_TRY_NO_THROW(cudaFree(copy));
  PCNN_CUDA_TRY_NO_THROW(cudaSetDevice(was));
  copy = nullptr;
}

PointsView SpreadPoints::on(int d) const {
  PointsView v = points_;
  v.memory = Memory::device;
  if (v.data64)
    v.data64 = static_cast<const double*>(copies_[static_cast<std::size_t>(d)]);
  else
    v.data = static_cast<const float*>(copies_[static_cast<std::size_t>(d)]);
  return v;
}

namespace {

// Device memory of one device that other devices' kernels may write: a memory pool of the
// exchange's own with access granted to them (cudaMemPoolSetAccess, the pool's state, where
// cudaDeviceEnablePeerAccess would change the process's), holding freed memory until destroyed.
class SharedPool {
 public:
  SharedPool(int device, const std::vector<int>& writers) : device_(device) {
    const pcnn::detail::DeviceScope on(device);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    PCNN_CUDA_TRY(cudaMemPoolCreate(&pool_, &props));
    std::vector<int> others = writers;
    std::sort(others.begin(), others.end());
    others.erase(std::unique(others.begin(), others.end()), others.end());
    std::vector<cudaMemAccessDesc> access;
    for (const int w : others)
      if (w != device) {
        cudaMemAccessDesc a{};
        a.location.type = cudaMemLocationTypeDevice;
        a.location.id = w;
        a.flags = cudaMemAccessFlagsProtReadWrite;
        access.push_back(a);
      }
    const cudaError_t e =
        access.empty() ? cudaSuccess : cudaMemPoolSetAccess(pool_, access.data(), access.size());
    if (e != cudaSuccess) {
      static_cast<void>(cudaMemPoolDestroy(pool_));
      PCNN_CUDA_TRY(e);
    }
  }
  ~SharedPool() {
    const pcnn::detail::DeviceScope on(device_, std::nothrow);
    PCNN_CUDA_TRY_NO_THROW(cudaDeviceSynchronize());
    PCNN_CUDA_TRY_NO_THROW(cudaMemPoolDestroy(pool_));
  }
  SharedPool(const SharedPool&) = delete;
  SharedPool& operator=(const SharedPool&) = delete;
  // `bytes` of the pool, or null where the device has not that much.
  void* allocate(std::size_t bytes, cudaStream_t stream) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_, stream);
    if (e == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());
      return nullptr;
    }
    PCNN_CUDA_TRY(e);
    return p;
  }

 private:
  int device_;
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace

std::vector<std::int64_t> order_at_cuts(Index& index, std::int64_t rows, int nd) {
  const std::int64_t finite = index.finite_size();
  std::vector<std::int64_t> order(static_cast<std::size_t>(nd), -1);
  order[0] = finite;
  for (int d = 1; d < nd; ++d) {
    const std::int64_t at = cut_position(finite, rows, d, nd);
    if (at < rows)
      order[static_cast<std::size_t>(d)] =
          pcnn::detail::IndexAccess::backend(index).original_index_at(at);
  }
  return order;
}

bool stored_in_spatial_order(Index& index, const pcnn::detail::RowShares& shares) {
  const pcnn::detail::DeviceScope on(index.options().device);
  const Stream stream;
  return pcnn::detail::IndexAccess::backend(index).order_breaks(shares, stream.get()) < kCutBreaks;
}

pcnn::detail::RowShares row_shares(const std::vector<std::int64_t>& first) {
  PCNN_EXPECTS(first.size() >= 2 && first.size() <= pcnn::detail::RowShares::kMax + 1 &&
                   first.back() <= INT32_MAX,
               "row shares: 1 to 8 shares of at most 2^31 - 1 rows");
  pcnn::detail::RowShares to;
  to.count = static_cast<int>(first.size()) - 1;
  for (std::size_t d = 0; d < first.size(); ++d) to.first[d] = static_cast<int>(first[d]);
  return to;
}

struct ShareExchange::Impl {
  std::vector<int> devices;
  int usable = -1;  // every device may write every other's memory (-1: not asked yet)
  // One pool per distinct device, then each share's two buffers in its device's pool (the pools
  // destroyed last: a pool's destructor waits for its device).
  std::map<int, std::unique_ptr<SharedPool>> pools;
  struct Share {
    std::int32_t* idx = nullptr;
    float* dist = nullptr;
    std::int64_t cells = 0;  // what the buffers hold
  };
  std::vector<Share> shares;

  ~Impl() {
    for (std::size_t d = 0; d < shares.size(); ++d) release(static_cast<int>(d));
  }
  void release(int d) noexcept {
    Share& s = shares[static_cast<std::size_t>(d)];
    if (!s.idx && !s.dist) return;
    const pcnn::detail::DeviceScope on(devices[static_cast<std::size_t>(d)], std::nothrow);
    for (void* p : {static_cast<void*>(s.idx), static_cast<void*>(s.dist)})
      if (p) PCNN_CUDA_TRY_NO_THROW(cudaFreeAsync(p, nullptr));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(nullptr));
    s = Share{};
  }

  // Whether the devices can write each other's memory (asked once; pools made then).
  bool possible() {
    if (usable >= 0) return usable != 0;
    usable = 0;
    for (const int d : devices) {
      int pools_supported = 0;
      PCNN_CUDA_TRY(cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, d));
      if (!pools_supported) return false;
    }
    if (!reach_each_other(devices)) return false;
    try {
      for (const int d : devices)
        if (!pools.count(d)) pools.emplace(d, std::make_unique<SharedPool>(d, devices));
    } catch (const cuda_error&) {  // a pool its peers may not write after all: contiguous shares
      pools.clear();
      return false;
    }
    usable = 1;
    return true;
  }

  // The shares' buffers for cells[d] entries each, kept from an earlier call or allocated, where
  // each device has room besides a search's scratch (a pass of an eighth of its rows at ~64
  // bytes a row, and a margin); the shares of one device checked together, each device at once.
  bool reserve(const std::vector<std::int64_t>& cells, const std::vector<std::int64_t>& rows) {
    std::vector<int> distinct = devices;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::vector<char> room(distinct.size(), 1);
    for_each(static_cast<int>(distinct.size()), true, [&](int i) {
      const int device = distinct[static_cast<std::size_t>(i)];
      const pcnn::detail::DeviceScope on(device);
      double need = 512.0 * (1 << 20);
      std::vector<int> grow;
      for (std::size_t d = 0; d < devices.size(); ++d)
        if (devices[d] == device) {
          need += 8.0 * static_cast<double>(rows[d]);
          if (shares[d].cells < cells[d]) {
            release(static_cast<int>(d));
            need += 8.0 * static_cast<double>(cells[d]);
            grow.push_back(static_cast<int>(d));
          }
        }
      std::size_t free_bytes = 0, total = 0;
      PCNN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
      if (static_cast<double>(free_bytes) < need) {
        room[static_cast<std::size_t>(i)] = 0;
        return;
      }
      const Stream stream;
      for (const int d : grow) {
        Share& s = shares[static_cast<std::size_t>(d)];
        const std::size_t bytes = static_cast<std::size_t>(cells[d]) * 4;
        SharedPool& pool = *pools.at(device);
        s.idx = static_cast<std::int32_t*>(pool.allocate(bytes, stream.get()));
        s.dist = s.idx ? static_cast<float*>(pool.allocate(bytes, stream.get())) : nullptr;
        PCNN_CUDA_TRY(cudaStreamSynchronize(stream.get()));
        if (!s.dist) {
          release(d);
          room[static_cast<std::size_t>(i)] = 0;
          return;
        }
        s.cells = cells[d];
      }
    });
    return std::find(room.begin(), room.end(), 0) == room.end();
  }
};

ShareExchange::ShareExchange(std::vector<int> devices) : impl_(std::make_unique<Impl>()) {
  impl_->shares.resize(devices.size());
  impl_->devices = std::move(devices);
}

ShareExchange::~ShareExchange() = default;

bool ShareExchange::self_search(std::vector<Index>& replicas, const DenseSearch& search,
                                const std::vector<std::int64_t>& first,
                                const std::vector<RowsPlace>& places, std::vector<double>& ms) {
  Impl& m = *impl_;
  const int nd = static_cast<int>(replicas.size());
  const std::int64_t rows = first.empty() ? 0 : first.back();
  if (nd < 2 || nd > pcnn::detail::RowShares::kMax || rows <= 0 || rows > INT32_MAX ||
      static_cast<int>(m.devices.size()) != nd || static_cast<int>(places.size()) != nd ||
      static_cast<int>(first.size()) != nd + 1 || !m.possible())
    return false;
  using pcnn::detail::IndexAccess;
  // The positions searched by each replica: the finite points (sorted first) cut evenly, the
  // non-finite ones (empty rows) to the last.
  const std::int64_t finite = replicas[0].finite_size();
  const auto cut = [&](int d) { return cut_position(finite, rows, d, nd); };
  // Identical rows rest on every replica ordering the points the same, which building the same
  // points the same way does; checked, as a guard, where the positions are cut.
  const std::vector<std::int64_t> order = order_at_cuts(replicas[0], rows, nd);
  for (int e = 1; e < nd; ++e)
    if (order_at_cuts(replicas[static_cast<std::size_t>(e)], rows, nd) != order) return false;
  pcnn::detail::RowShares to = row_shares(first);
  // Rows for the host of a cloud stored in spatial order: contiguous shares (kCutBreaks). Rows
  // kept on the devices have nothing to overlap: there the cut won in spatial order too (1.49x
  // -> 1.68x, round 19).
  const bool to_host =
      std::any_of(places.begin(), places.end(), [](const RowsPlace& p) { return !p.device; });
  if (to_host && stored_in_spatial_order(replicas[0], to)) return false;
  const int k = search.k;
  std::vector<std::int64_t> cells(static_cast<std::size_t>(nd)), share_rows(cells.size());
  for (int d = 0; d < nd; ++d) {
    share_rows[static_cast<std::size_t>(d)] = first[d + 1] - first[d];
    cells[static_cast<std::size_t>(d)] = share_rows[static_cast<std::size_t>(d)] * k;
  }
  if (!m.reserve(cells, share_rows)) return false;
  for (int d = 0; d < nd; ++d) {
    to.idx[d] = m.shares[static_cast<std::size_t>(d)].idx;  // null for an empty share
    to.dist[d] = m.shares[static_cast<std::size_t>(d)].dist;
  }
  const KnnParams params{search.k, search.exclude_self};
  const double radius = search.hybrid ? search.radius : INFINITY;
  using clock_type = std::chrono::steady_clock;
  const auto since = [](clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
  };
  for_each(nd, true, [&](int d) {
    const auto t = clock_type::now();
    const pcnn::detail::DeviceScope on(m.devices[static_cast<std::size_t>(d)]);
    const Stream stream;
    Index& r = replicas[static_cast<std::size_t>(d)];
    IndexAccess::backend(r).self_dense_positions(cut(d), cut(d + 1), params, radius, to,
                                                 stream.get(), IndexAccess::timings(r));
    ms[static_cast<std::size_t>(d)] += since(t);
  });
  // Every device's search has ended: each share is whole, and goes to its place.
  for_each(nd, true, [&](int d) {
    const auto t = clock_type::now();
    const std::size_t bytes = static_cast<std::size_t>(cells[static_cast<std::size_t>(d)]) * 4;
    if (bytes == 0) return;
    const pcnn::detail::DeviceScope on(m.devices[static_cast<std::size_t>(d)]);
    const Stream stream;
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(places[d].idx, to.idx[d], bytes, cudaMemcpyDefault, stream.get()));
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(places[d].dist, to.dist[d], bytes, cudaMemcpyDefault, stream.get()));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    ms[static_cast<std::size_t>(d)] += since(t);
  });
  return true;
}

}  // namespace pcnn::dist
