// Owning, move-only device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda_try.cuh"

namespace pcnn::detail {

/// Stream-ordered allocation from the device's memory pool (kept cached between calls, so a
/// search does not pay for cudaMalloc/cudaFree and their implicit synchronization), or plain
/// cudaMalloc where the device has no memory pools. Also keeps pcnn's bookkeeping
/// (pcnn::device_memory_stats).
void* device_allocate(std::size_t bytes, cudaStream_t stream);
void device_free(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept;

/// Throws pcnn::out_of_memory_error: "out of device memory: <what> needs N, M available".
[[noreturn]] void throw_out_of_memory(const std::string& what, std::int64_t needed,
                                      std::int64_t available);

/// Device memory kept between the calls of one owner (a KnnSession): blocks freed during a call
/// are cached, and handed out again from the next call on (not in the same call, whose work on
/// other streams may still be using them), so a call that repeats the last one's allocations
/// makes no device allocation at all. While an ArenaScope is active on a thread, every
/// device_buffer that thread allocates comes from its arena.
class DeviceArena {
 public:
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  void* take(std::size_t bytes, cudaStream_t stream);
  /// `stream`: where the block's last use was queued; a later take on the same stream may reuse
  /// it at once (stream order makes that safe), other streams only after end_call().
  void give(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  /// The owner's work is finished (its streams synchronized): freed blocks become reusable.
  void end_call() noexcept;
  std::int64_t cached_bytes() const;

 private:
  struct Block {
    void* ptr;
    std::size_t bytes;
    cudaStream_t stream = nullptr;
  };
  std::vector<Block> free_, pending_, all_;
};

/// The arena device_buffers allocate from on this thread while the scope lives.
class ArenaScope {
 public:
  explicit ArenaScope(DeviceArena* arena);
  ~ArenaScope();
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  DeviceArena* previous_;
};
DeviceArena* current_arena();

/// `size` elements of T in device memory, allocated and freed in the order of `stream` (or taken
/// from and given back to the thread's current DeviceArena). Move-only.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(std::size_t size, cudaStream_t stream) { resize(size, stream); }
  ~device_buffer() { release(); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        stream_(o.stream_),
        arena_(std::exchange(o.arena_, nullptr)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      stream_ = o.stream_;
      arena_ = std::exchange(o.arena_, nullptr);
    }
    return *this;
  }

  /// Makes room for `size` elements on `stream`; the contents are not kept.
  void resize(std::size_t size, cudaStream_t stream) {
    if (size == size_ && stream == stream_) return;
    release();
    stream_ = stream;
    arena_ = current_arena();
    if (size > 0)
      ptr_ = static_cast<T*>(arena_ ? arena_->take(size * sizeof(T), stream)
                                    : device_allocate(size * sizeof(T), stream));
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
    if (ptr_ && arena_)
      arena_->give(ptr_, size_ * sizeof(T), stream_);
    else if (ptr_)
      device_free(ptr_, size_ * sizeof(T), stream_);
    ptr_ = nullptr;
    size_ = 0;
    arena_ = nullptr;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceArena* arena_ = nullptr;
};

/// Page-locked host memory from cudaHostAlloc (mapped into the device's address space when
/// `mapped`), grown on demand and never shrunk; counted in pcnn::device_memory_stats.
template <class T>
class pinned_buffer {
 public:
  explicit pinned_buffer(bool mapped = false) : mapped_(mapped) {}
  ~pinned_buffer() { release(); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  /// Room for at least `n` elements; the contents are not kept when it grows.
  void ensure(std::size_t n) {
    if (n <= capacity_) return;
    release();
    ptr_ = static_cast<T*>(pinned_allocate(n * sizeof(T), mapped_));
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
  static void* pinned_allocate(std::size_t bytes, bool mapped);
  void release() noexcept;
  T* ptr_ = nullptr;
  std::size_t capacity_ = 0;
  bool mapped_;
};

void* pinned_allocate_bytes(std::size_t bytes, bool mapped);
void pinned_free_bytes(void* ptr) noexcept;
template <class T>
void* pinned_buffer<T>::pinned_allocate(std::size_t bytes, bool mapped) {
  return pinned_allocate_bytes(bytes, mapped);
}
template <class T>
void pinned_buffer<T>::release() noexcept {
  if (ptr_) pinned_free_bytes(ptr_);
  ptr_ = nullptr;
  capacity_ = 0;
}

/// cudaHostRegister of a caller's memory for the life of the object (unregistered even when a
/// search throws). Counted: pcnn::device_memory_stats().registered_now.
class host_registration {
 public:
  host_registration() = default;
  host_registration(const void* ptr, std::size_t bytes);
  ~host_registration();
  host_registration(host_registration&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
  host_registration& operator=(host_registration&& o) noexcept {
    if (this != &o) {
      host_registration old(std::move(*this));  // unregisters what this held
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }

 private:
  void* ptr_ = nullptr;
};

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
