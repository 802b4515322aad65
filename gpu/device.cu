// Device discovery and context start-up.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "pcnn/device.hpp"

namespace pcnn {

namespace detail {
namespace {
std::atomic<std::int64_t> g_current{0}, g_peak{0}, g_allocs{0}, g_limit{0}, g_pinned{0},
    g_registrations{0}, g_registered_now{0};
thread_local DeviceArena* t_arena = nullptr;

// Whether the current device supports stream-ordered allocation; the first call per device also
// tells its pool to keep freed memory cached instead of returning it at every synchronization.
bool use_pool() {
  static std::mutex mu;
  static std::map<int, bool> known;
  int dev = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(dev);
  if (it != known.end()) return it->second;
  int supported = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev));
  if (supported) {
    cudaMemPool_t pool;
    PCNN_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev));
    std::uint64_t keep = UINT64_MAX;
    PCNN_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  return known[dev] = supported != 0;
}
}  // namespace

std::string format_bytes(std::int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GB (%lld bytes)", double(bytes) / 1e9,
                static_cast<long long>(bytes));
  return buf;
}

void throw_out_of_memory(const std::string& what, std::int64_t needed, std::int64_t available) {
  std::string msg = "out of device memory: " + what + " needs " + format_bytes(needed) + ", " +
                    format_bytes(available) + " available";
  if (g_limit.load() > 0)
    msg += " under the limit of " + format_bytes(g_limit.load()) + " set by the caller";
  throw out_of_memory_error(msg, needed, available);
}

void* device_allocate(std::size_t bytes, cudaStream_t stream) {
  const auto want = static_cast<std::int64_t>(bytes);
  const std::int64_t limit = g_limit.load();
  if (limit > 0 && g_current.load() + want > limit)
    throw_out_of_memory("an allocation", want, std::max<std::int64_t>(limit - g_current.load(), 0));
  void* p = nullptr;
  const cudaError_t err = use_pool() ? cudaMallocAsync(&p, bytes, stream) : cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not a sticky error: clear it so that later calls start clean
    throw_out_of_memory("an allocation", want, device_memory_available());
  }
  PCNN_CUDA_TRY(err);
  const std::int64_t now = g_current += want;
  ++g_allocs;
  std::int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void device_free(void* p, std::size_t bytes, cudaStream_t stream) noexcept {
  try {
    if (use_pool())
      PCNN_CUDA_TRY_NO_THROW(cudaFreeAsync(p, stream));
    else
      PCNN_CUDA_TRY_NO_THROW(cudaFree(p));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pcnn: freeing device memory failed: %s\n", e.what());
  }
  g_current -= static_cast<std::int64_t>(bytes);
}
DeviceArena::~DeviceArena() {
  for (const Block& b : all_) device_free(b.ptr, b.bytes, nullptr);
}

void* DeviceArena::take(std::size_t bytes, cudaStream_t stream) {
  // Only blocks of exactly the size asked: a call that repeats the last one's requests then
  // finds every block it needs (a larger block taken by a smaller request would be missing for a
  // later one). First the cached blocks, then one given back during this call on the same stream
  // (its last use is queued before anything this request will queue).
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
  void* p = nullptr;
  try {
    p = device_allocate(bytes, stream);
  } catch (const out_of_memory_error&) {
    // Cached blocks no call is using: give them back to the device, then try once more.
    if (free_.empty()) throw;
    for (const Block& b : free_) {
      device_free(b.ptr, b.bytes, nullptr);
      for (auto it = all_.begin(); it != all_.end(); ++it)
        if (it->ptr == b.ptr) {
          all_.erase(it);
          break;
        }
    }
    free_.clear();
    p = device_allocate(bytes, stream);
  }
  all_.push_back({p, bytes});
  return p;
}

void DeviceArena::give(void* ptr, std::size_t, cudaStream_t stream) noexcept {
  for (const Block& b : all_)
    if (b.ptr == ptr) {
      pending_.push_back({b.ptr, b.bytes, stream});
      return;
    }
}

void DeviceArena::end_call() noexcept {
  free_.insert(free_.end(), pending_.begin(), pending_.end());
  pending_.clear();
}

std::int64_t DeviceArena::cached_bytes() const {
  std::int64_t n = 0;
  for (const Block& b : all_) n += static_cast<std::int64_t>(b.bytes);
  return n;
}

ArenaScope::ArenaScope(DeviceArena* arena) : previous_(t_arena) { t_arena = arena; }
ArenaScope::~ArenaScope() { t_arena = previous_; }
DeviceArena* current_arena() { return t_arena; }

