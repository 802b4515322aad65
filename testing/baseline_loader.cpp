// The CPU baseline's functions for the `pcnn` command: each loads the baseline module
// (testing/baseline_module.hpp) on first use and calls it. The module is looked for next to the
// program (the build tree, bundles) and then where installation puts it
// (PCNN_BASELINE_INSTALLED, relative to the program's directory); it stays loaded.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <mutex>
#include <string>

#include "baseline_module.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

std::string program_directory() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<std::size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

const baseline_module::Api& api() {
  static const baseline_module::Api* loaded = nullptr;
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string dir = program_directory();
    for (const std::string& path :
         {dir + "/" + baseline_module::kFile,
          dir + "/" + PCNN_BASELINE_INSTALLED + "/" + baseline_module::kFile}) {
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!why.empty()) why += "; ";
      if (!handle) {
        why += ::dlerror();
        continue;
      }
      using Entry = const baseline_module::Api* (*)();
      if (auto entry = reinterpret_cast<Entry>(::dlsym(handle, baseline_module::kEntry))) {
        loaded = entry();
        return;
      }
      ::dlclose(handle);
      why += path + " has no " + baseline_module::kEntry;
    }
  });
  if (!loaded) throw error("the CPU baseline (PCL) cannot be loaded: " + why);
  return *loaded;
}

}  // namespace

KnnResult pcl_knn(PointsView refs, const PointsView* queries, KnnParams params,
                  CpuKnnTimings* timings) {
  return api().knn(refs, queries, params, timings);
}
RadiusResult pcl_radius(PointsView refs, const PointsView* queries, RadiusParams params,
                        CpuKnnTimings* timings, int max_nn) {
  return api().radius(refs, queries, params, timings, max_nn);
}
HybridResult pcl_hybrid(PointsView refs, const PointsView* queries, HybridParams params,
                        CpuKnnTimings* timings) {
  return api().hybrid(refs, queries, params, timings);
}
FilterResult pcl_statistical_outlier_removal(PointsView pts, SorParams params, double* ms) {
  return api().sor(pts, params, ms);
}
FilterResult pcl_radius_outlier_removal(PointsView pts, RorParams params, double* ms) {
  return api().ror(pts, params, ms);
}
NormalsResult pcl_normals(PointsView pts, const NormalParams& params, double* ms) {
  return api().normals(pts, params, ms);
}

}  // namespace pcnn
