// pcnn — explicit device memory: a memory resource per object, never process-wide state.
//
// Every pcnn object that uses the device (an Index, a smoothing or filter call) takes its device
// memory from a DeviceMemoryResource. By default an Index creates its own pool (a CUDA memory pool
// of its own, not the device's default pool, whose settings belong to the application). A cap is a
// resource adaptor (LimitedResource), so two indexes can share one budget or have their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pcnn/cuda_stream.hpp"

namespace pcnn {

/// Counters of one resource (or of an index's workspace), for tests and for users who budget.
struct MemoryStats {
  std::int64_t current_bytes = 0;  ///< held now
  std::int64_t peak_bytes = 0;     ///< the most held at once
  std::int64_t allocations = 0;    ///< calls that obtained memory from the upstream (ever)
};

/// Stream-ordered device memory. Implementations must be thread-safe.
class DeviceMemoryResource {
 public:
  virtual ~DeviceMemoryResource() = default;
  /// `bytes` of device memory usable on `stream` in stream order, aligned to at least 256 bytes
  /// (as cudaMalloc's: the kernels read their buffers in vectors of up to 16 bytes).
  /// @throws pcnn::out_of_memory_error (needed and available bytes); pcnn::cuda_error.
  virtual void* allocate(std::size_t bytes, cudaStream_t stream) = 0;
  /// Returns memory from allocate(); its last use must be queued on `stream`. Never throws.
  virtual void deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept = 0;
  /// Bytes an allocation could obtain now (free device memory plus what the resource keeps
  /// cached, or what is left under a cap): what searches plan their passes with.
  virtual std::int64_t available() const = 0;
  /// This resource's counters.
  virtual MemoryStats stats() const = 0;
  /// Bytes the resource holds mapped and unused (a lower bound of available()), known without
  /// asking the driver for the free device memory as available() does (tens of microseconds in
  /// a process holding much page-locked memory): searches whose rows and working memory fit in
  /// it plan no passes without that query. 0 unless overridden.
  /// @throws pcnn::cuda_error.
  virtual std::int64_t cached() const { return 0; }
};

/// A pool of device memory of its own on device `ordinal` (cudaMemPoolCreate), keeping freed
/// memory cached for reuse until the resource is destroyed or trim() is called. Falls back to
/// cudaMalloc/cudaFree where the device has no memory pools. With a pool, its destructor waits
/// for all work on its device (cudaDeviceSynchronize), then destroys the pool.
/// @throws pcnn::no_device_error when the device is not usable.
class PoolResource : public DeviceMemoryResource {
 public:
  explicit PoolResource(int ordinal = 0);
  ~PoolResource() override;
  PoolResource(const PoolResource&) = delete;
  PoolResource& operator=(const PoolResource&) = delete;
  void* allocate(std::size_t bytes, cudaStream_t stream) override;
  void deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept override;
  std::int64_t available() const override;
  MemoryStats stats() const override;
  /// The memory the pool keeps mapped and unused (what reserve() mapped, what was freed).
  std::int64_t cached() const override;
  /// Gives the cached memory back to the device (synchronizes the device first).
  void trim();
  /// Maps `bytes` of device memory into the pool ahead of use (allocated and freed at once;
  /// kept cached), so that later allocations up to that much find it there instead of each
  /// mapping memory of its own as the pool grows. Returns whether it did: false for 0 bytes,
  /// where the device has not that much free, or without a pool. Synchronizes a stream of its
  /// own.
  bool reserve(std::size_t bytes);
  int device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// At most `limit` bytes at once from `upstream` (e.g. to share a GPU with other work). An
/// allocation over the cap throws pcnn::out_of_memory_error; available() reports what is left
/// under the cap, so searches plan passes within it.
class LimitedResource : public DeviceMemoryResource {
 public:
  LimitedResource(std::shared_ptr<DeviceMemoryResource> upstream, std::int64_t limit);
  ~LimitedResource() override;
  void* allocate(std::size_t bytes, cudaStream_t stream) override;
  void deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept override;
  std::int64_t available() const override;
  MemoryStats stats() const override;
  /// The upstream's cached memory, up to what is left under the cap.
  std::int64_t cached() const override;
  std::int64_t limit() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Host memory this process could still obtain, in bytes: the smallest of the system's available
/// memory (MemAvailable of /proc/meminfo), what the process's memory cgroup has left (memory.max
/// less memory.current, cgroup v2) and what its address-space limit leaves (RLIMIT_AS less the
/// address space in use). What searches check results in host memory against before filling
/// them. -1 where none of these can be read.
std::int64_t available_host_memory();

/// Page-locked host memory, for the buffers a frame loop reuses (a scan's points, a search's
/// results): the CUDA backend copies straight from and into it, asynchronously, where ordinary
/// memory goes through a staging copy on the host (see Staging). Page-locking is slow (the pages
/// are pinned when allocated): allocate once, reuse every frame. Portable: usable by every
/// device's indexes. Where no CUDA device is usable it is ordinary memory, so that code using it
/// runs on the CPU backend too.
/// @throws pcnn::out_of_memory_error when neither can be had.
void* allocate_page_locked(std::size_t bytes);
/// Frees memory from allocate_page_locked (null: nothing). Never throws.
void free_page_locked(void* ptr) noexcept;

/// A standard allocator over allocate_page_locked, e.g. for pcnn::page_locked_vector.
template <class T>
struct PageLockedAllocator {
  using value_type = T;
  PageLockedAllocator() = default;
  template <class U>
  PageLockedAllocator(const PageLockedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_page_locked(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { free_page_locked(p); }
  template <class U>
  bool operator==(const PageLockedAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const PageLockedAllocator<U>&) const noexcept {
    return false;
  }
};

/// A vector in page-locked host memory: `pcnn::page_locked_vector<float> xyz(3 * n);` then
/// host_points(xyz.data(), n); results likewise (MatrixView over .data()).
template <class T>
using page_locked_vector = std::vector<T, PageLockedAllocator<T>>;

/// Page-locks host memory the caller already owns (a std::vector's data, a loaded cloud) for
/// every device of the process (cudaHostRegisterPortable), until the object is destroyed or
/// release()d. The CUDA backend copies straight from and into page-locked memory (and a kNN
/// search's kernels write rows into locked rows themselves while it runs: see the README's
/// timing notes). Memory that is
/// not goes through the index's page-locked buffers (Staging::pinned), or, under registered
/// staging (the default from 8 MB), is page-locked by each call for its copy and unlocked after
/// it, which costs about 25 us a MB to lock and 20 to unlock (an H200's host, 2 MB pages: 16 +
/// 12 ms for 640 MB; locking does not go faster from several threads). A lock pays where the
/// memory is copied more than once, or where it is taken while the program would wait anyway
/// (pcnn's command takes its clouds and results while the GPU's start-up ends, and lets them go
/// while it writes). Does nothing (active() false) for null or empty ranges, memory already
/// page-locked (pcnn::allocate_page_locked, a lock of the caller's), ranges that overlap a lock,
/// or where the driver will not lock it (no usable CUDA device, among others). The memory must
/// outlive the lock. Move-only.
/// @throws pcnn::out_of_memory_error when the system cannot lock that much.
class PageLock {
 public:
  PageLock() = default;
  PageLock(const void* data, std::size_t bytes);
  ~PageLock() { release(); }
  PageLock(PageLock&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  PageLock& operator=(PageLock&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  PageLock(const PageLock&) = delete;
  PageLock& operator=(const PageLock&) = delete;
  /// Whether this object holds a lock (and will undo it).
  bool active() const noexcept { return ptr_ != nullptr; }
  /// Unlocks now (if active). Never throws.
  void release() noexcept;

 private:
  void* ptr_ = nullptr;
};

/// "1.23 GB (1234567890 bytes)": how pcnn's messages write a size.
std::string format_bytes(std::int64_t bytes);

/// A new PoolResource on device `ordinal`.
std::shared_ptr<DeviceMemoryResource> make_pool_resource(int ordinal = 0);

/// A new PoolResource capped at `limit` bytes (`limit` 0: no cap).
std::shared_ptr<DeviceMemoryResource> make_limited_pool_resource(std::int64_t limit,
                                                                 int ordinal = 0);

}  // namespace pcnn
