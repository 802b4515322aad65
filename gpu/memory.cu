// Device memory resources (a pool of the object's own, a cap), the per-index workspace, and
// page-locked host memory. No process-wide state: every counter belongs to an object.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>

#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/device_scope.cuh"
#include "pcnn/device.hpp"
#include "pcnn/memory.hpp"

namespace pcnn {
namespace detail {

void throw_out_of_memory(const std::string& what, std::int64_t needed, std::int64_t available) {
  throw out_of_memory_error("out of device memory: " + what + " needs " + format_bytes(needed) +
                                ", " + format_bytes(available) + " available",
                            needed, available);
}

namespace {

// Counters shared by the resources: current, peak and allocation count.
void count_allocation(MemoryStats& s, std::int64_t bytes) {
  s.current_bytes += bytes;
  s.peak_bytes = std::max(s.peak_bytes, s.current_bytes);
  ++s.allocations;
}

std::int64_t free_device_memory() {
  std::size_t free_bytes = 0, total = 0;
  PCNN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  return static_cast<std::int64_t>(free_bytes);
}

// The current device's default pool, used as it is (its settings are the application's).
class AsyncResource final : public DeviceMemoryResource {
 public:
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, bytes, stream);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: later calls start clean
      throw_out_of_memory("an allocation", static_cast<std::int64_t>(bytes), available());
    }
    PCNN_CUDA_TRY(err);
    std::lock_guard<std::mutex> lock(mu_);
    count_allocation(stats_, static_cast<std::int64_t>(bytes));
    return p;
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) noexcept override {
    PCNN_CUDA_TRY_NO_THROW(cudaFreeAsync(p, stream));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.current_bytes -= static_cast<std::int64_t>(bytes);
  }
  std::int64_t available() const override { return free_device_memory(); }
  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  MemoryStats stats_;
};

}  // namespace

DeviceMemoryResource& async_resource() {
  static AsyncResource resource;  // stateless but for its counters
  return resource;
}

// ---- Workspace ----

Workspace::Workspace(std::shared_ptr<DeviceMemoryResource> upstream)
    : upstream_(std::move(upstream)) {}

Workspace::~Workspace() {
  for (const Block& b : all_) upstream_->deallocate(b.ptr, b.bytes, nullptr);
}

void* Workspace::allocate(std::size_t bytes, cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->bytes == bytes) {
        void* p = it->ptr;
        free_.erase(it);
        return p;
      }
    for (auto it = pending_.begin(); it != pending_.end(); ++it)
      if (it->bytes == bytes && it->stream == stream) {
        void* p = it->ptr;
        pending_.erase(it);
        return p;
      }
  }
  void* p = nullptr;
  try {
    p = upstream_->allocate(bytes, stream);
  } catch (const out_of_memory_error&) {
    // Cached blocks no call is using: give them back, then try once more.
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.empty()) throw;
      release_free();
    }
    p = upstream_->allocate(bytes, stream);
  }
  std::lock_guard<std::mutex> lock(mu_);
  all_.push_back({p, bytes});
  count_allocation(stats_, static_cast<std::int64_t>(bytes));
  return p;
}

void Workspace::release_free() noexcept {
  for (const Block& b : free_) {
    upstream_->deallocate(b.ptr, b.bytes, nullptr);
    stats_.current_bytes -= static_cast<std::int64_t>(b.bytes);
    all_.erase(
        std::find_if(all_.begin(), all_.end(), [&](const Block& a) { return a.ptr == b.ptr; }));
  }
  free_.clear();
}

void Workspace::deallocate(void* ptr, std::size_t, cudaStream_t stream) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Block& b : all_)
    if (b.ptr == ptr) {
      pending_.push_back({b.ptr, b.bytes, stream});
      return;
    }
}

void Workspace::end_call(cudaStream_t a, cudaStream_t b) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto done = [&](const Block& x) { return x.stream == a || x.stream == b; };
  for (const Block& x : pending_)
    if (done(x)) free_.push_back(x);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
}

