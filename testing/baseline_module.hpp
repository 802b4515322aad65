// The CPU baseline (pcnn/testing/baseline.hpp) as a module loaded at run time: the table of its
// functions that the module gives and the `pcnn` command calls through (baseline_loader.cpp).
//
// Linked into the command, PCL's features, filters and search libraries were bound at every
// start: 116k symbol relocations in libpcl_features alone (bound at load), 40 of the 50 ms a
// `pcnn --help` took on the development VM (bench/results/2026-12-01-round41.md). Only commands
// that compare with PCL need them.
#pragma once

#include "pcnn/testing/baseline.hpp"

namespace pcnn::baseline_module {

/// The module's one exported function (extern "C"), and the file the command loads.
inline constexpr const char* kEntry = "pcnn_pcl_baseline_v1";
inline constexpr const char* kFile = "libpcnn_pcl_baseline.so";

struct Api {
  KnnResult (*knn)(PointsView, const PointsView*, KnnParams, CpuKnnTimings*);
  RadiusResult (*radius)(PointsView, const PointsView*, RadiusParams, CpuKnnTimings*, int);
  HybridResult (*hybrid)(PointsView, const PointsView*, HybridParams, CpuKnnTimings*);
  FilterResult (*sor)(PointsView, SorParams, double*);
  FilterResult (*ror)(PointsView, RorParams, double*);
  NormalsResult (*normals)(PointsView, const NormalParams&, double*);
};

}  // namespace pcnn::baseline_module
