// Owning, move-only device memory.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda_try.cuh"
#include "pcnn/memory.hpp"

namespace pcnn::detail {

/// Throws pcnn::out_of_memory_error: "out of device memory: <what> needs N, M available".
[[noreturn]] void throw_out_of_memory(const std::string& what, std::int64_t needed,
                                      std::int64_t available);

/// Counters of the page-locked host memory one owner (an index) allocates or registers.
struct HostCounters {
  std::atomic<std::int64_t> pinned{0}, registrations{0}, registered_now{0};
};

/// Device memory kept between the calls of one owner (an index): blocks freed during a call are
/// cached, and handed out again for a request of exactly the same size (so a call that repeats
/// the last one's requests finds every block it needs), from the next call on, or at once on the
/// stream the block was last used on (stream order makes that safe). Obtains blocks from
/// `upstream`; gives them back when destroyed, or when an allocation would otherwise fail.
class Workspace final : public DeviceMemoryResource {
 public:
  explicit Workspace(std::shared_ptr<DeviceMemoryResource> upstream);
  ~Workspace() override;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* allocate(std::size_t bytes, cudaStream_t stream) override;
  void deallocate(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept override;
  std::int64_t available() const override;
  MemoryStats stats() const override;
  /// The cached blocks no call is using, and the upstream's cached memory.
  std::int64_t cached() const override;
  /// The work queued on streams `a` and `b` has finished (both synchronized): blocks last used
  /// there become reusable on any stream. Blocks last used on other streams stay pending.
  void end_call(cudaStream_t a, cudaStream_t b) noexcept;
  /// Every stream that used the workspace's blocks is idle: all of them become reusable.
  void end_all() noexcept;
  DeviceMemoryResource& upstream() const { return *upstream_; }
  HostCounters host;

 private:
  struct Block {
    void* ptr;
    std::size_t bytes;
    cudaStream_t stream = nullptr;
  };
  void release_free() noexcept;
  std::int64_t free_bytes() const;  // the cached blocks no call is using
  std::shared_ptr<DeviceMemoryResource> upstream_;
  mutable std::mutex mu_;
  std::vector<Block> free_, pending_, all_;
  MemoryStats stats_;
};

/// Stream-ordered allocation from the current device's default memory pool (cudaMallocAsync),
/// without changing any of the pool's settings: for one-shot functions that own no resource.
DeviceMemoryResource& async_resource();

/// `size` elements of T in device memory from a DeviceMemoryResource, allocated and freed in the
/// order of `stream`. Move-only.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(std::size_t size, cudaStream_t stream, DeviceMemoryResource& mr) {
    resize(size, stream, mr);
  }
  ~device_buffer() { release(); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        stream_(o.stream_),
        mr_(o.mr_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      stream_ = o.stream_;
      mr_ = o.mr_;
    }
    return *this;
  }

  /// Makes room for `size` elements on `stream`; the contents are not kept.
  void resize(std::size_t size, cudaStream_t stream, DeviceMemoryResource& mr) {
    if (size == size_ && stream == stream_ && &mr == mr_) return;
    release();
    stream_ = stream;
    mr_ = &mr;
    if (size > 0) ptr_ = static_cast<T*>(mr.allocate(size * sizeof(T), stream));
    size_ = size;
  }