void Workspace::end_all() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  free_.insert(free_.end(), pending_.begin(), pending_.end());
  pending_.clear();
}

std::int64_t Workspace::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::int64_t bytes = 0;
  for (const Block& b : free_) bytes += static_cast<std::int64_t>(b.bytes);
  return bytes;
}

std::int64_t Workspace::available() const { return upstream_->available() + free_bytes(); }

std::int64_t Workspace::cached() const { return upstream_->cached() + free_bytes(); }

MemoryStats Workspace::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---- page-locked host memory ----

namespace {

// The page-locked blocks pcnn made, by address: those it took from cudaHostAlloc (its staging
// buffers, allocate_page_locked's) and the ranges it locked with cudaHostRegister (PageLock's:
// the command's arrays; host_registration's, though a call registers its rows only after
// choosing whether to forward them, so those are downloaded). own_locked_alias lets the search's
// kernels write rows only into these: pcnn knows them whole, writable and mapped for as long as
// the search runs. A caller's own page-locked memory is downloaded into, as before (a range that
// only its first and last bytes show locked, or locked read-only, cannot fault a kernel).
struct LockedBlocks {
  std::mutex m;
  std::map<std::uintptr_t, std::size_t> blocks;  // start, bytes
};
LockedBlocks& locked_blocks() {
  static LockedBlocks* b = new LockedBlocks;  // never destroyed: frees may come at exit
  return *b;
}
// Notes block `p` from cudaHostAlloc (`registered` false) or cudaHostRegister; where it cannot,
// frees or unregisters it and rethrows.
void note_locked_block(void* p, std::size_t bytes, bool registered = false) {
  try {
    LockedBlocks& b = locked_blocks();
    const std::lock_guard<std::mutex> lock(b.m);
    b.blocks[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  } catch (...) {
    if (registered)
      cudaHostUnregister(p);
    else
      cudaFreeHost(p);
    throw;
  }
}
void forget_locked_block(void* p) {
  LockedBlocks& b = locked_blocks();
  const std::lock_guard<std::mutex> lock(b.m);
  b.blocks.erase(reinterpret_cast<std::uintptr_t>(p));
}

}  // namespace

void* pinned_allocate_bytes(std::size_t bytes, bool mapped) {
  void* p = nullptr;
  const cudaError_t err =
      cudaHostAlloc(&p, bytes, mapped ? cudaHostAllocMapped : cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw out_of_memory_error("out of page-locked host memory: " +
                                  format_bytes(static_cast<std::int64_t>(bytes)) + " requested",
                              static_cast<std::int64_t>(bytes), 0);
  }
  PCNN_CUDA_TRY(err);
  note_locked_block(p, bytes);
  return p;
}

void pinned_free_bytes(void* ptr) noexcept {
  if (ptr) forget_locked_block(ptr);
  PCNN_CUDA_TRY_NO_THROW(cudaFreeHost(ptr));
}

void* lock_host(const void* ptr, std::size_t bytes, unsigned flags, cudaError_t& err) {
  err = cudaSuccess;
  if (!ptr || bytes == 0 || is_page_locked(ptr)) return nullptr;  // a caller's own lock: kept
  err = cudaHostRegister(const_cast<void*>(ptr), bytes, flags);
  if (err == cudaSuccess) {
    note_locked_block(const_cast<void*>(ptr), bytes, true);
    return const_cast<void*>(ptr);
  }
  cudaGetLastError();
  if (err == cudaErrorHostMemoryAlreadyRegistered) err = cudaSuccess;  // overlaps a lock
  return nullptr;
}

host_registration::host_registration(const void* ptr, std::size_t bytes, HostCounters* counters)
    : counters_(counters) {
  cudaError_t err;
  ptr_ = lock_host(ptr, bytes, cudaHostRegisterDefault, err);
  PCNN_CUDA_TRY(err);
  if (ptr_ && counters_) {
    ++counters_->registrations;
    ++counters_->registered_now;
  }
}

namespace {
// PieceLocks' pieces: at least this many bytes, and at most kLockPieces an array.
constexpr std::size_t kLockPieceBytes = std::size_t{16} << 20;
constexpr std::size_t kLockPieces = 8;
}  // namespace

PieceLocks::PieceLocks(const void* base, std::size_t bytes, HostCounters* counters)
    : base_(static_cast<const char*>(base)),
      bytes_(bytes),
      piece_(std::max(kLockPieceBytes, (bytes + kLockPieces - 1) / kLockPieces)),
      counters_(counters) {}

void PieceLocks::lock_next() {
  const std::size_t end = std::min(bytes_, locked_ + piece_);
  host_registration lock(base_ + locked_, end - locked_, counters_);
  if (lock.active()) locks_.push_back(std::move(lock));
  locked_ = end;
}

void unlock_host(void* ptr) noexcept {
  forget_locked_block(ptr);
  PCNN_CUDA_TRY_NO_THROW(cudaHostUnregister(ptr));
}

host_registration::~host_registration() {
  if (!ptr_) return;
  unlock_host(ptr_);
  if (counters_) --counters_->registered_now;
}

bool is_page_locked(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

void* own_locked_alias(const void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return nullptr;
  {
    LockedBlocks& b = locked_blocks();
    const std::lock_guard<std::mutex> lock(b.m);
    const auto at = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = b.blocks.upper_bound(at);  // the first block after ptr: the one before holds it
    if (it == b.blocks.begin()) return nullptr;
    --it;
    if (bytes > it->second || at - it->first > it->second - bytes) return nullptr;
  }
  auto alias = [](const void* p) -> char* {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return attr.type == cudaMemoryTypeHost ? static_cast<char*>(attr.devicePointer) : nullptr;
  };
  char* first = alias(ptr);
  char* last = alias(static_cast<const char*>(ptr) + bytes - 1);
  return first && last == first + (bytes - 1) ? first : nullptr;
}

}  // namespace detail

// ---- page-locked host memory for callers ----

namespace {

// The blocks allocate_page_locked took from malloc (no usable device): how free_page_locked
// tells them from cudaHostAlloc's without asking the driver, which may no longer answer (a
// sticky error, or its teardown at exit).
struct OrdinaryBlocks {
  std::mutex m;
  std::unordered_set<void*> blocks;
};
OrdinaryBlocks& ordinary_blocks() {
  static OrdinaryBlocks* b = new OrdinaryBlocks;  // never destroyed: frees may come at exit
  return *b;
}

}  // namespace

void* allocate_page_locked(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err == cudaSuccess) {
    detail::note_locked_block(p, bytes);
    return p;
  }
  cudaGetLastError();
  if (err == cudaErrorMemoryAllocation)
    throw out_of_memory_error("out of page-locked host memory: " +
                                  format_bytes(static_cast<std::int64_t>(bytes)) + " requested",
                              static_cast<std::int64_t>(bytes), 0);
  // No usable device (no driver, no device, a driver too old): ordinary memory.
  p = std::malloc(bytes);
  if (!p)
    throw out_of_memory_error(
        "out of host memory: " + format_bytes(static_cast<std::int64_t>(bytes)) + " requested",
        static_cast<std::int64_t>(bytes), 0);
  OrdinaryBlocks& o = ordinary_blocks();
  const std::lock_guard<std::mutex> lock(o.m);
  o.blocks.insert(p);
  return p;
}

