// A CUDA part's home search with its neighbor indices made global on the device: the part's
// index table lives on the device, so the one random read per neighbor (local index -> global
// index) runs at device memory speed instead of host memory latency. Rows come back through
// page-locked pieces into the caller's host rows.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>

#include "dist/part.hpp"
#include "gpu/detail/cuda_try.cuh"
#include "gpu/detail/device_buffer.cuh"

namespace pcnn::dist {
namespace {

__global__ void map_to_global(std::int32_t* idx, std::int64_t n, const std::int32_t* gid) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int32_t v = idx[i];
    if (v >= 0) idx[i] = gid[v];
  }
}

// The calling thread's device for the length of a scope.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    PCNN_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) PCNN_CUDA_TRY(cudaSetDevice(device));
  }
  ~OnDevice() { PCNN_CUDA_TRY_NO_THROW(cudaSetDevice(previous_)); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = 0;
};

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

class Stream {
 public:
  Stream() { PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(s_));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(s_));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

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
  const OnDevice on(part.index->options().device);
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

PortableLock::PortableLock(const void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return;
  cudaPointerAttributes attr{};
  const cudaError_t q = cudaPointerGetAttributes(&attr, ptr);
  if (q != cudaSuccess) static_cast<void>(cudaGetLastError());
  if (q == cudaSuccess && attr.type == cudaMemoryTypeHost) return;  // the caller's own lock
  PCNN_CUDA_TRY(cudaHostRegister(const_cast<void*>(ptr), bytes, cudaHostRegisterPortable));
  ptr_ = const_cast<void*>(ptr);
}

PortableLock::~PortableLock() {
  if (ptr_) PCNN_CUDA_TRY_NO_THROW(cudaHostUnregister(ptr_));
}

