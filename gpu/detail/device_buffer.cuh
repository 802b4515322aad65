// Owning, move-only device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

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

/// `size` elements of T in device memory, allocated and freed in the order of `stream`. Move-only.
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
        stream_(o.stream_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      stream_ = o.stream_;
    }
    return *this;
  }

  /// Makes room for `size` elements on `stream`; the contents are not kept.
  void resize(std::size_t size, cudaStream_t stream) {
    if (size == size_ && stream == stream_) return;
    release();
    stream_ = stream;
    if (size > 0) ptr_ = static_cast<T*>(device_allocate(size * sizeof(T), stream));
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
    if (ptr_) device_free(ptr_, size_ * sizeof(T), stream_);
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
};

/// A CUDA event, destroyed with its owner.
class cuda_event {
 public:
  cuda_event() { PCNN_CUDA_TRY(cudaEventCreate(&ev_)); }
  ~cuda_event() { PCNN_CUDA_TRY_NO_THROW(cudaEventDestroy(ev_)); }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  void record(cudaStream_t s) { PCNN_CUDA_TRY(cudaEventRecord(ev_, s)); }
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