PageLock::PageLock(const void* data, std::size_t bytes) {
  cudaError_t err;
  ptr_ = detail::lock_host(data, bytes, cudaHostRegisterPortable, err);
  // Any other failure (no usable device, a stub driver, memory the driver will not lock): the
  // memory stays as it is, as allocate_page_locked falls back to ordinary memory.
  if (err == cudaErrorMemoryAllocation)
    throw out_of_memory_error(
        "cannot page-lock " + format_bytes(static_cast<std::int64_t>(bytes)) + " of host memory",
        static_cast<std::int64_t>(bytes), available_host_memory());
}

void PageLock::release() noexcept {
  if (!ptr_) return;
  detail::unlock_host(ptr_);
  ptr_ = nullptr;
}

void free_page_locked(void* ptr) noexcept {
  if (!ptr) return;
  {
    OrdinaryBlocks& o = ordinary_blocks();
    const std::lock_guard<std::mutex> lock(o.m);
    if (o.blocks.erase(ptr)) {
      std::free(ptr);
      return;
    }
  }
  // Page-locked: where the driver cannot free it any more (torn down), it is left to the exit.
  detail::forget_locked_block(ptr);
  PCNN_CUDA_TRY_NO_THROW(cudaFreeHost(ptr));
}

// ---- PoolResource ----