namespace {

// The driver's virtual memory calls, reached through the runtime (the library does not link
// the driver library: it must load on machines without one).
struct Vmm {
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free_va = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  bool ok = false;
};

const Vmm& vmm() {
  static const Vmm v = [] {
    Vmm m;
    auto get = [](const char* name, auto& fn) {
      cudaDriverEntryPointQueryResult found{};
      void* p = nullptr;
      if (cudaGetDriverEntryPointByVersion(name, &p, 10020, cudaEnableDefault, &found) !=
              cudaSuccess ||
          found != cudaDriverEntryPointSuccess) {
        static_cast<void>(cudaGetLastError());
        return false;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      return true;
    };
    m.ok = get("cuMemGetAllocationGranularity", m.granularity) &&
           get("cuMemAddressReserve", m.reserve) && get("cuMemAddressFree", m.free_va) &&
           get("cuMemCreate", m.create) && get("cuMemRelease", m.release) &&
           get("cuMemMap", m.map) && get("cuMemUnmap", m.unmap) &&
           get("cuMemSetAccess", m.set_access) && get("cuDeviceGet", m.device_get) &&
           get("cuDeviceGetAttribute", m.attribute);
    return m;
  }();
  return v;
}

void vmm_try(CUresult r, const char* what, std::int64_t bytes) {
  if (r == CUDA_SUCCESS) return;
  const std::string msg = std::string("CUDA virtual memory: ") + what + " failed (CUresult " +
                          std::to_string(static_cast<int>(r)) + ")";
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory_error(msg, bytes, -1);
  throw cuda_error(msg);
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

}  // namespace

struct SplitRows::Impl {
  std::vector<int> devices;
  std::vector<std::int64_t> first;
  int k = 1;
  std::size_t span = 0;  // bytes reserved per array
  CUdeviceptr va[2] = {0, 0};
  std::vector<CUmemGenericAllocationHandle> handles;
  std::vector<std::pair<CUdeviceptr, std::size_t>> mapped;

  ~Impl() {
    const Vmm& v = vmm();
    for (const auto& [p, b] : mapped) static_cast<void>(v.unmap(p, b));
    for (CUmemGenericAllocationHandle h : handles) static_cast<void>(v.release(h));
    for (CUdeviceptr p : va)
      if (p) static_cast<void>(v.free_va(p, span));
  }
};

bool SplitRows::supported(const std::vector<int>& devices) {
  const Vmm& v = vmm();
  if (devices.size() < 2 || !v.ok) return false;
  for (int a : devices) {
    CUdevice dev{};
    int vmm_supported = 0;
    if (v.device_get(&dev, a) != CUDA_SUCCESS ||
        v.attribute(&vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
            CUDA_SUCCESS ||
        !vmm_supported)
      return false;
    for (int b : devices) {
      int can = 0;
      if (a == b) continue;
      if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) {
        static_cast<void>(cudaGetLastError());
        return false;
      }
    }
  }
  return true;
}

std::int64_t SplitRows::unit(const std::vector<int>& devices, int k) {
  const Vmm& v = vmm();
  PCNN_EXPECTS(v.ok, "split rows: no CUDA virtual memory management");
  std::size_t g = 1;
  for (int d : devices) {
    const CUmemAllocationProp p = device_prop(d);
    std::size_t gd = 0;
    vmm_try(v.granularity(&gd, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity", 0);
    g = std::lcm(g, gd);
  }
  const std::size_t row = static_cast<std::size_t>(k) * 4;
  return static_cast<std::int64_t>(g / std::gcd(g, row));
}

SplitRows::SplitRows(const std::vector<int>& devices, const std::vector<std::int64_t>& first, int k)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const Vmm& v = vmm();
  PCNN_EXPECTS(v.ok && devices.size() >= 2 && first.size() == devices.size() + 1 &&
                   first.front() == 0 && k >= 1,
               "split rows: two or more devices with CUDA virtual memory management");
  m.devices = devices;
  m.first = first;
  m.k = k;
  const std::int64_t u = unit(devices, k);
  const std::size_t row = static_cast<std::size_t>(k) * 4;
  std::size_t g = static_cast<std::size_t>(u) * row;  // the common granularity, in bytes
  std::vector<std::size_t> sizes(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) {
    PCNN_EXPECTS(first[d + 1] >= first[d] && (d + 1 == devices.size() || first[d + 1] % u == 0),
                 "split rows: block boundaries must ascend in multiples of " + std::to_string(u));
    const std::size_t bytes = static_cast<std::size_t>(first[d + 1] - first[d]) * row;
    sizes[d] = (bytes + g - 1) / g * g;
    m.span += sizes[d];
  }
  if (m.span == 0) return;
  OnDevice on(devices[0]);
  PCNN_CUDA_TRY(cudaFree(nullptr));  // the driver calls below need a current context
  std::vector<CUmemAccessDesc> access(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) {
    access[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[d].location.id = devices[d];
    access[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  for (CUdeviceptr& va : m.va) {
    vmm_try(v.reserve(&va, m.span, g, 0, 0), "address reserve", static_cast<std::int64_t>(m.span));
    std::size_t at = 0;
    for (std::size_t d = 0; d < devices.size(); ++d) {
      if (sizes[d] == 0) continue;
      const CUmemAllocationProp p = device_prop(devices[d]);
      CUmemGenericAllocationHandle h{};
      vmm_try(v.create(&h, sizes[d], &p, 0), "create", static_cast<std::int64_t>(sizes[d]));
      m.handles.push_back(h);
      vmm_try(v.map(va + at, sizes[d], 0, h, 0), "map", 0);
      m.mapped.emplace_back(va + at, sizes[d]);
      at += sizes[d];
    }
    vmm_try(v.set_access(va, m.span, access.data(), access.size()), "set access", 0);
  }
}

SplitRows::~SplitRows() = default;

std::int32_t* SplitRows::indices() const {
  return reinterpret_cast<std::int32_t*>(static_cast<std::uintptr_t>(impl_->va[0]));
}
float* SplitRows::sqdist() const {
  return reinterpret_cast<float*>(static_cast<std::uintptr_t>(impl_->va[1]));
}

void SplitRows::download(int d, std::int32_t* idx, float* d2) const {
  const Impl& m = *impl_;
  const std::int64_t a = m.first[d] * m.k, n = (m.first[d + 1] - m.first[d]) * m.k;
  if (n == 0) return;
  OnDevice on(m.devices[d]);
  cudaStream_t s = nullptr;
  PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cudaError_t e1 =
      cudaMemcpyAsync(idx + a, indices() + a, n * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s);
  const cudaError_t e2 =
      e1 == cudaSuccess
          ? cudaMemcpyAsync(d2 + a, sqdist() + a, n * sizeof(float), cudaMemcpyDeviceToHost, s)
          : e1;
  const cudaError_t e3 = cudaStreamSynchronize(s);
  PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(s));
  PCNN_CUDA_TRY(e2 != cudaSuccess ? e2 : e3);
}

}  // namespace pcnn::dist
