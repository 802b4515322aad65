// pcnn — non-owning views of points and of caller-owned arrays.
#pragma once

#include <cstdint>

namespace pcnn {

/// Where the memory behind a view lives. Host memory may be ordinary (pageable) or page-locked
/// (cudaHostAlloc / cudaHostRegister): pcnn finds out which and copies page-locked memory
/// asynchronously. Device memory is read or written in place by the CUDA backend (the CPU backend
/// takes host memory only).
enum class Memory { host, device };

/// A non-owning view of `count` points of three coordinates (x, y, z) each, `stride` coordinates
/// apart (3 for packed xyz, 4 for pcl::PointXYZ, 8 for pcl::PointNormal...). The coordinates are
/// float32 (`data`) or float64 (`data64`; then `data` is null): searches are exact for the
/// coordinates as given, in either type (float64 coordinates are searched in float as a filter,
/// then settled in double). Points whose coordinates are not finite are skipped as neighbors and
/// get empty (-1) result rows as queries.
struct PointsView {
  const float* data = nullptr;
  std::int64_t count = 0;
  std::int64_t stride = 3;
  Memory memory = Memory::host;
  const double* data64 = nullptr;

  bool is_double() const { return data64 != nullptr; }
  /// The address of the coordinates, whichever type they are.
  const void* address() const {
    return data64 ? static_cast<const void*>(data64) : static_cast<const void*>(data);
  }
  /// Bytes of one coordinate (4 or 8).
  std::int64_t scalar_bytes() const { return data64 ? 8 : 4; }
  /// Bytes from the first coordinate to the last one's end (the last point needs only xyz).
  std::int64_t span_bytes() const {
    return count <= 0 ? 0 : ((count - 1) * stride + 3) * scalar_bytes();
  }
  /// Points [first, first + n) of this view.
  PointsView slice(std::int64_t first, std::int64_t n) const {
    PointsView v = *this;
    v.count = n;
    if (data) v.data = data + first * stride;
    if (data64) v.data64 = data64 + first * stride;
    return v;
  }
};

/// A view of `count` packed xyz points in host memory.
inline PointsView host_points(const float* xyz, std::int64_t count, std::int64_t stride = 3) {
  return {xyz, count, stride, Memory::host};
}
/// A view of `count` float64 points in host memory (georeferenced coordinates as stored).
inline PointsView host_points(const double* xyz, std::int64_t count, std::int64_t stride = 3) {
  return {nullptr, count, stride, Memory::host, xyz};
}

/// A view of `count` points in device memory (a pointer from cudaMalloc or a device pool).
inline PointsView device_points(const float* xyz, std::int64_t count, std::int64_t stride = 3) {
  return {xyz, count, stride, Memory::device};
}
/// A view of `count` float64 points in device memory.
inline PointsView device_points(const double* xyz, std::int64_t count, std::int64_t stride = 3) {
  return {nullptr, count, stride, Memory::device, xyz};
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