struct PoolResource::Impl {
  int device = 0;
  cudaMemPool_t pool = nullptr;  // null where the device has no memory pools: cudaMalloc
  mutable std::mutex mu;
  MemoryStats stats;
};

PoolResource::PoolResource(int ordinal) : impl_(std::make_unique<Impl>()) {
  const DeviceInfo info = query_device(ordinal);
  if (!info.available) throw no_device_error("no usable CUDA device: " + info.reason);
  impl_->device = ordinal;
  int supported = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, ordinal));
  if (!supported) return;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  PCNN_CUDA_TRY(cudaMemPoolCreate(&impl_->pool, &props));
  // Our own pool keeps what is freed (the default pool, and its settings, stay the application's).
  std::uint64_t keep = UINT64_MAX;
  PCNN_CUDA_TRY(cudaMemPoolSetAttribute(impl_->pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

// The pool is destroyed only once its device is idle, so that no free into it is still queued
// (an index's workspace frees its blocks just before, on the default stream of the pool's device:
// see deallocate). cudaMemPoolDestroy may be called with frees pending, but with indexes made
// and dropped on two threads the driver (580.159, H100) then crashed in the next index's
// cudaMallocFromPoolAsync or cudaStreamSynchronize: in 14 of 22 test processes (each repeating
// the two-thread test and the next one 100 times), and in none of 16 with this synchronization
// (bench/results/2026-11-27-round16.md). Once it also hung.
PoolResource::~PoolResource() {
  if (!impl_ || !impl_->pool) return;
  const detail::DeviceScope on(impl_->device, std::nothrow);
  PCNN_CUDA_TRY_NO_THROW(cudaDeviceSynchronize());
  PCNN_CUDA_TRY_NO_THROW(cudaMemPoolDestroy(impl_->pool));
}

void* PoolResource::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t err =
      impl_->pool ? cudaMallocFromPoolAsync(&p, bytes, impl_->pool, stream) : cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    detail::throw_out_of_memory("an allocation", static_cast<std::int64_t>(bytes), available());
  }
  PCNN_CUDA_TRY(err);
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::count_allocation(impl_->stats, static_cast<std::int64_t>(bytes));
  return p;
}

void PoolResource::deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  {
    // From the pool's device, whichever device the caller is on (an index of device 1 dropped
    // from a thread on device 0): a null stream is then that device's default stream, and the
    // destructor's wait covers the free.
    const detail::DeviceScope on(impl_->device, std::nothrow);
    if (impl_->pool)
      PCNN_CUDA_TRY_NO_THROW(cudaFreeAsync(ptr, stream));
    else
      PCNN_CUDA_TRY_NO_THROW(cudaFree(ptr));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.current_bytes -= static_cast<std::int64_t>(bytes);
}

// Memory this pool keeps cached is ready for reuse.
std::int64_t PoolResource::available() const { return detail::free_device_memory() + cached(); }

