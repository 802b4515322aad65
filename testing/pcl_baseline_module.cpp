// The CPU baseline as the module the `pcnn` command loads (testing/baseline_module.hpp). Built
// with hidden symbols: only the entry is exported, and the module keeps its own copies of what
// it links statically.
#include "baseline_module.hpp"

extern "C" __attribute__((visibility("default"))) const pcnn::baseline_module::Api*
pcnn_pcl_baseline_v1() {
  static const pcnn::baseline_module::Api api = {
      &pcnn::pcl_knn,
      &pcnn::pcl_radius,
      &pcnn::pcl_hybrid,
      &pcnn::pcl_statistical_outlier_removal,
      &pcnn::pcl_radius_outlier_removal,
      &pcnn::pcl_normals,
  };
  return &api;
}
