// Owning, move-only device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda_try.cuh"

namespace pcnn::detail {

/// Bookkeeping of pcnn's device memory (pcnn::device_memory_stats reads it).
void note_device_alloc(std::size_t bytes);
void note_device_free(std::size_t bytes);

/// `size` elements of T in device memory; freed on destruction. Move-only.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t size) { resize(size); }
  ~device_buffer() { release(); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  /// Makes room for `size` elements; the contents are not kept.
  void resize(std::size_t size) {
    if (size == size_) return;
    release();
    if (size > 0) {
      PCNN_CUDA_TRY(cudaMalloc(&ptr_, size * sizeof(T)));
      note_device_alloc(size * sizeof(T));
    }
    size_ = size;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() {
    if (ptr_) {
      PCNN_CUDA_TRY_NO_THROW(cudaFree(ptr_));
      note_device_free(size_ * sizeof(T));
    }
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
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
