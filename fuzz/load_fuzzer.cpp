// libFuzzer target: pcnn's cloud loader (its own header checks, then PCL) on arbitrary bytes.
// Built twice, with PCNN_FUZZ_EXT ".pcd" and ".ply". Any pcnn::error is a clean rejection;
// a crash, a sanitizer report or another exception is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pcnn/io.hpp"

namespace {

std::string scratch_path() {
  static const std::string path = [] {
    std::string p = "/tmp/pcnn-fuzz-" + std::to_string(getpid()) + PCNN_FUZZ_EXT;
    return p;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    const pcnn::Cloud c = pcnn::load_cloud(path);
    if (c.xyz.size() != static_cast<std::size_t>(c.size()) * 3) std::abort();
  } catch (const pcnn::error&) {
  }
  return 0;
}
