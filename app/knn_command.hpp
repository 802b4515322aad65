// `pcnn knn`: load, search, compare with the CPU baseline, write, report.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "pcnn/device.hpp"
#include "pcnn/index.hpp"
#include "report.hpp"

namespace CLI {
class App;
}

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
  bool csv_streams = false;  // --stream-format csv: arrays to '-' or a pipe as CSV
  std::string format;   // pcd | ply: how to read the inputs ("-" is standard input); "": by name
  OutputMode mode;      // --json, --quiet
  std::string devices;  // "all" or "0,1": several devices (or CPU parts) searched at once
  std::string layout = "auto";  // --devices: spatial parts or replicas of the whole cloud
  int tiles = 0;                // > 0: the references in this many parts, one after the other
};

struct KnnCommand : SearchOptions {
  int k = 8;
};

struct RadiusCommand : SearchOptions {
  double radius = -1;
  int max_nn = 0;      // > 0: hybrid search, dense rows of max_nn
  std::string counts;  // hybrid: per-row counts (.npy or .csv)
};

class Report;

/// The index a search command runs on: the backend from --device (auto: the GPU when one is
/// usable, else the CPU backend, saying so), the device's start-up reported apart, the memory cap
/// (--max-device-memory) as the index's memory resource, the staging mode. Builds over `refs`;
/// adds the device and build rows to `s`. `waited_ms`: how long the command already waited for
/// the device's start-up (before page-locking its memory), counted into the start-up's wait.
/// `reserved`: device memory already mapped for the index (used where it is on the index's
/// device and no cap applies).
Index build_index(const SearchOptions& opt, PointsView refs, Report& report, Report& s,
                  double waited_ms = 0, std::shared_ptr<PoolResource> reserved = nullptr);

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

/// The CUDA device to run on (its description), or none for the CPU: `device` is auto (the
/// GPU when one is usable, else the CPU, saying so on stderr unless `quiet`), cuda (throws
/// pcnn::no_device_error without one) or cpu. Does not create a context.
std::optional<DeviceInfo> choose_device(const std::string& device, bool quiet);

/// Throws pcnn::error (exit 2) when --compare-cpu cannot compare anything: the search itself
/// runs on the CPU (--device cpu, or auto without a usable GPU). `what`: "search", "filter"...
void refuse_compare_on_cpu(const std::string& device, const char* what);

/// Throws pcnn::error (exit 2) when `input` is standard input ('-') and no --format is given.
void check_input_format(const std::string& input, const std::string& format);

/// --format as load_cloud takes it.
CloudFormat parse_format(const std::string& format);

/// Adds --format, which every command that reads a cloud takes.
void add_input_format(CLI::App* cmd, std::string& format);

/// Options that do not apply to a search are refused (pcnn::error, exit 2) before anything is
/// loaded: --exclude-self with --query, --compare-cpu on the CPU backend, GPU-only options with
/// --device cpu, two inputs from standard input.
void check_search_options(const SearchOptions& opt);

/// Runs the command; returns kExitOk, or kExitDisagree when --compare-cpu found a difference.
/// Errors are thrown (pcnn::input_error, pcnn::cuda_error, ...) and mapped to exit codes by main.
int run_knn(const KnnCommand& cmd);
/// `pcnn knn` under mpirun (built with MPI): every rank reads the inputs and owns one spatial part;
/// rank 0 gathers the rows, writes the outputs and prints the summary. Every rank returns the
/// same exit code: that of the first rank that failed, or 0; that rank prints its error on stderr
/// (and, with --json, the one JSON error object on stdout).
int run_knn_mpi(const KnnCommand& cmd);
int run_radius(const RadiusCommand& cmd);
/// `pcnn radius` under mpirun, as run_knn_mpi.
int run_radius_mpi(const RadiusCommand& cmd);

/// An error as pcnn reports it: the message, the exit code, the file it names ("" when none),
/// and "error" or "internal error".
struct ErrorReport {
  std::string message;
  int exit_code = kExitInternal;
  std::string file;
  const char* prefix = "error";
};
/// Maps an exception (pcnn::input_error, pcnn::cuda_error, std::bad_alloc...) to its report; every
/// way out of pcnn maps them the same (defined in main.cpp).
ErrorReport describe_error(std::exception_ptr e);
/// "WHO: error: MESSAGE" on stderr (`who`: "pcnn", or "pcnn (rank 1)" under mpirun).
void print_error(const ErrorReport& e, const std::string& who);

}  // namespace pcnn::app