std::int64_t PoolResource::cached() const {
  if (!impl_->pool) return 0;
  std::uint64_t reserved = 0, used = 0;
  PCNN_CUDA_TRY(cudaMemPoolGetAttribute(impl_->pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  PCNN_CUDA_TRY(cudaMemPoolGetAttribute(impl_->pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return reserved > used ? static_cast<std::int64_t>(reserved - used) : 0;
}

MemoryStats PoolResource::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void PoolResource::trim() {
  if (!impl_->pool) return;
  const detail::DeviceScope on(impl_->device);
  PCNN_CUDA_TRY(cudaDeviceSynchronize());
  PCNN_CUDA_TRY(cudaMemPoolTrimTo(impl_->pool, 0));
}

bool PoolResource::reserve(std::size_t bytes) {
  if (!impl_->pool || bytes == 0) return false;
  const detail::DeviceScope on(impl_->device);
  cudaStream_t stream = nullptr;
  PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* p = nullptr;
  cudaError_t err = cudaMallocFromPoolAsync(&p, bytes, impl_->pool, stream);
  const bool mapped = err == cudaSuccess;
  if (mapped) {
    err = cudaFreeAsync(p, stream);
  } else if (err == cudaErrorMemoryAllocation) {  // advice only: the searches will see
    cudaGetLastError();
    err = cudaSuccess;
  }
  const cudaError_t synced = cudaStreamSynchronize(stream);
  PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(stream));
  PCNN_CUDA_TRY(err);
  PCNN_CUDA_TRY(synced);
  return mapped;
}

int PoolResource::device() const { return impl_->device; }

// ---- LimitedResource ----

struct LimitedResource::Impl {
  std::shared_ptr<DeviceMemoryResource> upstream;
  std::int64_t limit = 0;
  mutable std::mutex mu;
  MemoryStats stats;
  // What is left under the cap of `upstream`'s `bytes` (its available or cached memory).
  std::int64_t under_cap(std::int64_t bytes) const {
    std::int64_t left;
    {
      std::lock_guard<std::mutex> lock(mu);
      left = limit - stats.current_bytes;
    }
    return std::max<std::int64_t>(0, std::min(left, bytes));
  }
};

LimitedResource::LimitedResource(std::shared_ptr<DeviceMemoryResource> upstream, std::int64_t limit)
    : impl_(std::make_unique<Impl>()) {
  PCNN_EXPECTS(upstream != nullptr, "LimitedResource: no upstream resource");
  PCNN_EXPECTS(limit > 0, "device memory limit must be positive, got " + std::to_string(limit));
  impl_->upstream = std::move(upstream);
  impl_->limit = limit;
}

LimitedResource::~LimitedResource() = default;

void* LimitedResource::allocate(std::size_t bytes, cudaStream_t stream) {
  const auto want = static_cast<std::int64_t>(bytes);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stats.current_bytes + want > impl_->limit)
      throw out_of_memory_error("out of device memory: an allocation needs " + format_bytes(want) +
                                    ", " + format_bytes(impl_->limit - impl_->stats.current_bytes) +
                                    " available under the limit of " + format_bytes(impl_->limit),
                                want, impl_->limit - impl_->stats.current_bytes);
    detail::count_allocation(impl_->stats, want);  // reserved before the upstream call
  }
  try {
    return impl_->upstream->allocate(bytes, stream);
  } catch (...) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.current_bytes -= want;
    throw;
  }
}

void LimitedResource::deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  impl_->upstream->deallocate(ptr, bytes, stream);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.current_bytes -= static_cast<std::int64_t>(bytes);
}

std::int64_t LimitedResource::available() const {
  return impl_->under_cap(impl_->upstream->available());
}

std::int64_t LimitedResource::cached() const { return impl_->under_cap(impl_->upstream->cached()); }

MemoryStats LimitedResource::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

std::int64_t LimitedResource::limit() const { return impl_->limit; }

std::shared_ptr<DeviceMemoryResource> make_pool_resource(int ordinal) {
  return std::make_shared<PoolResource>(ordinal);
}

std::shared_ptr<DeviceMemoryResource> make_limited_pool_resource(std::int64_t limit, int ordinal) {
  PCNN_EXPECTS(limit >= 0,
               "device memory limit must be >= 0 (0: no limit), got " + std::to_string(limit));
  auto pool = make_pool_resource(ordinal);
  if (limit == 0) return pool;
  return std::make_shared<LimitedResource>(std::move(pool), limit);
}

}  // namespace pcnn
