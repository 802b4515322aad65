// `pcnn stats` and `pcnn filter`.
#pragma once

#include <string>

namespace pcnn::app {

struct StatsCommand {
  std::string input;
  std::string device = "auto";
  bool json = false;
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
  bool json = false;
};

struct SmoothCommand {
  std::string input, out;
  std::string stencil = "gaussian:2:1";  // organized clouds
  float depth_jump = 0, max_move = 0;
  std::string value = "range";    // range | z (organized)
  float lambda = 0.5f, mu = 0.f;  // unorganized: Laplacian (mu 0) or Taubin
  int iterations = 10, k = 16;
  std::string weights = "rank";  // rank | distance (unorganized)
  std::string device = "auto";
  bool compare_cpu = false;
  bool json = false;
};

int run_stats(const StatsCommand& cmd);
int run_smooth(const SmoothCommand& cmd);
int run_filter(const FilterCommand& cmd);

}  // namespace pcnn::app
