// pcnn_bench_load: how fast pcnn::load_cloud reads files, each loaded --repeats times in a row
// (the first read of a file warms the page cache: it is reported apart, never in the median).
// Only the coordinates are kept (as `pcnn knn` loads), or every field (--keep-fields). Prints per file its size, every timed load,
// the median and the rate in MB/s (10^6 bytes).
#include <CLI/CLI.hpp>

#include <sys/stat.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "pcnn/error.hpp"
#include "pcnn/io.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Load rate of pcnn::load_cloud, from the page cache"};
  std::vector<std::string> files;
  int repeats = 5;
  bool keep_fields = false;
  app.add_option("files", files, ".pcd / .ply files")->required();
  app.add_option("--repeats", repeats, "timed loads of each file")->check(CLI::Range(1, 1000));
  app.add_flag("--keep-fields", keep_fields,
               "keep every field (as filter, smooth and normals load), not only x, y and z");
  CLI11_PARSE(app, argc, argv);
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) {
      std::fprintf(stderr, "pcnn_bench_load: cannot stat '%s'\n", f.c_str());
      return 1;
    }
    const double mb = double(st.st_size) / 1e6;
    std::vector<double> ms;
    std::int64_t points = 0;
    try {
      for (int r = 0; r <= repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const pcnn::Cloud c = pcnn::load_cloud(f, nullptr, keep_fields);
        const auto t1 = std::chrono::steady_clock::now();
        points = c.size();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    } catch (const pcnn::error& e) {
      std::fprintf(stderr, "pcnn_bench_load: %s\n", e.what());
      return 1;
    }
    std::printf("%s: %.1f MB, %lld points; first load %.1f ms; timed:", f.c_str(), mb,
                static_cast<long long>(points), ms[0]);
    std::vector<double> timed(ms.begin() + 1, ms.end());
    for (double t : timed) std::printf(" %.1f", t);
    std::sort(timed.begin(), timed.end());
    const double median = timed[timed.size() / 2];
    std::printf(" ms; median %.1f ms = %.0f MB/s\n", median, mb / (median / 1e3));
  }
}
