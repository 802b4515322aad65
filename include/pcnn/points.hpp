// pcnn — non-owning views of points and of caller-owned arrays.
#pragma once

#include <cstdint>

namespace pcnn {

/// Where the memory behind a view lives. Host memory may be ordinary (pageable) or page-locked
/// (cudaHostAlloc / cudaHostRegister): pcnn finds out which and copies page-locked memory
/// asynchronously. Device memory is read or written in place by the CUDA backend (the CPU backend
/// takes host memory only).
enum class Memory { host, device };

/// A non-owning view of `count` points of three floats (x, y, z) each, `stride` floats apart
/// (3 for packed xyz, 4 for pcl::PointXYZ, 8 for pcl::PointNormal...). Points whose coordinates
/// are not finite are skipped as neighbors and get empty (-1) result rows as queries.
struct PointsView {
  const float* data = nullptr;
  std::int64_t count = 0;
  std::int64_t stride = 3;
  Memory memory = Memory::host;
};

/// A view of `count` packed xyz points in host memory.
inline PointsView host_points(const float* xyz, std::int64_t count, std::int64_t stride = 3) {
  return {xyz, count, stride, Memory::host};
}
/// A view of `count` points in device memory (a pointer from cudaMalloc or a device pool).
inline PointsView device_points(const float* xyz, std::int64_t count, std::int64_t stride = 3) {
  return {xyz, count, stride, Memory::device};
}

/// A caller-owned array of `size` elements that pcnn writes (results) or reads (offsets).
template <class T>
struct ArrayView {
  T* data = nullptr;
  std::int64_t size = 0;
  Memory memory = Memory::host;
};

/// A caller-owned row-major `rows` × `cols` matrix (dense kNN results: cols = k).
template <class T>
struct MatrixView {
  T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Memory memory = Memory::host;
};

}  // namespace pcnn