void* pinned_allocate_bytes(std::size_t bytes, bool mapped) {
  void* p = nullptr;
  const cudaError_t err =
      cudaHostAlloc(&p, bytes, mapped ? cudaHostAllocMapped : cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw out_of_memory_error(
        "out of page-locked host memory: " + format_bytes(bytes) + " requested",
        static_cast<std::int64_t>(bytes), 0);
  }
  PCNN_CUDA_TRY(err);
  ++g_pinned;
  return p;
}

void pinned_free_bytes(void* ptr) noexcept { PCNN_CUDA_TRY_NO_THROW(cudaFreeHost(ptr)); }

host_registration::host_registration(const void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return;
  const cudaError_t err = cudaHostRegister(const_cast<void*>(ptr), bytes, cudaHostRegisterDefault);
  if (err == cudaErrorHostMemoryAlreadyRegistered) {  // the caller's own registration: keep it
    cudaGetLastError();
    return;
  }
  PCNN_CUDA_TRY(err);
  ptr_ = const_cast<void*>(ptr);
  ++g_registrations;
  ++g_registered_now;
}

host_registration::~host_registration() {
  if (!ptr_) return;
  PCNN_CUDA_TRY_NO_THROW(cudaHostUnregister(ptr_));
  --g_registered_now;
}

}  // namespace detail

void release_cached_device_memory() {
  if (!detail::use_pool()) return;
  int dev = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&dev));
  cudaMemPool_t pool;
  PCNN_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev));
  PCNN_CUDA_TRY(cudaDeviceSynchronize());
  PCNN_CUDA_TRY(cudaMemPoolTrimTo(pool, 0));
}

DeviceMemoryStats device_memory_stats() {
  return {detail::g_current.load(),       detail::g_peak.load(),
          detail::g_allocs.load(),        detail::g_pinned.load(),
          detail::g_registrations.load(), detail::g_registered_now.load()};
}

void reset_peak_device_memory() { detail::g_peak = detail::g_current.load(); }

void set_device_memory_limit(std::int64_t bytes) {
  PCNN_EXPECTS(bytes >= 0,
               "device memory limit must be >= 0 (0: no limit), got " + std::to_string(bytes));
  detail::g_limit = bytes;
}

std::int64_t device_memory_limit() { return detail::g_limit.load(); }

std::int64_t device_memory_available() {
  std::size_t free_bytes = 0, total = 0;
  PCNN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  auto available = static_cast<std::int64_t>(free_bytes);
  if (detail::use_pool()) {  // memory pcnn freed stays reserved in the pool, ready for reuse
    int dev = 0;
    PCNN_CUDA_TRY(cudaGetDevice(&dev));
    cudaMemPool_t pool;
    PCNN_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev));
    std::uint64_t reserved = 0, used = 0;
    PCNN_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    PCNN_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    if (reserved > used) available += static_cast<std::int64_t>(reserved - used);
  }
  const std::int64_t limit = detail::g_limit.load();
  if (limit > 0)
    available = std::min(available, std::max<std::int64_t>(limit - detail::g_current.load(), 0));
  return available;
}

DeviceInfo query_device(int ordinal) {
  DeviceInfo info;
  info.ordinal = ordinal;
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state for later calls
    info.reason = std::string(cudaGetErrorString(err));
    if (err == cudaErrorInsufficientDriver && info.driver_version == 0)
      info.reason = "no NVIDIA driver is installed";
    else if (err == cudaErrorInsufficientDriver)
      info.reason += " (driver supports CUDA " + std::to_string(info.driver_version / 1000) + "." +
                     std::to_string(info.driver_version % 1000 / 10) + ", pcnn needs " +
                     std::to_string(info.runtime_version / 1000) + "." +
                     std::to_string(info.runtime_version % 1000 / 10) + ")";
    return info;
  }
  if (ordinal < 0 || ordinal >= count) {
    info.reason =
        "no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(count) + " present)";
    return info;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    info.reason = cudaGetErrorString(err);
    return info;
  }
  info.available = true;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_memory = static_cast<std::int64_t>(prop.totalGlobalMem);
  info.multiprocessors = prop.multiProcessorCount;
  info.integrated = prop.integrated != 0;
  return info;
}

double initialize_device(int ordinal) {
  DeviceInfo info = query_device(ordinal);
  if (!info.available) throw no_device_error("no usable CUDA device: " + info.reason);
  auto t0 = std::chrono::steady_clock::now();
  PCNN_CUDA_TRY(cudaSetDevice(ordinal));
  PCNN_CUDA_TRY(cudaFree(nullptr));  // forces context creation
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace pcnn