  /// From now on the memory is freed on the legacy default stream, not the one it was allocated
  /// on: for buffers that outlive the calls that use them (an index kept between queries), whose
  /// caller's stream may be gone by then. Only when no work on the old stream is pending.
  void detach_stream() { stream_ = nullptr; }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() noexcept {
    if (ptr_) mr_->deallocate(ptr_, size_ * sizeof(T), stream_);
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceMemoryResource* mr_ = nullptr;
};

void* pinned_allocate_bytes(std::size_t bytes, bool mapped);
void pinned_free_bytes(void* ptr) noexcept;

/// Page-locked host memory from cudaHostAlloc (mapped into the device's address space when
/// `mapped`), grown on demand and never shrunk; counted in `counters` when given.
template <class T>
class pinned_buffer {
 public:
  explicit pinned_buffer(bool mapped = false, HostCounters* counters = nullptr)
      : mapped_(mapped), counters_(counters) {}
  ~pinned_buffer() { release(); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  /// Room for at least `n` elements; the contents are not kept when it grows.
  void ensure(std::size_t n) {
    if (n <= capacity_) return;
    release();
    ptr_ = static_cast<T*>(pinned_allocate_bytes(n * sizeof(T), mapped_));
    if (counters_) ++counters_->pinned;
    capacity_ = n;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  /// The device's address of the memory (mapped buffers only).
  T* device_data() const {
    void* d = nullptr;
    PCNN_CUDA_TRY(cudaHostGetDevicePointer(&d, ptr_, 0));
    return static_cast<T*>(d);
  }

 private:
  void release() noexcept;
  T* ptr_ = nullptr;
  std::size_t capacity_ = 0;
  bool mapped_;
  HostCounters* counters_;
};

template <class T>
void pinned_buffer<T>::release() noexcept {
  if (ptr_) pinned_free_bytes(ptr_);
  ptr_ = nullptr;
  capacity_ = 0;
}

/// cudaHostRegister of a caller's memory for the life of the object (unregistered even when a
/// search throws); memory the caller registered itself is used as it is. Counted in `counters`.
class host_registration {
 public:
  host_registration() = default;
  host_registration(const void* ptr, std::size_t bytes, HostCounters* counters);
  ~host_registration();
  host_registration(host_registration&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), counters_(o.counters_) {}
  bool active() const { return ptr_ != nullptr; }
  host_registration& operator=(host_registration&& o) noexcept {
    if (this != &o) {
      host_registration old(std::move(*this));  // unregisters what this held
      ptr_ = std::exchange(o.ptr_, nullptr);
      counters_ = o.counters_;
    }
    return *this;
  }

 private:
  void* ptr_ = nullptr;
  HostCounters* counters_ = nullptr;
};

/// A caller's pageable array page-locked piece by piece as a call's copies reach it, each copy
/// queued as soon as its bytes are locked: registration (cudaHostRegister) runs at ~23 GB/s on the
/// H200's host, under half the link's 55, so that locked whole before the copies, 640 MB of rows
/// waited ~28 ms and then took 11.6 ms more to download; in pieces, each piece's copy overlaps
/// the next piece's locking (bench/results/2026-11-30-round40.md). Pieces of kLockPieceBytes or
/// more (at most kLockPieces an array) are locked from the array's start, whole, as the copies
/// reach them. The driver tracks registrations by byte range (two of them may share a page), and
/// refuses a copy that spans two (invalid argument), so copies are cut where pieces end.
/// Unlocked when destroyed: after the copies are done. Memory already page-locked is used as it
/// is: a piece that begins in another registration is left to it (where that one ends inside the
/// piece, the piece's copy is refused, as a copy into such a partly registered array always was).
class PieceLocks {
 public:
  PieceLocks() = default;
  PieceLocks(const void* base, std::size_t bytes, HostCounters* counters);
  PieceLocks(PieceLocks&&) = default;
  PieceLocks& operator=(PieceLocks&&) = default;
  /// Queues the copies of bytes [from, to) of the array, `queue(offset, bytes)` once for each
  /// piece the range meets, after locking it; default-constructed (nothing to lock), in one copy.
  template <class Queue>
  void copy(std::size_t from, std::size_t to, Queue&& queue) {
    if (piece_ == 0) {
      if (to > from) queue(from, to - from);
      return;
    }
    for (std::size_t at = from; at < to;) {
      while (locked_ <= at) lock_next();
      const std::size_t end = std::min(to, (at / piece_ + 1) * piece_);
      queue(at, end - at);
      at = end;
    }
  }
  /// Whether some piece was locked here (the copies must then be done before it is destroyed).
  bool active() const { return !locks_.empty(); }

 private:
  void lock_next();  // the next piece

  const char* base_ = nullptr;
  std::size_t bytes_ = 0, locked_ = 0, piece_ = 0;
  HostCounters* counters_ = nullptr;
  std::vector<host_registration> locks_;
};

/// Whether `ptr` is page-locked host memory (cudaHostAlloc or cudaHostRegister), so that copies
/// to and from it can run asynchronously.
bool is_page_locked(const void* ptr);

/// The current device's address of [ptr, ptr + bytes) where that range lies in one page-locked
/// block pcnn made (pinned_buffer's and allocate_page_locked's cudaHostAlloc, lock_host's
/// cudaHostRegister), mapped for the device (its first and last bytes, one contiguous alias),
/// else null: other page-locked memory among it, or none.
void* own_locked_alias(const void* ptr, std::size_t bytes);

/// Page-locks [ptr, ptr + bytes) with cudaHostRegister `flags` unless it already is (then, or
/// where it overlaps a lock, or for null or empty ranges: null, `err` cudaSuccess). Returns the
/// pointer to unlock (unlock_host); null with the driver's error in `err` where the lock failed.
void* lock_host(const void* ptr, std::size_t bytes, unsigned flags, cudaError_t& err);

/// Unlocks what lock_host locked.
void unlock_host(void* ptr) noexcept;

/// A CUDA event, destroyed with its owner.
class cuda_event {
 public:
  cuda_event() { PCNN_CUDA_TRY(cudaEventCreate(&ev_)); }
  ~cuda_event() { PCNN_CUDA_TRY_NO_THROW(cudaEventDestroy(ev_)); }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  void record(cudaStream_t s) { PCNN_CUDA_TRY(cudaEventRecord(ev_, s)); }
  cudaEvent_t get() const { return ev_; }
  /// Milliseconds from `start` to this event; both must have completed.
  float since(const cuda_event& start) const {
    float ms = 0;
    PCNN_CUDA_TRY(cudaEventElapsedTime(&ms, start.ev_, ev_));
    return ms;
  }

 private:
  cudaEvent_t ev_ = nullptr;
};

}  // namespace pcnn::detail
