// The rows of one dense result cut into contiguous shares, each in arrays of its own: replicas of
// one cloud on several devices write every row into the share of the device that owns it
// (dist::ShareExchange, dist/part_cuda.cu). Plain data, passed to the kernels by value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pcnn::detail {

struct RowShares {
  static constexpr int kMax = 8;  // devices (the peer limit without NVSwitch)
  int count = 0;                  // 0: no shares, the search's own output arrays
  int first[kMax + 1] = {};       // share j holds rows [first[j], first[j + 1])
  std::int32_t* idx[kMax] = {};   // share j's k indices a row, row first[j] first
  float* dist[kMax] = {};

#ifdef __CUDACC__
  /// The share holding row `row`.
  __device__ int owner(int row) const {
    int j = 0;
    while (j + 1 < count && row >= first[j + 1]) ++j;
    return j;
  }
  /// Where row `row`'s k entries go.
  __device__ void at(int row, int k, std::int32_t*& i, float*& d) const {
    const int j = owner(row);
    const std::size_t r = static_cast<std::size_t>(row - first[j]) * k;
    i = idx[j] + r;
    d = dist[j] + r;
  }
#endif
};

}  // namespace pcnn::detail
