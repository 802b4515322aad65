// Points ordered along the index's curve: their keys and original indices, sorted.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_buffer.cuh"

namespace pcnn::detail {

/// Keys of the `n` points of `xyz` (`stride` floats apart) on the curve of `bounds` (device: lo
/// xyz, hi xyz), sorted with their indices 0 .. n - 1 on their bits from `low_bit` up (the bits
/// below are kept, not sorted on: refine_by_curve's): a stable sort, so keys equal in those bits
/// keep their indices in order and non-finite points come last. `keys` and `ids` are resized to
/// n. Queued on `stream`; does not synchronize.
void sort_by_curve(const float* xyz, std::int64_t stride, int n, const float* bounds, int low_bit,
                   device_buffer<std::uint64_t>& keys, device_buffer<int>& ids, cudaStream_t stream,
                   DeviceMemoryResource& mr);

/// Sorts further `n` keys and indices that sort_by_curve (or this) sorted on bits [low_bit, 64):
/// within each bucket (a run of keys equal in those bits; at most `buckets` of them), on the bits
/// below low_bit: as many as fit beside the bucket's rank in a 32-bit key, or, where that leaves
/// fewer than 8, in a 64-bit one. Returns the new low bit: the order is then a stable sort on
/// bits [that, 64). Queued on `stream`; does not synchronize.
int refine_by_curve(device_buffer<std::uint64_t>& keys, device_buffer<int>& ids, int n, int low_bit,
                    int buckets, cudaStream_t stream, DeviceMemoryResource& mr);

/// The `n` points themselves in that order: `out[j]` (n of them, on the device) holds x, y, z
/// and, in w, the point's index (int bits). Queued on `stream`; does not synchronize.
void points_by_curve(const float* xyz, std::int64_t stride, int n, const float* bounds, int low_bit,
                     float4* out, cudaStream_t stream, DeviceMemoryResource& mr);

/// Loads the kernels of both ways these sorts take on `device` (the current device), once a
/// process: CUDA loads a kernel at its first launch (lazy loading: 0.35-0.5 ms of a 1M-point
/// command's GPU total, H200, bench/results/2026-11-29-round23.md), and which way a sort takes
/// depends on its size (a command's warm-up builds 20,000 points, its cloud perhaps millions).
/// Synchronizes with its own stream only.
void load_sort_kernels(int device);

/// After the device's context is reset: the next load_sort_kernels loads again.
void forget_sort_kernels(int device);

/// `out[j]` = point `ids[j]` of `xyz`, as points_by_curve writes it. Queued on `stream`.
void gather_points(const float* xyz, std::int64_t stride, int n, const int* ids, float4* out,
                   cudaStream_t stream);

}  // namespace pcnn::detail
