// `pcnn stats` and `pcnn filter`.
#pragma once

#include <string>
#include <vector>

#include "report.hpp"

namespace pcnn::app {

struct StatsCommand {
  std::string input;
  std::string device = "auto";
  std::string format;  // pcd | ply: how to read the input ("-" is standard input)
  OutputMode mode;
};

struct FilterCommand {
  std::string method;  // sor | ror
  std::string input, out, kept_indices;
  int mean_k = 16;
  double std_mul = 1.0;
  double radius = 0;
  int min_neighbors = 1;
  std::string device = "auto";
  bool compare_cpu = false;
  bool csv_streams = false;  // --stream-format csv
  std::string format;
  OutputMode mode;
};

struct SmoothCommand {
  std::string input, out;
  std::string stencil = "gaussian:2:1";  // organized clouds
  // Which options the user gave (main fills these): those of the other kind of cloud are refused.
  std::vector<std::string> organized_options, unorganized_options;
  float depth_jump = 0, max_move = 0;
  std::string value = "range";    // range | z (organized)
  float lambda = 0.5f, mu = 0.f;  // unorganized: Laplacian (mu 0) or Taubin
  int iterations = 10, k = 16;
  std::string weights = "rank";  // rank | distance (unorganized)
  std::string device = "auto";
  bool compare_cpu = false;
  std::string format;
  OutputMode mode;
};

/// Options that do not apply are refused (pcnn::error, exit 2) before the cloud is loaded where
/// that can be known then (filter sor/ror options of the other method, --compare-cpu on the CPU).
void check_filter_options(const FilterCommand& cmd, const std::vector<std::string>& given);

int run_stats(const StatsCommand& cmd);
int run_smooth(const SmoothCommand& cmd);
int run_filter(const FilterCommand& cmd);

}  // namespace pcnn::app
