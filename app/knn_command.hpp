// `pcnn knn`: load, search, compare with the CPU baseline, write, report.
#pragma once

#include <string>

namespace pcnn::app {

struct KnnCommand {
  std::string input;
  std::string query;  // empty: the input queries itself
  int k = 8;
  bool exclude_self = false;
  std::string out;                 // neighbor indices (.npy or .csv); empty: not written
  std::string distances;           // squared distances (.npy or .csv); empty: not written
  std::string device = "auto";     // auto | cuda | cpu
  std::string algorithm = "auto";  // auto | brute | grid
  bool compare_cpu = false;
  bool json = false;
};

/// Exit codes of the pcnn program (documented in the README).
enum ExitCode {
  kExitOk = 0,
  kExitInternal = 1,
  kExitUsage = 2,
  kExitInput = 3,
  kExitDevice = 4,
  kExitOutput = 5,
  kExitDisagree = 6,
};

/// Runs the command; returns kExitOk, or kExitDisagree when --compare-cpu found a difference.
/// Errors are thrown (pcnn::input_error, pcnn::cuda_error, ...) and mapped to exit codes by main.
int run_knn(const KnnCommand& cmd);

}  // namespace pcnn::app
