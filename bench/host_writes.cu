// pcnn_bench_host_writes: how fast a kernel's stores cross the link into page-locked host memory,
// by the size of the aligned pieces they write and the order of the pieces.
//
// The kNN kernels forward rows to the host a segment at a time (gpu/detail/row_forward.cuh): an
// aligned piece of each output array, copied by a warp's stores. How long a row waits for its
// segment depends on the segment's size (a segment of 128 bytes holds four rows at k = 8), so
// smaller segments complete sooner; this measures what smaller pieces cost on the link. Pieces
// of `--piece` bytes (32, 64, 128 or 256) cover a mapped host buffer of `--mib`, in address order
// or shuffled (piece p at p × stride mod the count, a bijection); each store is one 4-byte word a
// lane, a warp writing 128 bytes a store (32 / piece pieces a store below 128). Device time by
// events, median of `--repeats` after one untimed pass; a pass on device memory gives the stores'
// own cost.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "pcnn_bench_host_writes: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Piece p of `pieces` in the order asked: shuffled, p * stride mod pieces, a bijection for a
// stride prime to `pieces` (main picks one near the golden ratio of the count), which sends
// consecutive pieces far apart across the whole buffer.
__device__ __forceinline__ std::uint64_t piece_at(std::uint64_t p, std::uint64_t pieces,
                                                  std::uint64_t stride) {
  return stride == 0 ? p : p * stride % pieces;
}

__global__ void write_pieces(std::uint32_t* out, std::uint64_t words, int piece_words,
                             std::uint64_t stride) {
  const int lane = threadIdx.x & 31;
  const int per_store = piece_words < 32 ? 32 / piece_words : 1;  // pieces a warp store covers
  const int stores = piece_words > 32 ? piece_words / 32 : 1;
  const std::uint64_t pieces = words / piece_words;
  const std::uint64_t warps = std::uint64_t(gridDim.x) * blockDim.x / 32;
  const std::uint64_t warp = (std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  for (std::uint64_t g = warp * per_store; g < pieces; g += warps * per_store) {
    const std::uint64_t q = g + lane / (piece_words < 32 ? piece_words : 32);
    if (q >= pieces) continue;  // the last store's pieces past the buffer
    const std::uint64_t p = piece_at(q, pieces, stride);
    for (int s = 0; s < stores; ++s)
      out[p * piece_words + s * 32 + lane % (piece_words < 32 ? piece_words : 32)] =
          static_cast<std::uint32_t>(g + lane);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn_bench_host_writes: kernel stores into page-locked host memory"};
  std::vector<int> pieces{32, 64, 128, 256};
  std::vector<int> mibs{64, 512};
  int repeats = 5;
  app.add_option("--piece", pieces, "bytes a piece (32, 64, 128, 256)");
  app.add_option("--mib", mibs, "buffer sizes, MiB");
  app.add_option("--repeats", repeats, "timed passes (median)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  int blocks = 0;
  check(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, 0), "SM count");
  blocks *= 8;
  std::printf(
      "| buffer MiB | piece B | order | host GB/s | device GB/s |\n|---|---|---|---|---|\n");
  for (int mib : mibs) {
    const std::size_t bytes = std::size_t(mib) << 20;
    void* host = nullptr;
    check(cudaHostAlloc(&host, bytes, cudaHostAllocMapped), "cudaHostAlloc");
    void* host_dev = nullptr;
    check(cudaHostGetDevicePointer(&host_dev, host, 0), "cudaHostGetDevicePointer");
    void* dev = nullptr;
    check(cudaMalloc(&dev, bytes), "cudaMalloc");
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    for (int piece : pieces) {
      if (piece < 32 || piece > 256 || (piece & (piece - 1))) {
        std::fprintf(stderr, "pcnn_bench_host_writes: --piece %d: not 32, 64, 128 or 256\n", piece);
        return 2;
      }
      // A stride prime to the piece count, near 0.618 of it (0: address order).
      const std::uint64_t pieces = bytes / piece;
      std::uint64_t prime_stride = static_cast<std::uint64_t>(0.6180339887 * pieces) | 1;
      while (std::gcd(prime_stride, pieces) != 1) prime_stride += 2;
      for (bool shuffled : {false, true}) {
        double rate[2];
        for (int target = 0; target < 2; ++target) {
          auto* out = static_cast<std::uint32_t*>(target == 0 ? host_dev : dev);
          std::vector<float> ms;
          for (int r = 0; r <= repeats; ++r) {
            check(cudaEventRecord(a), "record");
            write_pieces<<<blocks, 256>>>(out, bytes / 4, piece / 4, shuffled ? prime_stride : 0);
            check(cudaGetLastError(), "write_pieces launch");
            check(cudaEventRecord(b), "record");
            check(cudaEventSynchronize(b), "synchronize");
            float t = 0.f;
            check(cudaEventElapsedTime(&t, a, b), "elapsed");
            if (r > 0) ms.push_back(t);  // the first pass is untimed
          }
          std::sort(ms.begin(), ms.end());
          rate[target] = bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
        }
        std::printf("| %d | %d | %s | %.1f | %.0f |\n", mib, piece,
                    shuffled ? "shuffled" : "address", rate[0], rate[1]);
      }
    }
    check(cudaFree(dev), "cudaFree");
    check(cudaFreeHost(host), "cudaFreeHost");
  }
  return 0;
}
