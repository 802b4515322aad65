// `pcnn knn`: load, search, compare with the CPU baseline, write, report.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace pcnn::app {

/// What every search command takes.
struct SearchOptions {
  std::string input;
  std::string query;  // empty: the input queries itself
  bool exclude_self = false;
  std::string out;                     // results (.npy or .csv); empty: not written
  std::string distances;               // dense searches: squared distances (.npy or .csv)
  std::string device = "auto";         // auto | cuda | cpu
  std::string staging = "auto";        // auto | pageable | pinned | registered | mapped
  std::int64_t chunk_rows = 0;         // > 0: rows per chunk (kNN: results streamed to the outputs)
  std::int64_t max_device_memory = 0;  // bytes; 0: no cap
  bool compare_cpu = false;
  bool json = false;
};

struct KnnCommand : SearchOptions {
  int k = 8;
  std::string devices;  // "all" or "0,1": one spatial part per device, searched at once
  int tiles = 0;        // > 0: the references in this many parts, one after the other
};

struct RadiusCommand : SearchOptions {
  double radius = -1;
  int max_nn = 0;      // > 0: hybrid search, dense rows of max_nn
  std::string counts;  // hybrid: per-row counts (.npy or .csv)
};

/// "512M", "2G", "1.5Gi", "1000000" -> bytes; throws pcnn::error otherwise.
std::int64_t parse_bytes(const std::string& text);

/// Exit codes of the pcnn program (documented in the README).
enum ExitCode {
  kExitOk = 0,
  kExitInternal = 1,
  kExitUsage = 2,
  kExitInput = 3,
  kExitDevice = 4,  // no usable GPU, out of device or host memory, a CUDA failure
  kExitOutput = 5,
  kExitDisagree = 6,
};

/// Runs the command; returns kExitOk, or kExitDisagree when --compare-cpu found a difference.
/// Errors are thrown (pcnn::input_error, pcnn::cuda_error, ...) and mapped to exit codes by main.
int run_knn(const KnnCommand& cmd);
/// `pcnn knn` under mpirun (built with MPI): every rank reads the inputs and owns one spatial part;
/// rank 0 gathers the rows, writes the outputs and prints the summary. Every rank returns the
/// same exit code: that of the first rank that failed, or 0.
int run_knn_mpi(const KnnCommand& cmd);

/// Prints the error `e` (prefixed with `who`, e.g. "pcnn" or "pcnn (rank 1)") and returns its
/// exit code (defined in main.cpp, which maps every exception the same way).
int report_error(std::exception_ptr e, const std::string& who);
int run_radius(const RadiusCommand& cmd);

}  // namespace pcnn::app
