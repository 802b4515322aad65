#include "knn_command.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>

#include <algorithm>
#include <vector>

#include "../core/cpus.hpp"
#include "../core/fresh_pages.hpp"
#include "device_start.hpp"
#include "pcnn/device.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/index.hpp"
#include "pcnn/io.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/reference.hpp"
#include "report.hpp"
#include "result_plan.hpp"

namespace pcnn::app {
namespace {

// The clouds a search command reads: references and, optionally, queries re-centered on the
// references' origin.
struct Inputs {
  Cloud refs;
  std::optional<Cloud> queries;
  double load_ms = 0;
  // What pcnn searches: exact for the coordinates as stored (float offsets, or float64).
  PointsView ref_view, query_view;
  const PointsView* qv() const { return queries ? &query_view : nullptr; }
  // What PCL's baseline searches: the float offsets (rounded where the clouds are not exact);
  // also what validate_knn_args checks (it takes float views: the counts are the same).
  PointsView pcl_ref_view() const { return refs.view(); }
  const PointsView* pcl_qv() const { return queries ? &pcl_query_view : nullptr; }
  PointsView pcl_query_view;
};

// Every output of a search command, checked before anything is loaded or searched: known
// formats, writable directories, none the same file as an input or another output.
OutputSet plan_outputs(const SearchOptions& opt, OutputKind out_kind,
                       const std::string& counts = "") {
  OutputSet outputs;
  outputs.add_input(opt.input);
  if (!opt.query.empty()) outputs.add_input(opt.query);
  if (opt.mode.json) outputs.reserve_stdout("--json");
  outputs.prefer_csv_streams(opt.csv_streams);
  if (!opt.out.empty()) outputs.add(opt.out, out_kind);
  if (!opt.distances.empty()) outputs.add(opt.distances, OutputKind::array);
  if (!counts.empty()) outputs.add(counts, OutputKind::array);
  return outputs;
}

// The search arguments that do not depend on the clouds, checked before they are loaded.
void validate_before_loading(const SearchOptions& opt, int k, bool starts_early) {
  check_search_options(opt);
  const PointsView none{};
  validate_knn_args(none, opt.query.empty() ? nullptr : &none, {k, opt.exclude_self});
  parse_staging(opt.staging);
  // --device cuda: checked here, unless the command starts its one device before loading
  // (`starts_early`: start_gpu_early), which finds out, and whose error is then reported before
  // a load error (load_inputs_or_device_error).
  if (parse_backend(opt.device) == Backend::cuda && !(starts_early && opt.devices.empty())) {
    const DeviceInfo dev = query_device();
    if (!dev.available) throw no_device_error("no usable CUDA device: " + dev.reason);
  }
}

Inputs load_inputs(const SearchOptions& opt) {
  Inputs in;
  const auto t0 = std::chrono::steady_clock::now();
  const CloudFormat format = parse_format(opt.format);
  {
    Progress p("loading " + opt.input, -1, "", Progress::wanted(opt.mode.quiet));
    in.refs = load_cloud(opt.input, nullptr, /*keep_fields=*/false, format);
  }
  if (!opt.query.empty()) {
    Progress p("loading " + opt.query, -1, "", Progress::wanted(opt.mode.quiet));
    in.queries = load_cloud(opt.query, &in.refs.origin, false, format);
  }
  in.load_ms = ms_since(t0);
  std::tie(in.ref_view, in.query_view) = search_views(in.refs, in.queries ? &*in.queries : nullptr);
  if (in.queries) in.pcl_query_view = in.queries->view();
  return in;
}

// load_inputs, where --device cuda without a usable device is the error reported when the
// inputs fail to load too (as if the device were checked first; the early start-up finds out).
Inputs load_inputs_or_device_error(const SearchOptions& opt) {
  try {
    return load_inputs(opt);
  } catch (...) {
    if (opt.device == "cuda" && opt.devices.empty()) device_startup(0);  // throws its error
    throw;
  }
}

Report start_report(const char* command, const SearchOptions& opt, const Inputs& in) {
  Report report;
  report.add("command", command);
  report.add_bool("exclude self", opt.exclude_self);
  report.add_section("references", describe_cloud(in.refs));
  if (in.queries) report.add_section("queries", describe_cloud(*in.queries));
  report.set_float_data(in.refs.coordinate_type == "float32" &&
                        (!in.queries || in.queries->coordinate_type == "float32"));
  report.add("load", in.load_ms, "ms");
  return report;
}

// The backend --device resolves to (auto: the GPU when one is usable, else the CPU backend,
// said on stderr unless `quiet`).
Backend resolve_backend(const SearchOptions& opt, bool quiet) {
  return choose_device(opt.device, quiet || opt.mode.quiet) ? Backend::cuda : Backend::cpu;
}

// The device's start-up in the search section: its milliseconds (driver, context and modules),
// and how long the command waited for it after loading its inputs (the rest of it overlapped the
// load): `waited_before` (for its context, before page-locking: lock_host_memory) and from `t0`
// on.
void add_startup(Report& s, int ordinal, std::chrono::steady_clock::time_point t0,
                 double waited_before) {
  s.add("context start-up", device_startup(ordinal), "ms");
  s.add("context start-up waited", waited_before + ms_since(t0), "ms");
}

// Host memory that the search on device 0 will copy (the clouds' coordinates, the rows),
// page-locked while the device's start-up ends, when the command waits for it anyway: a copy from
// or into memory that is not page-locked locks it and unlocks it around itself (at 10M points,
// k = 8: 21 ms to lock 640 MB of rows after the search began, 13 to unlock them before the
// write). The early release unlocks these while the outputs are written. Only for the early
// start-up's device, once its context is up, and only under the staging modes that would lock
// the memory anyway (auto, registered; not auto on an integrated GPU, which maps it): pinned,
// pageable and mapped keep their own copies, so that comparing them still compares them. Where
// the system will not lock more, what was locked stays locked and the copies lock the rest.
//
// Beside the locking, on a thread of its own, `device_bytes` of device memory are mapped into the
// pool the index will allocate from (PoolResource::reserve): a fresh pool otherwise maps memory as
// each of the build's and search's buffers first needs it, time on the search's wall clock
// (H200, GPU total: 10M points, k = 8, 21.1-22.9 -> 20.7-20.9 ms; 1M LiDAR-like, k = 32,
// 5.9-6.1 -> 5.6-5.7; 1M, k = 8, within the runs' spread). Beside the locking the reservation
// took 3-4 ms at 1M, k = 8, 20-27 at 10M, ending 0.3-2 ms after it, while the warm-up still ran
// (bench/results/2026-11-30-round34.md).
struct HostLocks {
  std::vector<PageLock> locks;
  std::shared_ptr<PoolResource> pool;  // the index's memory, reserved; null where none was
  double waited_ms = 0;                // for the context, before the locking
  double ms = 0;                       // the locking
  double reserve_ms = 0;               // the reservation (beside the locking)
};

HostLocks lock_host_memory(const SearchOptions& opt,
                           std::initializer_list<std::pair<const void*, std::size_t>> ranges,
                           std::int64_t device_bytes = 0) {
  HostLocks h;
  if (opt.device == "cpu" || !opt.devices.empty() || opt.tiles > 0 ||
      (opt.staging != "auto" && opt.staging != "registered"))
    return h;
  const auto waiting = std::chrono::steady_clock::now();
  const bool up = wait_for_context(0);
  h.waited_ms = ms_since(waiting);
  if (!up || (opt.staging == "auto" && query_device(0).integrated)) return h;
  struct Joined {  // the reservation's thread, joined however the locking ends
    std::thread t;
    ~Joined() {
      if (t.joinable()) t.join();
    }
  } reserving;
  if (device_bytes > 0 && opt.max_device_memory <= 0) {
    try {
      reserving.t = std::thread([&h, device_bytes] {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          auto pool = std::make_shared<PoolResource>(0);
          // Room left for the warm-up's searches, which run meanwhile (a few MB), and others.
          const std::int64_t room = pool->available() - (std::int64_t(256) << 20);
          if (std::min(device_bytes, room) > 0 &&
              pool->reserve(static_cast<std::size_t>(std::min(device_bytes, room)))) {
            h.pool = std::move(pool);
            h.reserve_ms = ms_since(t0);
          }
        } catch (...) {  // advice only: the index makes its own pool, as without it
        }
      });
    } catch (const std::system_error&) {
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (const auto& [data, bytes] : ranges) {
      PageLock lock(data, bytes);
      if (lock.active()) h.locks.push_back(std::move(lock));
    }
  } catch (const error&) {
  }
  h.ms = ms_since(t0);
  if (reserving.t.joinable()) reserving.t.join();
  return h;
}

// The device memory a one-pass kNN search of `rows` rows over `refs` points takes, about, for
// lock_host_memory's reservation: what the search plans its passes against, held ready so that
// it need not ask the driver for the free memory (tens of microseconds inside this command):
// (k + 2) * 8 + 12 bytes a row and its forwarding counters (an int a half line of a row's
// entries from k = 16, where swept, else a line: detail::forward_counter_bytes, which this
// host-only code cannot include), 60 a query of a query set and
// 16 MB of working memory, with the tenth the plan keeps back; 64 bytes a point for the index
// (~40 held: bench/results/2026-11-30-round34.md), 32 a query for the staged queries, and 8 MB.
std::int64_t knn_device_bytes(std::int64_t refs, std::int64_t rows, bool query_set, int k) {
  const std::int64_t counters = k >= 16 ? (k + 3) / 4 : (k + 7) / 8;
  const std::int64_t planned = rows * ((std::int64_t(k) + 2) * 8 + 12 + counters) +
                               (query_set ? rows * 60 : 0) + (std::int64_t(16) << 20);
  return planned * 10 / 9 + refs * 64 + (query_set ? rows * 32 : 0) + (std::int64_t(8) << 20);
}

// The host range of a cloud's coordinates, for lock_host_memory.
std::pair<const void*, std::size_t> host_range(const PointsView* v) {
  if (!v || v->memory != Memory::host) return {nullptr, 0};
  return {v->address(), static_cast<std::size_t>(v->span_bytes())};
}

void add_locks(Report& s, const HostLocks& h) {
  if (!h.locks.empty()) s.add("page-lock host memory", h.ms, "ms");
  if (h.pool) s.add("reserve device memory", h.reserve_ms, "ms");
}

// Waits, when it goes out of scope, for the early release that unlocks a command's host memory:
// declared after that memory, so that the memory outlives it.
struct ReleaseWait {
  ReleaseWait() = default;
  ReleaseWait(const ReleaseWait&) = delete;
  ReleaseWait& operator=(const ReleaseWait&) = delete;
  ~ReleaseWait() { wait_for_release(); }
};

// A search on the GPU is over: the device's teardown (and the release of `locks`) runs while the
// outputs are written (device_start.hpp).
void release_early(Index&& index, HostLocks&& locks) {
  if (index.backend() != Backend::cuda) return;
  const int ordinal = index.options().device;
  release_device_early(std::move(index), ordinal, std::move(locks.locks));
}

// Begins device 0's start-up before the inputs load, with a search of the kind the command runs
// (device_start.hpp), unless the search will not run there: --device cpu, several --devices
// (each started when the parts are made), or `auto_cpu` (--device auto will take the CPU
// backend).
void start_gpu_early(const SearchOptions& opt, WarmUp kind, int k, bool auto_cpu = false) {
  if (opt.device == "cpu" || !opt.devices.empty() || auto_cpu) return;
  start_device_early(0, [kind, k] { warm_up(0, kind, k); });
}

}  // namespace

// The index every search command runs on: the backend from --device (auto: the GPU when one is
// usable, else the CPU backend), the device's start-up reported apart, the memory cap as the
// index's memory resource. Builds over the references; fills the section's first rows.
Index build_index(const SearchOptions& opt, PointsView refs, Report& report, Report& s,
                  double waited_ms, std::shared_ptr<PoolResource> reserved) {
  IndexOptions o;
  const auto t0 = std::chrono::steady_clock::now();  // choose_device waits for the driver too
  const std::optional<DeviceInfo> gpu = choose_device(opt.device, opt.mode.quiet);
  o.backend = gpu ? Backend::cuda : Backend::cpu;
  add_device(report, gpu ? &*gpu : nullptr);
  if (gpu) {
    const DeviceInfo& dev = *gpu;
    add_startup(s, dev.ordinal, t0, waited_ms);
    if (opt.max_device_memory > 0) {
      o.memory = make_limited_pool_resource(opt.max_device_memory);
      s.add("device memory limit", static_cast<double>(opt.max_device_memory), "bytes");
    } else if (reserved && reserved->device() == dev.ordinal) {
      o.memory = std::move(reserved);
    }
  }
  o.staging = parse_staging(opt.staging);
  o.chunk_rows = opt.chunk_rows;
  Index index(o);
  index.build(refs);
  const SearchTimings& b = index.last_timings();
  if (b.backend == Backend::cuda) {
    s.add("staging", to_string(b.staging));
    s.add("upload references", b.upload_ms, "ms");
  }
  s.add("build index", b.build_ms, "ms");
  return index;
}

namespace {

// The search's parts after the build; returns the whole (build + search) in milliseconds.
// `row_bytes`: the rows' bytes (kNN), to say where the kernels wrote only the first of them.
double finish_search_section(Report& s, const SearchTimings& build, const SearchTimings& t,
                             std::int64_t row_bytes = 0) {
  if (t.backend == Backend::cuda) {
    s.add("upload queries", t.upload_ms, "ms");
    s.add("order queries", t.build_ms, "ms");
    s.add("search", t.search_ms, "ms");
    s.add("download", t.download_ms, "ms");
    if (t.download_ms > 0)
      s.add("download rate", t.download_bytes / (double(t.download_ms) * 1e6), "GB/s");
    if (t.download_ms > 0 && t.download_bytes < row_bytes)
      s.add_note("", "the rows' first " + format_bytes(row_bytes - t.download_bytes) +
                         " written to host memory by the search's kernels, the rest downloaded");
    else if (t.download_ms == 0 && t.download_bytes > 0)
      s.add_note("", "rows written to host memory by the search's kernels (no download after it)");
    s.add("passes", t.passes);
    if (t.passes <= 1) s.json_only();  // the table shows passes only when there were several
    if (t.distance_evaluations > 0)
      s.add("distance evaluations", static_cast<double>(t.distance_evaluations));
    // Rows whose k-th neighbor the float search could not settle (near-ties): gathered again.
    if (t.distance_evaluations > 0)
      s.add("rows refined again", static_cast<double>(t.refined_rows));
  } else {
    s.add("search", t.search_ms, "ms");
  }
  const double total = build.total_ms + t.total_ms;
  s.add("total", total, "ms");
  s.add_note("", t.backend == Backend::cuda
                     ? "parts: device time (CUDA events); total: wall clock of build and search, "
                       "from points in host memory to results in host memory, start-up and "
                       "page-locking apart"
                     : "wall clock");
  return total;
}

Report cpu_section(const std::string& method, const CpuKnnTimings& t) {
  Report c;
  c.add("method", method + ", " + std::to_string(t.threads) + " threads");
  c.add("build", t.build_ms, "ms");
  c.add("query", t.query_ms, "ms");
  c.add("total", t.build_ms + t.query_ms, "ms");
  return c;
}

// The rows every agreement section has (KnnAgreement, RadiusAgreement), `extra` adding its own.
template <class Agreement, class Extra>
Report agreement_section(const Agreement& ag, Extra&& extra, const char* note) {
  Report a;
  a.add("rows", static_cast<double>(ag.rows));
  a.add("agreeing rows", static_cast<double>(ag.agreeing_rows));
  a.add("agreeing percent", ag.rows ? 100.0 * ag.agreeing_rows / ag.rows : 100.0, "%");
  a.add("identical rows", static_cast<double>(ag.identical_rows));
  extra(a);
  if (!ag.all_agree()) a.add("first difference", ag.first_problem);
  a.add_note("", note);
  return a;
}

Report knn_agreement_section(const KnnAgreement& ag) {
  return agreement_section(
      ag, [&](Report& a) { a.add("max sqdist difference", ag.max_abs_sqdist_diff); },
      "tie-aware: indices may differ only between neighbors at equal distance");
}

void report_written(const SearchOptions& opt, Report& report);

// The indices and the distances, each file written (and synced) on a thread of its own: at 10M
// rows and k = 8 they are 320 MB each. One after the other when both name the same path (a
// device such as /dev/null, which the output set holds as two targets of one name that two
// threads could both claim) or no thread can be started. An error of the indices' file is the
// one reported when both fail, as if written one after the other.
// Dense rows (rows × k) in host memory: a KnnResult's, or the command's own (run_knn).
struct DenseRows {
  const std::int32_t* idx = nullptr;
  const float* dist = nullptr;
  std::int64_t rows = 0;
  int k = 0;
};

DenseRows dense_rows(const KnnResult& r) {
  return {r.indices.data(), r.sqdist.data(), r.rows, r.k};
}

void write_dense(OutputSet& outputs, const SearchOptions& opt, const DenseRows& r, Report& report) {
  std::exception_ptr distances_failed;
  std::thread distances;
  auto write_distances = [&] {
    try {
      write_array(outputs, opt.distances, r.dist, r.rows, r.k, "d");
    } catch (...) {
      distances_failed = std::current_exception();
    }
  };
  if (!opt.distances.empty() && !opt.out.empty() && opt.distances != opt.out) {
    try {
      distances = std::thread(write_distances);
    } catch (const std::system_error&) {
    }
  }
  try {
    if (!opt.out.empty()) write_array(outputs, opt.out, r.idx, r.rows, r.k, "n");
  } catch (...) {
    if (distances.joinable()) distances.join();
    throw;
  }
  if (distances.joinable())
    distances.join();
  else if (!opt.distances.empty())
    write_distances();
  if (distances_failed) std::rethrow_exception(distances_failed);
  report_written(opt, report);
}

// Commits the outputs; the `write` row: the wall clock from `t0` (the writes begun after the
// search) to the outputs in place, where the command writes files after its search.
void commit_outputs(OutputSet& outputs, Report& report, std::chrono::steady_clock::time_point t0,
                    bool written) {
  outputs.commit();
  if (written) report.add("write", ms_since(t0), "ms");
}

void report_written(const SearchOptions& opt, Report& report) {
  if (!opt.out.empty()) report.add("indices written to", opt.out);
  if (!opt.distances.empty()) report.add("squared distances written to", opt.distances);
}

int finish(const SearchOptions& opt, Report& report, int exit_code) {
  emit(report, opt.mode);
  return exit_code;
}

}  // namespace

std::optional<DeviceInfo> choose_device(const std::string& device, bool quiet) {
  if (device == "cpu") return std::nullopt;
  DeviceInfo dev = query_device();
  if (dev.available) return dev;
  if (device == "cuda") throw no_device_error("no usable CUDA device: " + dev.reason);
  if (!quiet)
    std::fprintf(stderr, "pcnn: no usable CUDA device (%s); running on the CPU\n",
                 dev.reason.c_str());
  return std::nullopt;
}

void refuse_compare_on_cpu(const std::string& device, const char* what) {
  if (device == "cpu")
    throw error(std::string("--compare-cpu compares the GPU's ") + what +
                " with the CPU's; with --device cpu the CPU backend is the search");
  if (device == "auto") {
    const DeviceInfo dev = query_device();
    if (!dev.available)
      throw error(std::string("--compare-cpu compares the GPU's ") + what +
                  " with the CPU's; there is no usable CUDA device (" + dev.reason +
                  "), so the CPU backend is the search");
  }
}

void check_input_format(const std::string& input, const std::string& format) {
  if (input == "-" && format.empty())
    throw error("reading a cloud from standard input ('-') needs --format pcd or --format ply");
}

CloudFormat parse_format(const std::string& format) {
  if (format == "pcd") return CloudFormat::pcd;
  if (format == "ply") return CloudFormat::ply;
  return CloudFormat::by_extension;
}

void add_input_format(CLI::App* cmd, std::string& format) {
  cmd->add_option("--format", format,
                  "read the input as pcd or ply whatever its name; needed for '-' (stdin)")
      ->check(CLI::IsMember({"pcd", "ply"}));
}

void check_search_options(const SearchOptions& opt) {
  if (opt.exclude_self && !opt.query.empty())
    throw error("--exclude-self applies to a self-search, not to --query points");
  if (opt.input == "-" && opt.query == "-")
    throw error("the input and --query cannot both be standard input ('-')");
  check_input_format(opt.input, opt.format);
  check_input_format(opt.query, opt.format);
  if (opt.device == "cpu") {
    if (opt.staging != "auto")
      throw error("--staging applies to GPU transfers; not with --device cpu");
    if (opt.max_device_memory > 0)
      throw error("--max-device-memory applies to the GPU; not with --device cpu");
  }
  if (opt.compare_cpu) refuse_compare_on_cpu(opt.device, "search");
}

std::int64_t parse_bytes(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw error("not a memory size: '" + text + "' (use e.g. 512M, 2G or a byte count)");
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "K" || unit == "k")
    scale = 1e3;
  else if (unit == "M")
    scale = 1e6;
  else if (unit == "G")
    scale = 1e9;
  else if (unit == "Ki")
    scale = 1024.0;
  else if (unit == "Mi")
    scale = 1024.0 * 1024;
  else if (unit == "Gi")
    scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    throw error("unknown unit in memory size '" + text + "' (K, M, G, Ki, Mi, Gi)");
  PCNN_EXPECTS(v > 0 && v * scale < 9e18, "memory size must be positive: '" + text + "'");
  return static_cast<std::int64_t>(v * scale);
}

namespace {

// Where dense results (rows × k: kNN, hybrid) go, decided before any is computed: streamed to the
// outputs range by range when asked to (--chunk-rows) or when they would take more than a quarter
// of the host memory available; otherwise held, so that the search writes them where they stay
// (a 10M-point search at k = 32, 2.5 GB of rows, was streamed above a former 1 GB cap: 1.3-2.1 s
// of GPU total, the writes included, against 54-78 ms held; bench/results/2026-11-30-round36.md).
// A quarter, not radius's half: the search may hold a second copy of the rows (pinned or mapped
// staging, an integrated GPU's, or passes over more rows than the device holds). Held results
// that host memory cannot take fail at once (exit 4), as do outputs the disk cannot take (exit 5).
bool plan_dense(const SearchOptions& opt, OutputSet& outputs, std::int64_t rows, int k,
                const std::string& counts, const char* what) {
  std::vector<std::pair<std::string, std::int64_t>> files;
  for (const std::string* path : {&opt.out, &opt.distances})
    if (!path->empty())
      for (auto& f : array_output_sizes(outputs, *path, rows, k)) files.push_back(f);
  if (!counts.empty())
    for (auto& f : array_output_sizes(outputs, counts, rows, 1)) files.push_back(f);
  const std::string results =
      std::string("the ") + what + " (" + std::to_string(rows) + " x " + std::to_string(k) + ")";
  outputs.check_space(files, results);
  const std::int64_t bytes = rows * k * 8 + (counts.empty() ? 0 : rows * 4);
  const std::int64_t host = host_memory_available();
  if (opt.compare_cpu) {  // both results held, the CPU baseline's too
    if (2 * bytes > host)
      fail_host_memory(results + " and the CPU baseline's", 2 * bytes, host,
                       "--compare-cpu holds both; without it they are streamed to the outputs");
    return false;
  }
  return opt.chunk_rows > 0 || bytes > host / 4;
}

// Rows [0, rows) in ranges of `chunk`: range(first, n) searches and keeps them; the ranges'
// timings summed, progress shown between ranges.
template <class Range>
SearchTimings in_ranges(Index& index, std::int64_t rows, std::int64_t chunk, bool show_progress,
                        Range&& range) {
  SearchTimings t;
  Progress progress("searching", rows, " rows", show_progress);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t a = 0; a < rows; a += chunk) {
    const std::int64_t n = std::min(chunk, rows - a);
    range(a, n);
    accumulate(t, index.last_timings());
    progress.update(a + n);
  }
  t.passes = static_cast<int>((rows + chunk - 1) / chunk);
  t.total_ms = ms_since(t0);
  return t;
}

// Dense rows streamed to the outputs range by range: search(first, n, indices, sqdist) fills
// rows [first, first + n). Returns the timings of all ranges together.
template <class Search>
SearchTimings stream_dense(const SearchOptions& opt, OutputSet& outputs, Index& index,
                           std::int64_t rows, int k, const std::string& counts, Search&& search,
                           Report& s) {
  std::optional<ArrayStreamWriter> out_idx, out_dist, out_counts;
  if (!opt.out.empty()) out_idx.emplace(outputs, opt.out, rows, k, false, "n");
  if (!opt.distances.empty()) out_dist.emplace(outputs, opt.distances, rows, k, true, "d");
  if (!counts.empty()) out_counts.emplace(outputs, counts, rows, -1, false, "count");
  const std::int64_t chunk = opt.chunk_rows > 0
                                 ? opt.chunk_rows
                                 : std::max<std::int64_t>(1, range_budget(host_memory_available()) /
                                                                 (std::int64_t(k) * 8));
  KnnResult part;  // the range's rows
  part.k = k;
  const SearchTimings t = in_ranges(
      index, rows, chunk, Progress::wanted(opt.mode.quiet), [&](std::int64_t a, std::int64_t n) {
        part.rows = n;
        part.indices.resize(static_cast<std::size_t>(n) * k);
        part.sqdist.resize(part.indices.size());
        search(a, n, MatrixView<std::int32_t>{part.indices.data(), n, k},
               MatrixView<float>{part.sqdist.data(), n, k});
        if (out_idx) out_idx->append(part.indices.data(), n);
        if (out_dist) out_dist->append(part.sqdist.data(), n);
        if (out_counts) out_counts->append(row_counts(part).data(), n);
      });
  for (auto* w : {&out_idx, &out_dist, &out_counts})
    if (*w) (*w)->finish();
  s.add("results", "streamed to the outputs chunk by chunk");
  return t;
}

// The part of a query cloud's view holding queries [first, first + n).
PointsView query_rows(const PointsView& q, std::int64_t first, std::int64_t n) {
  return q.slice(first, n);
}

// The end of every kNN run: the CPU comparison (--compare-cpu), the outputs (unless they were
// streamed already), the summary. `total` is pcnn's build + search wall clock. `placed`: the
// rows, where not in `result` (run_knn keeps them in arrays of its own, except with
// --compare-cpu, which compares `result`).
int compare_and_write(const KnnCommand& cmd, OutputSet& outputs, const Inputs& in, Report& report,
                      const KnnResult& result, double total, bool streamed,
                      const DenseRows* placed = nullptr) {
  const KnnParams params{cmd.k, cmd.exclude_self};
  int exit_code = kExitOk;
  if (cmd.compare_cpu) {
    CpuKnnTimings ct;
    const KnnResult cpu_result = pcl_knn(in.pcl_ref_view(), in.pcl_qv(), params, &ct);
    report.add_section("cpu baseline", cpu_section("PCL KdTreeFLANN", ct));
    report.add("speedup", (ct.build_ms + ct.query_ms) / total, "x");
    report.add_note("", "speedup = CPU baseline total / pcnn total");
    const KnnAgreement ag = compare_knn(in.ref_view, in.qv(), result, cpu_result, cmd.exclude_self);
    Report section = knn_agreement_section(ag);
    // pcnn's rows are exact by contract: where PCL's differ, say how.
    const ExactnessReport ex = classify_against_exact(in.ref_view, in.qv(), result, cpu_result);
    Report how;
    how.add("identical to the exact rows", static_cast<double>(ex.identical));
    how.add("ties broken another way", static_cast<double>(ex.tie_order));
    how.add("near-ties ordered by rounding", static_cast<double>(ex.rounding));
    how.add("other differences", static_cast<double>(ex.wrong));
    how.add_note("",
                 "PCL's rows against the exact rule (double distances, ties to the smaller "
                 "index)");
    section.add_section("cpu baseline rows", std::move(how));
    report.add_section("agreement with CPU", std::move(section));
    if (!ag.all_agree()) exit_code = kExitDisagree;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (streamed) {
    report_written(cmd, report);
  } else {
    write_dense(outputs, cmd, placed ? *placed : dense_rows(result), report);
  }
  commit_outputs(outputs, report, t0, !streamed && (!cmd.out.empty() || !cmd.distances.empty()));
  return finish(cmd, report, exit_code);
}

// Dense rows (rows × k) the parts or the ranks hold whole in host memory (they are not
// streamed): refused at once when host memory cannot hold them. (plan_dense has checked the disk
// and --compare-cpu.)
void check_held(std::int64_t rows, int k, const char* results, const char* what) {
  const std::int64_t bytes = rows * k * 8, host = host_memory_available();
  if (bytes > host)
    fail_host_memory(std::string("the ") + results + " (" + std::to_string(rows) + " x " +
                         std::to_string(k) + ")",
                     bytes, host,
                     std::string(what) + " hold the rows in host memory; one index streams them");
}

// Radius results the parts or the ranks hold whole, from their counts: the outputs checked
// against the disk, and the results refused at once when host memory cannot hold them while
// they are merged (exact double distances, about 32 bytes a pair); one index streams them.
void check_held_radius(const RadiusCommand& cmd, OutputSet& outputs, const RadiusResult& counted,
                       const char* what) {
  const std::int64_t total = counted.offsets.back();
  const std::string results = "the radius results (" + std::to_string(total) + " pairs)";
  if (!cmd.out.empty())
    outputs.check_space(radius_output_sizes(outputs, cmd.out, counted.offsets.data(), counted.rows),
                        results);
  const std::int64_t bytes = total * 32 + counted.rows * 8, host = host_memory_available();
  if (cmd.compare_cpu && bytes + total * 8 > host)
    fail_host_memory(results + " and the CPU baseline's", bytes + total * 8, host,
                     "--compare-cpu holds both");
  if (bytes > host)
    fail_host_memory(results, bytes, host,
                     std::string(what) + " hold the pairs in host memory; one index streams them");
}

// A part's (or a rank's) row of the summary: its own rows in JSON, one line in the table.
std::pair<std::string, Report> part_item(const std::string& name, int number, int device,
                                         const PartStats& ps, std::string& line) {
  Report r;
  r.add("index", number);
  if (device >= 0) r.add("device", device);
  r.add("points", static_cast<double>(ps.points));
  r.add("home queries", static_cast<double>(ps.home_queries));
  r.add("queries forwarded", static_cast<double>(ps.queries_forwarded));
  r.add("queries received", static_cast<double>(ps.queries_received));
  r.add("build", ps.build_ms, "ms");
  r.add("search", ps.search_ms, "ms");
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "%s%s points %s, home queries %s, forwarded %s, received %s, build %.3f ms, "
                "search %.3f ms",
                device >= 0 ? ("device " + std::to_string(device)).c_str() : "",
                device >= 0 ? "," : "", thousands(ps.points).c_str(),
                thousands(ps.home_queries).c_str(), thousands(ps.queries_forwarded).c_str(),
                thousands(ps.queries_received).c_str(), ps.build_ms, ps.search_ms);
  line = buf;
  return {name + " " + std::to_string(number), std::move(r)};
}

// --devices and --layout, before loading: the list's syntax, and a layout only with a list.
void check_devices_syntax(const SearchOptions& opt) {
  if (!opt.devices.empty()) parse_devices(opt.devices, Backend::cpu);
  if (opt.layout != "auto" && opt.devices.empty())
    throw error("--layout applies to --devices (how several devices share the cloud)");
}

// The parts of a search in one process: one per device searched at once (--devices: spatial
// parts, or replicas of the whole cloud, see --layout), or `tiles` spatial parts searched one
// after the other through one device (--tiles, or references larger than the device memory
// allowed). The devices are started and named in the summary.
PartitionedOptions parts_options(const SearchOptions& opt, int tiles, Report& report, Report& s) {
  PartitionedOptions po;
  po.index.backend = resolve_backend(opt, tiles > 0 && opt.devices.empty());
  po.index.staging = parse_staging(opt.staging);
  po.index.chunk_rows = opt.chunk_rows;
  if (!opt.devices.empty()) po.devices = parse_devices(opt.devices, po.index.backend);
  po.tiles = tiles;
  po.max_device_memory = opt.max_device_memory;
  po.layout = tiles > 0 ? Layout::spatial : parse_layout(opt.layout);
  if (po.index.backend == Backend::cuda) {
    double startup = 0, startup_waited = 0;
    std::string names;
    std::optional<DeviceInfo> first;
    for (int d : po.devices.empty() ? std::vector<int>{0} : po.devices) {
      const DeviceInfo dev = query_device(d);
      if (!dev.available) throw no_device_error("no usable CUDA device: " + dev.reason);
      if (!first) first = dev;
      names += (names.empty() ? "" : ", ") + std::to_string(d) + ": " + dev.name;
      double waited = 0;
      startup += device_startup(d, &waited);
      startup_waited += waited;
    }
    add_device(report, &*first);
    s.add("devices", names);
    s.add("context start-up", startup, "ms");
    s.add("context start-up waited", startup_waited, "ms");
    if (opt.max_device_memory > 0)
      s.add("device memory limit", static_cast<double>(opt.max_device_memory), "bytes");
  } else {
    add_device(report, nullptr);
  }
  return po;
}

// The layout as the summary names it: replicas that cut the last self-search along the index's
// order (each writing rows into the device or rank owning them) say so.
const char* layout_name(bool replicated, bool by_position) {
  if (!replicated) return "spatial";
  return by_position ? "replicated, self-search cut along the order" : "replicated";
}

// The parts' rows of the search section (the last search's timings, plus `extra_ms` of an
// earlier count).
void parts_section(Report& s, const PartitionedIndex& index, int tiles, Backend backend,
                   double extra_ms = 0) {
  const PartitionedTimings& t = index.last_timings();
  s.add(tiles > 0 ? "tiles" : "parts", index.parts());
  if (tiles == 0) s.add("layout", layout_name(index.replicated(), t.by_position));
  s.add("partition", t.partition_ms, "ms");
  s.add("build index", t.build_ms, "ms");
  s.add("home search", t.home_ms, "ms");
  s.add("boundary search and merge", t.boundary_ms, "ms");
  s.add("queries forwarded", static_cast<double>(t.queries_forwarded));
  s.add("total", t.total_ms + extra_ms, "ms");
  s.add_note("", tiles > 0 ? "wall clock; total: build and search of every tile, partition apart"
                 : index.replicated()
                     ? "wall clock; total: build and search, every device at once on its share of "
                       "the rows (home search: the search)"
                     : "wall clock; total: build and search, parts at once, partition apart");
  std::vector<std::pair<std::string, Report>> items;
  std::vector<std::string> lines(t.parts.size());
  const char* name = tiles > 0 ? "tile" : "part";
  for (std::size_t p = 0; p < t.parts.size(); ++p)
    items.push_back(part_item(name, static_cast<int>(p),
                              backend == Backend::cuda ? t.parts[p].device : -1, t.parts[p],
                              lines[p]));
  s.add_list(tiles > 0 ? "per tile" : "per part", std::move(items), lines);
}

// kNN in spatial parts (see parts_options). The rows are byte-identical to one index's; they
// are held, not streamed.
int run_knn_parts(const KnnCommand& cmd, OutputSet& outputs, const Inputs& in, Report& report,
                  int tiles) {
  const KnnParams params{cmd.k, cmd.exclude_self};
  const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
  check_held(rows, cmd.k, "kNN results", tiles > 0 ? "tiles" : "--devices");
  Report s;
  const PartitionedOptions po = parts_options(cmd, tiles, report, s);
  std::optional<PartitionedIndex> index;
  KnnResult result;
  {
    Progress p("searching", -1, "", Progress::wanted(cmd.mode.quiet));
    index.emplace(in.ref_view, po);
    result = in.qv() ? index->knn(*in.qv(), params) : index->self_knn(params);
  }
  parts_section(s, *index, tiles, po.index.backend);
  const double total = index->last_timings().total_ms;
  report.add_section("search", std::move(s));
  return compare_and_write(cmd, outputs, in, report, result, total, false);
}

// --device auto for a kNN search: the CPU backend when it would be done before the GPU repaid
// its start-up. A GPU costs a process 300-460 ms before its first search (driver, context,
// modules, teardown; measured on an H100 host, bench/results/2026-11-23-round6.md), while the CPU
// backend takes about 0.6 us per indexed point and (1.45 + 0.08 k) us per query row on one
// thread (the same host, 16 threads, 100k-8M points). Below the crossover `pcnn knn` with the
// CPU backend finishes first, on any machine whose CPU is no slower per thread. Options that
// only mean something on a GPU keep it.
constexpr double kGpuStartupMs = 350;

double cpu_estimate_ms(std::int64_t refs, std::int64_t rows, int k, unsigned threads) {
  const double thread_us = 0.6 * double(refs) + (1.45 + 0.08 * k) * double(rows);
  return thread_us / 1000.0 / threads;
}

// Whether --device auto may take the CPU backend for this search (the other options keep the GPU).
bool auto_may_take_cpu(const KnnCommand& cmd) {
  return cmd.device == "auto" && cmd.staging == "auto" && cmd.max_device_memory <= 0 &&
         !cmd.compare_cpu && cmd.devices.empty() && cmd.tiles <= 0;
}

// How many points a cloud file holds, before it is loaded: the count its header gives (a .pcd's
// POINTS, a .ply's `element vertex`, within its first 16 KiB), else at most its size over 12
// bytes (three floats a point); -1 when unknown (standard input, no such file). A guess for
// starting the GPU early, not a check: the loader checks the file.
std::int64_t likely_points(const std::string& path) {
  if (path == "-") return -1;
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) return -1;
  std::string head(std::min<std::uintmax_t>(bytes, 16384), '\0');
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    head.resize(std::fread(head.data(), 1, head.size(), f));
    std::fclose(f);
  }
  for (const char* key : {"\nPOINTS ", "\nelement vertex "}) {
    const std::size_t at = head.find(key);
    if (at == std::string::npos) continue;
    const char* first = head.data() + at + std::strlen(key);
    std::int64_t n = 0;
    const auto [end, err] = std::from_chars(first, head.data() + head.size(), n);
    if (err == std::errc() && end != first && n >= 0) return n;
  }
  return static_cast<std::int64_t>(bytes / 12);
}

// Whether --device auto certainly takes the CPU backend, judged before the inputs are loaded
// from the points their files likely hold (likely_points; where that is unknown the GPU is not
// started early either).
bool auto_takes_cpu_before_loading(const KnnCommand& cmd) {
  if (!auto_may_take_cpu(cmd)) return false;
  const std::int64_t refs = likely_points(cmd.input),
                     rows = cmd.query.empty() ? refs : likely_points(cmd.query);
  if (refs < 0 || rows < 0) return true;
  const unsigned threads = static_cast<unsigned>(detail::usable_cpus());
  return cpu_estimate_ms(refs, rows, cmd.k, threads) < kGpuStartupMs;
}

void choose_auto_device(KnnCommand& cmd, std::int64_t refs, std::int64_t rows, Report& report) {
  if (!auto_may_take_cpu(cmd)) return;
  const unsigned threads = static_cast<unsigned>(detail::usable_cpus());  // as the CPU backend
  const double cpu_ms = cpu_estimate_ms(refs, rows, cmd.k, threads);
  if (cpu_ms >= kGpuStartupMs) return;
  cmd.device = "cpu";
  char why[160];
  std::snprintf(why, sizeof why,
                "cpu: about %.0f ms on %u thread%s, less than a GPU's start-up (~%.0f ms)", cpu_ms,
                threads, threads == 1 ? "" : "s", kGpuStartupMs);
  report.add("auto device", std::string(why));
}

}  // namespace

int run_knn(const KnnCommand& given) {
  KnnCommand cmd = given;  // --device auto is settled once the clouds' sizes are known
  const KnnParams params{cmd.k, cmd.exclude_self};
  validate_before_loading(cmd, cmd.k, true);
  check_devices_syntax(cmd);
  OutputSet outputs = plan_outputs(cmd, OutputKind::array);
  start_gpu_early(cmd, WarmUp::knn, cmd.k, auto_takes_cpu_before_loading(cmd));
  const Inputs in = load_inputs_or_device_error(cmd);
  validate_knn_args(in.pcl_ref_view(), in.pcl_qv(),
                    params);  // bad options fail before any device work
  Report report = start_report("knn", cmd, in);
  report.add("k", cmd.k);
  const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
  choose_auto_device(cmd, in.ref_view.count, rows, report);
  const bool streamed = plan_dense(cmd, outputs, rows, cmd.k, "", "kNN results");

  if (!cmd.devices.empty() || cmd.tiles > 0)
    return run_knn_parts(cmd, outputs, in, report, cmd.tiles);
  Report s;
  std::optional<Index> built;
  const Report started = report;  // the tiles below start from here again
  // Rows held whole: their arrays are allocated (pages mapped and zeroed: 640 MB at 10M rows,
  // k = 8) before the index waits for the device's start-up, which this overlaps. Each begins
  // on a 128-byte line, so that rows the search forwards a line at a time fill whole lines (at
  // k = 32 a row is a line, sent once it is written; from a vector's start, 16 bytes past a page,
  // each line waited for two rows). --compare-cpu keeps them in the KnnResult it compares.
  KnnResult result;
  std::vector<std::int32_t> idx_store;  // the rows' arrays, from a line on, when not in `result`
  std::vector<float> dist_store;
  const std::size_t cells = streamed ? 0 : static_cast<std::size_t>(rows) * cmd.k;
  std::int32_t* out_idx = nullptr;
  float* out_dist = nullptr;
  if (!streamed && cmd.compare_cpu) {
    result.rows = rows;
    result.k = cmd.k;
    detail::resize_fresh(result.indices, cells);
    detail::resize_fresh(result.sqdist, cells);
    out_idx = result.indices.data();
    out_dist = result.sqdist.data();
  } else if (!streamed) {
    const std::size_t idx_at = detail::resize_fresh_on_line(idx_store, cells);
    out_idx = idx_store.data() + idx_at;
    const std::size_t dist_at = detail::resize_fresh_on_line(dist_store, cells);
    out_dist = dist_store.data() + dist_at;
  }
  // On a terminal, a large search runs in about a hundred ranges so that progress can be shown.
  const bool in_ranges_shown = Progress::wanted(cmd.mode.quiet) && rows >= (std::int64_t(1) << 20);
  const std::int64_t range_rows =
      in_ranges_shown ? std::max<std::int64_t>(rows / 100, 1 << 16) : rows;
  const ReleaseWait release_wait;
  HostLocks locks = lock_host_memory(
      cmd,
      {host_range(&in.ref_view),
       host_range(in.qv()),
       {out_idx, cells * sizeof(std::int32_t)},
       {out_dist, cells * sizeof(float)}},
      streamed ? 0 : knn_device_bytes(in.ref_view.count, range_rows, !!in.qv(), cmd.k));
  add_locks(s, locks);
  try {
    built.emplace(build_index(cmd, in.ref_view, report, s, locks.waited_ms, std::move(locks.pool)));
  } catch (const out_of_memory_error&) {
    // References larger than the device memory allowed: tiles of the index streamed through the
    // device, twice as many until one fits.
    if (cmd.max_device_memory <= 0 || resolve_backend(cmd, true) != Backend::cuda) throw;
    locks = HostLocks();   // unlocked before the rows they cover are freed
    result = KnnResult();  // the tiles hold their own rows
    idx_store = std::vector<std::int32_t>();
    dist_store = std::vector<float>();
    for (int tiles = 2;; tiles *= 2) {
      try {
        report = started;
        return run_knn_parts(cmd, outputs, in, report, tiles);
      } catch (const out_of_memory_error&) {
        if (tiles >= 1024) throw;
      }
    }
  }
  Index& index = *built;
  const SearchTimings build = index.last_timings();
  SearchTimings t;
  if (streamed) {
    t = stream_dense(
        cmd, outputs, index, rows, cmd.k, "",
        [&](std::int64_t a, std::int64_t n, MatrixView<std::int32_t> iv, MatrixView<float> dv) {
          if (in.qv())
            index.knn(query_rows(in.query_view, a, n), params, iv, dv);
          else
            index.self_knn_rows(a, params, iv, dv);
        },
        s);
  } else if (in_ranges_shown) {
    t = in_ranges(index, rows, range_rows, true, [&](std::int64_t a, std::int64_t n) {
      const std::size_t at = static_cast<std::size_t>(a) * cmd.k;
      const MatrixView<std::int32_t> iv{out_idx + at, n, cmd.k};
      const MatrixView<float> dv{out_dist + at, n, cmd.k};
      if (in.qv())
        index.knn(query_rows(in.query_view, a, n), params, iv, dv);
      else
        index.self_knn_rows(a, params, iv, dv);
    });
  } else {
    const MatrixView<std::int32_t> iv{out_idx, rows, cmd.k};
    const MatrixView<float> dv{out_dist, rows, cmd.k};
    if (in.qv())
      index.knn(*in.qv(), params, iv, dv);
    else
      index.self_knn(params, iv, dv);
    t = index.last_timings();
  }
  const double total = finish_search_section(s, build, t, rows * cmd.k * 8);
  report.add_section("search", std::move(s));
  release_early(std::move(index), std::move(locks));
  const DenseRows placed{out_idx, out_dist, rows, cmd.k};
  return compare_and_write(cmd, outputs, in, report, result, total, streamed, &placed);
}

namespace {

// Radius results: OUT.offsets.npy, OUT.indices.npy, OUT.sqdist.npy, or one CSV of pairs.
void write_csr(OutputSet& outputs, const SearchOptions& opt, const RadiusResult& r) {
  if (!opt.out.empty())
    write_radius(outputs, opt.out, r.offsets.data(), r.rows, r.indices.data(), r.sqdist.data());
}

void report_csr(const OutputSet& outputs, const SearchOptions& opt, Report& report) {
  if (opt.out.empty()) return;
  const auto files = outputs.files(opt.out);
  if (files.size() == 1) {
    report.add("pairs written to", opt.out);
    return;
  }
  report.add("offsets written to", files[0]);
  report.add("indices written to", files[1]);
  report.add("squared distances written to", files[2]);
}

Report radius_agreement_section(const RadiusAgreement& ag) {
  return agreement_section(
      ag,
      [&](Report& a) { a.add("points on the boundary", static_cast<double>(ag.boundary_points)); },
      "a point may differ only within float rounding of r (PCL decides in float)");
}

// Radius results planned from the counts: the counts (cheap: nothing is stored) give every
// row's size, so before any pair is found the outputs are checked against the disk, and the
// results are either held (one fill; the device does passes when it cannot hold them) or, when
// host memory cannot hold them or when asked to (--chunk-rows), filled range by range and
// streamed to the outputs. Results that must be held (--compare-cpu) and do not fit fail at once.
struct RadiusRun {
  RadiusResult result;  // the offsets always; the pairs when held
  bool streamed = false;
  SearchTimings t;
  float count_ms = 0;
};

RadiusRun run_radius_search(const RadiusCommand& cmd, const Inputs& in, OutputSet& outputs,
                            Index& index, Report& s) {
  const RadiusParams rp{cmd.radius, cmd.exclude_self};
  RadiusRun run;
  RadiusResult& r = run.result;
  r.rows = in.qv() ? in.qv()->count : in.ref_view.count;
  r.offsets.assign(static_cast<std::size_t>(r.rows) + 1, 0);
  const ArrayView<std::int64_t> off{r.offsets.data(), r.rows + 1};
  const std::int64_t total =
      in.qv() ? index.radius_count(*in.qv(), rp, off) : index.self_radius_count(rp, off);
  accumulate(run.t, index.last_timings());
  run.count_ms = index.last_timings().search_ms;
  const double count_total = run.t.total_ms;

  const std::string results = "the radius results (" + std::to_string(total) + " pairs)";
  if (!cmd.out.empty())
    outputs.check_space(radius_output_sizes(outputs, cmd.out, r.offsets.data(), r.rows), results);
  const std::int64_t bytes = total * 8, host = host_memory_available();
  if (cmd.compare_cpu && 2 * bytes > host)
    fail_host_memory(results + " and the CPU baseline's", 2 * bytes, host,
                     "--compare-cpu holds both; without it they are streamed to the outputs");
  run.streamed = !cmd.compare_cpu && (cmd.chunk_rows > 0 || bytes > host / 2);
  auto fill = [&](std::int64_t a, std::int64_t b, std::int32_t* idx, float* dist) {
    const ArrayView<const std::int64_t> slice{r.offsets.data() + a, b - a + 1};
    const std::int64_t entries = r.offsets[b] - r.offsets[a];
    const ArrayView<std::int32_t> iv{idx, entries};
    const ArrayView<float> dv{dist, entries};
    if (in.qv())
      index.radius_fill(query_rows(in.query_view, a, b - a), rp, slice, iv, dv);
    else
      index.self_radius_fill_rows(a, rp, slice, iv, dv);
    accumulate(run.t, index.last_timings());
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (!run.streamed) {
    r.indices.resize(static_cast<std::size_t>(total));
    r.sqdist.resize(r.indices.size());
    fill(0, r.rows, r.indices.data(), r.sqdist.data());
    run.t.passes = index.last_timings().passes;
  } else {
    const std::vector<std::int64_t> ends =
        radius_ranges(r.offsets, cmd.chunk_rows, range_budget(host), host);
    std::optional<RadiusStreamWriter> writer;
    if (!cmd.out.empty()) writer.emplace(outputs, cmd.out, r.offsets.data(), r.rows);
    std::vector<std::int32_t> idx;
    std::vector<float> dist;
    std::int64_t a = 0;
    for (const std::int64_t b : ends) {
      idx.resize(static_cast<std::size_t>(r.offsets[b] - r.offsets[a]));
      dist.resize(idx.size());
      fill(a, b, idx.data(), dist.data());
      if (writer) writer->append(b - a, idx.data(), dist.data());
      a = b;
    }
    if (writer) writer->finish();
    run.t.passes = static_cast<int>(ends.size());
    s.add("results", cmd.out.empty() ? "filled range by range and not kept (no output)"
                                     : "streamed to the outputs range by range");
  }
  run.t.total_ms = count_total + ms_since(t0);  // streamed: the writes overlap nothing, counted
  return run;
}

}  // namespace

namespace {

// The end of every radius run: the CPU comparison (--compare-cpu), the outputs (unless they were
// streamed already), the summary. `total` is pcnn's build + search wall clock.
int compare_and_write_radius(const RadiusCommand& cmd, OutputSet& outputs, const Inputs& in,
                             Report& report, const RadiusRun& radius, const HybridResult& capped,
                             bool hybrid_streamed, double total) {
  const bool hybrid = cmd.max_nn > 0;
  const HybridParams hp{cmd.radius, cmd.max_nn, cmd.exclude_self};
  const RadiusParams rp{cmd.radius, cmd.exclude_self};
  int exit_code = kExitOk;
  if (cmd.compare_cpu) {
    CpuKnnTimings ct;
    RadiusResult cpu_radius;
    HybridResult cpu_capped;
    if (hybrid)
      cpu_capped = pcl_hybrid(in.pcl_ref_view(), in.pcl_qv(), hp, &ct);
    else
      cpu_radius = pcl_radius(in.pcl_ref_view(), in.pcl_qv(), rp, &ct);
    report.add_section("cpu baseline", cpu_section("PCL KdTreeFLANN radiusSearch", ct));
    report.add("speedup", (ct.build_ms + ct.query_ms) / total, "x");
    report.add_note("", "speedup = CPU baseline total / pcnn total");
    const RadiusAgreement ag = hybrid ? compare_hybrid(in.ref_view, in.qv(), capped, cpu_capped,
                                                       cmd.radius, cmd.exclude_self)
                                      : compare_radius(in.ref_view, in.qv(), radius.result,
                                                       cpu_radius, cmd.radius, cmd.exclude_self);
    report.add_section("agreement with CPU", radius_agreement_section(ag));
    if (!ag.all_agree()) exit_code = kExitDisagree;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (hybrid_streamed) {
    report_written(cmd, report);
    if (!cmd.counts.empty()) report.add("counts written to", cmd.counts);
  } else if (hybrid) {
    write_dense(outputs, cmd, dense_rows(capped.knn), report);
    if (!cmd.counts.empty()) {
      write_vector(outputs, cmd.counts, capped.counts.data(), capped.knn.rows, "count");
      report.add("counts written to", cmd.counts);
    }
  } else {
    const RadiusResult& r = radius.result;
    std::int64_t longest = 0;
    for (std::int64_t q = 0; q < r.rows; ++q) longest = std::max(longest, r.count(q));
    report.add("neighbors found", static_cast<double>(r.offsets.back()));
    report.add("mean per query", r.rows ? double(r.offsets.back()) / double(r.rows) : 0.0);
    report.add("most for one query", static_cast<double>(longest));
    if (!radius.streamed) write_csr(outputs, cmd, r);
    report_csr(outputs, cmd, report);
  }
  const bool streamed = hybrid ? hybrid_streamed : radius.streamed;
  commit_outputs(outputs, report, t0,
                 !streamed && (!cmd.out.empty() || !cmd.distances.empty() || !cmd.counts.empty()));
  return finish(cmd, report, exit_code);
}

// Radius or hybrid in spatial parts (see parts_options): the radius rows counted first, then
// held (refused at once when host memory cannot hold them); rows byte-identical to one index's.
int run_radius_parts(const RadiusCommand& cmd, OutputSet& outputs, const Inputs& in,
                     Report& report) {
  const bool hybrid = cmd.max_nn > 0;
  const char* what = cmd.tiles > 0 ? "tiles" : "--devices";
  const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
  if (hybrid) check_held(rows, cmd.max_nn, "hybrid results", what);
  Report s;
  const PartitionedOptions po = parts_options(cmd, cmd.tiles, report, s);
  std::optional<PartitionedIndex> index;
  RadiusRun radius;
  HybridResult capped;
  double count_ms = 0;
  {
    Progress p("searching", -1, "", Progress::wanted(cmd.mode.quiet));
    index.emplace(in.ref_view, po);
    if (hybrid) {
      const HybridParams hp{cmd.radius, cmd.max_nn, cmd.exclude_self};
      capped = in.qv() ? index->hybrid(*in.qv(), hp) : index->self_hybrid(hp);
    } else {
      const RadiusParams rp{cmd.radius, cmd.exclude_self};
      RadiusResult& r = radius.result;
      r.rows = rows;
      r.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
      const ArrayView<std::int64_t> off{r.offsets.data(), rows + 1};
      if (in.qv())
        index->radius_count(*in.qv(), rp, off);
      else
        index->self_radius_count(rp, off);
      // The count's own time: indexes built at construction (parts, replicas) are in the
      // search's total once; tiles build again in every search.
      const PartitionedTimings& ct = index->last_timings();
      count_ms = ct.total_ms - (cmd.tiles > 0 ? 0.0 : ct.build_ms);
      check_held_radius(cmd, outputs, r, what);
      r = in.qv() ? index->radius(*in.qv(), rp) : index->self_radius(rp);
    }
  }
  if (!hybrid) s.add("count", count_ms, "ms");
  parts_section(s, *index, cmd.tiles, po.index.backend, count_ms);
  const double total = index->last_timings().total_ms + count_ms;
  report.add_section("search", std::move(s));
  return compare_and_write_radius(cmd, outputs, in, report, radius, capped, false, total);
}

}  // namespace

int run_radius(const RadiusCommand& cmd) {
  const bool hybrid = cmd.max_nn > 0;
  validate_radius(cmd.radius);
  validate_before_loading(cmd, hybrid ? cmd.max_nn : 1, true);
  check_devices_syntax(cmd);
  OutputSet outputs =
      plan_outputs(cmd, hybrid ? OutputKind::array : OutputKind::radius, cmd.counts);
  start_gpu_early(cmd, hybrid ? WarmUp::hybrid : WarmUp::radius, cmd.max_nn);
  const Inputs in = load_inputs_or_device_error(cmd);
  validate_knn_args(in.pcl_ref_view(), in.pcl_qv(), {hybrid ? cmd.max_nn : 1, cmd.exclude_self});
  Report report = start_report("radius", cmd, in);
  report.add_bool("hybrid", hybrid);
  report.add("radius", cmd.radius);
  if (hybrid) report.add("max nn", cmd.max_nn);
  const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
  const bool hybrid_streamed =
      hybrid && plan_dense(cmd, outputs, rows, cmd.max_nn, cmd.counts, "hybrid results");
  if (!cmd.devices.empty() || cmd.tiles > 0) return run_radius_parts(cmd, outputs, in, report);

  Report s;
  const ReleaseWait release_wait;
  HostLocks locks = lock_host_memory(cmd, {host_range(&in.ref_view), host_range(in.qv())});
  add_locks(s, locks);
  Index index = build_index(cmd, in.ref_view, report, s, locks.waited_ms);
  const SearchTimings build = index.last_timings();
  RadiusRun radius;
  HybridResult capped;
  SearchTimings t;
  const HybridParams hp{cmd.radius, cmd.max_nn, cmd.exclude_self};
  if (hybrid_streamed) {
    t = stream_dense(
        cmd, outputs, index, rows, cmd.max_nn, cmd.counts,
        [&](std::int64_t a, std::int64_t n, MatrixView<std::int32_t> iv, MatrixView<float> dv) {
          if (in.qv())
            index.hybrid(query_rows(in.query_view, a, n), hp, iv, dv);
          else
            index.self_hybrid_rows(a, hp, iv, dv);
        },
        s);
  } else if (hybrid) {
    Progress p("searching", -1, "", Progress::wanted(cmd.mode.quiet));
    capped = in.qv() ? index.hybrid(*in.qv(), hp) : index.self_hybrid(hp);
    t = index.last_timings();
  } else {
    radius = run_radius_search(cmd, in, outputs, index, s);
    t = radius.t;
    s.add("count", radius.count_ms, "ms");
  }
  const double total = finish_search_section(s, build, t);
  report.add_section("search", std::move(s));
  release_early(std::move(index), std::move(locks));
  return compare_and_write_radius(cmd, outputs, in, report, radius, capped, hybrid_streamed, total);
}

}  // namespace pcnn::app

#ifdef PCNN_WITH_MPI
#include <mpi.h>

#include "pcnn/mpi.hpp"

namespace pcnn::app {
namespace {

// Runs `f` on this rank unless a rank failed before; then every rank learns the exit code of the
// first rank that failed on its own (a rank that only saw another fail, mpi::peer_failure, stays
// quiet). Returns that code, 0 when every rank succeeded.
template <class F>
int mpi_step(int& failed, bool json, F&& f) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = failed;
  std::optional<ErrorReport> err;
  if (mine == 0) {
    try {
      f();
    } catch (const mpi::peer_failure&) {
      mine = -1;
    } catch (...) {
      err = describe_error(std::current_exception());
      print_error(*err, "pcnn (rank " + std::to_string(rank) + ")");
      mine = err->exit_code;
      if (mine == 0) mine = kExitInternal;
    }
  }
  std::vector<int> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  failed = 0;
  for (int r = 0; r < size; ++r)
    if (all[r] > 0) {
      failed = all[r];
      // With --json, the first rank that failed on its own prints the one JSON error object.
      if (r == rank && json && err) {
        std::printf("%s\n", json_error(err->message, err->exit_code, err->file).c_str());
        std::fflush(stdout);
      }
      break;
    }
  if (failed == 0)
    for (int c : all)
      if (c < 0) failed = kExitInternal;  // a peer failure without its origin: cannot happen
  return failed;
}

}  // namespace

// MPI for the length of one command: initialized here, finalized on every way out.
struct MpiSession {
  MpiSession() { MPI_Init(nullptr, nullptr); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

namespace {

// The ranks' section of the summary (rank 0), from every rank's stats; returns the slowest
// rank's build + search, the run's total.
double ranks_section(Report& report, Backend backend, const std::vector<mpi::RankStats>& stats,
                     int size, bool shared, bool replicated) {
  report.add("ranks", size);
  if (backend == Backend::cuda && !stats.empty()) {
    const DeviceInfo dev = query_device(stats[0].device);  // rank 0's
    add_device(report, &dev);
  } else {
    add_device(report, nullptr);
  }
  Report s;
  s.add("ranks", size);
  s.add("layout", layout_name(replicated, !stats.empty() && stats[0].by_position));
  double slowest = 0, forwarded = 0, startup = 0;
  for (const mpi::RankStats& r : stats) {
    slowest = std::max(slowest, r.build_ms + r.total_ms);
    startup = std::max(startup, r.startup_ms);
    forwarded += static_cast<double>(r.queries_forwarded);
  }
  if (backend == Backend::cuda) s.add("context start-up", startup, "ms");
  s.add("queries forwarded", forwarded);
  s.add("results", shared ? "every rank wrote its block of rows at its offset"
                          : "gathered and written by rank 0");
  s.add("total", slowest, "ms");
  s.add_note("",
             "wall clock; total: the slowest rank's build and search with its exchanges; "
             "context start-up (the slowest rank's) apart");
  std::vector<std::pair<std::string, Report>> items;
  std::vector<std::string> lines(stats.size());
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const mpi::RankStats& r = stats[i];
    const PartStats ps{r.device,           r.points,   r.home_queries, r.queries_forwarded,
                       r.queries_received, r.build_ms, r.search_ms};
    items.push_back(part_item("rank", r.rank, r.device, ps, lines[i]));
    items.back().second.add("exchange", r.exchange_ms, "ms");
    items.back().second.add("time", r.build_ms + r.total_ms, "ms");
    char buf[80];
    std::snprintf(buf, sizeof buf, ", exchange %.3f ms, time %.3f ms", r.exchange_ms,
                  r.build_ms + r.total_ms);
    lines[i] += buf;
  }
  s.add_list("per rank", std::move(items), lines);
  report.add_section("search", std::move(s));
  return slowest;
}

// A dense output every rank writes its rows of: the path ("" when not asked for), its columns
// (-1: one value a row, the hybrid counts) and type.
struct SharedOutput {
  std::string path;
  int cols;
  ArrayType type;
};

// Whether every dense output asked for can be written by every rank at once (regular .npy).
bool can_share(OutputSet& outputs, const std::vector<SharedOutput>& list) {
  bool any = false;
  for (const SharedOutput& o : list) {
    if (o.path.empty()) continue;
    if (!can_share_array(outputs, o.path)) return false;
    any = true;
  }
  return any;
}

void bcast_string(std::string& s) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(static_cast<std::size_t>(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
}

// Every rank writes its block of the rows into the outputs' temporaries, which rank 0 created
// with their full size; rank 0 finishes them once every rank has (the step's all-gather is the
// barrier), and its commit then puts them all in place. A failure on any rank fails every rank,
// and rank 0's output set removes the temporaries. Returns the exit code of the first failure,
// or 0.
int write_shared(int& failed, bool json, mpi::DistributedIndex& index, const mpi::RankRows& mine,
                 std::int64_t rows, std::optional<OutputSet>& outputs,
                 const std::vector<SharedOutput>& list) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::string> temporaries(list.size());
  if (mpi_step(failed, json, [&] {
        if (rank != 0) return;
        for (std::size_t i = 0; i < list.size(); ++i)
          if (!list[i].path.empty())
            temporaries[i] =
                begin_shared_array(*outputs, list[i].path, rows, list[i].cols, list[i].type);
      }))
    return failed;
  for (std::string& t : temporaries) bcast_string(t);
  if (mpi_step(failed, json, [&] {
        // Replicas answered their blocks already.
        const mpi::RankBlock block =
            index.replicated() ? mpi::RankBlock{} : index.redistribute(mine, rows);
        const KnnResult& r = index.replicated() ? mine.result : block.result;
        const std::int64_t first = index.replicated() ? mine.first : block.first;
        const std::vector<std::int32_t> counts =
            list.size() > 2 ? row_counts(r) : std::vector<std::int32_t>();
        const void* data[3] = {r.indices.data(), r.sqdist.data(), counts.data()};
        for (std::size_t i = 0; i < list.size(); ++i) {
          if (list[i].path.empty()) continue;
          SharedArrayWriter w(temporaries[i], list[i].path, rows, list[i].cols, list[i].type);
          w.write_rows(first, r.rows, data[i]);
          w.finish();
        }
      }))
    return failed;
  return mpi_step(failed, json, [&] {
    if (rank != 0) return;
    for (const SharedOutput& o : list)
      if (!o.path.empty()) finish_shared_array(*outputs, o.path);
  });
}

// Radius results as their three .npy files, written by every rank as write_shared writes dense
// rows: the rows redistributed into one block per rank, each block's pairs at the sum of the
// pairs before it (an exclusive scan), its offsets made global; the last rank writes the final
// offset. `counted` (rank 0): the counted offsets, whose total sizes the files.
int write_shared_radius(int& failed, bool json, mpi::DistributedIndex& index, mpi::RankRadius& mine,
                        std::int64_t rows, const RadiusResult& counted,
                        std::optional<OutputSet>& outputs, const std::string& out) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::string> temporaries(3);
  std::int64_t total = rank == 0 ? counted.offsets.back() : 0;
  if (mpi_step(failed, json, [&] {
        if (rank != 0) return;
        const std::vector<std::string> files = outputs->files(out);
        temporaries[0] = begin_shared_array(*outputs, files[0], rows + 1, -1, ArrayType::int64);
        temporaries[1] = begin_shared_array(*outputs, files[1], total, -1, ArrayType::int32);
        temporaries[2] = begin_shared_array(*outputs, files[2], total, -1, ArrayType::float32);
      }))
    return failed;
  for (std::string& t : temporaries) bcast_string(t);
  MPI_Bcast(&total, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (mpi_step(failed, json, [&] {
        mpi::RankRadiusBlock block = index.replicated()
                                         ? mpi::RankRadiusBlock{mine.first, std::move(mine.result)}
                                         : index.redistribute(mine, rows);
        RadiusResult& r = block.result;
        std::int64_t pairs = r.offsets.back(), base = 0;
        MPI_Exscan(&pairs, &base, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) base = 0;  // MPI_Exscan leaves rank 0's undefined
        PCNN_EXPECTS(base + pairs <= total, "the ranks found more radius pairs than they counted");
        for (std::int64_t& o : r.offsets) o += base;
        SharedArrayWriter off(temporaries[0], out, rows + 1, -1, ArrayType::int64),
            idx(temporaries[1], out, total, -1, ArrayType::int32),
            d2(temporaries[2], out, total, -1, ArrayType::float32);
        off.write_rows(block.first, r.rows + (rank == size - 1 ? 1 : 0), r.offsets.data());
        idx.write_rows(base, pairs, r.indices.data());
        d2.write_rows(base, pairs, r.sqdist.data());
        for (SharedArrayWriter* w : {&off, &idx, &d2}) w->finish();
      }))
    return failed;
  return mpi_step(failed, json, [&] {
    if (rank != 0) return;
    for (const std::string& f : outputs->files(out)) finish_shared_array(*outputs, f);
  });
}

// `pcnn knn` (knn given) or `pcnn radius` (radius given) under mpirun: every rank reads the
// inputs and owns one spatial part; rank 0 gathers the rows, writes and reports.
int run_mpi(const SearchOptions& opt, const KnnCommand* knn, const RadiusCommand* radius) {
  const MpiSession session;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const bool hybrid = radius && radius->max_nn > 0;
  const int k = knn ? knn->k : (hybrid ? radius->max_nn : 1);  // dense rows: k or max_nn
  const bool dense = knn || hybrid;
  int failed = 0;
  std::optional<OutputSet> outputs;  // rank 0 alone writes
  Inputs in;
  std::optional<Report> report;
  std::int64_t rows = 0;
  // Dense rows written by every rank at their offsets (regular .npy files, no --compare-cpu),
  // else gathered on rank 0 which writes them.
  int shared = 0;
  std::vector<SharedOutput> shared_outputs;
  if (dense) {
    shared_outputs.push_back({opt.out, k, ArrayType::int32});
    shared_outputs.push_back({opt.distances, k, ArrayType::float32});
    if (radius) shared_outputs.push_back({radius->counts, -1, ArrayType::int32});
  }
  // 1. Options, outputs (rank 0), inputs (every rank reads them whole).
  if (mpi_step(failed, opt.mode.json, [&] {
        PCNN_EXPECTS(opt.devices.empty() && opt.tiles == 0 && opt.max_device_memory == 0,
                     "--devices, --tiles and --max-device-memory are for one process; under "
                     "mpirun each rank uses one device (--layout: a spatial part or a replica)");
        parse_layout(opt.layout);
        if (radius) validate_radius(radius->radius);
        validate_before_loading(opt, k, false);
        if (rank == 0)
          outputs.emplace(plan_outputs(opt, dense ? OutputKind::array : OutputKind::radius,
                                       radius ? radius->counts : ""));
        in = load_inputs(opt);
        validate_knn_args(in.pcl_ref_view(), in.pcl_qv(), {k, opt.exclude_self});
        rows = in.qv() ? in.qv()->count : in.ref_view.count;
        if (rank == 0) {
          const char* results = knn ? "kNN results" : "hybrid results";
          if (dense) {
            plan_dense(opt, *outputs, rows, k, radius ? radius->counts : "", results);
            shared = !opt.compare_cpu && can_share(*outputs, shared_outputs);
            if (!shared) check_held(rows, k, results, "rank 0 gathers the rows and");
          } else if (!opt.compare_cpu && !opt.out.empty()) {
            shared = 1;  // radius results as the three .npy files
            for (const std::string& f : outputs->files(opt.out))
              shared = shared && can_share_array(*outputs, f);
          }
          report.emplace(start_report(knn ? "knn" : "radius", opt, in));
          if (knn) {
            report->add("k", k);
          } else {
            report->add_bool("hybrid", hybrid);
            report->add("radius", radius->radius);
            if (hybrid) report->add("max nn", k);
          }
        }
      }))
    return failed;
  MPI_Bcast(&shared, 1, MPI_INT, 0, MPI_COMM_WORLD);
  // 2. The distributed index and search; rank 0 gathers every row (or every rank writes its own).
  IndexOptions o;
  mpi::RankRows mine;
  std::optional<mpi::DistributedIndex> index;
  KnnResult result;
  HybridResult capped;
  RadiusRun rr;
  std::vector<mpi::RankStats> stats;
  if (mpi_step(failed, opt.mode.json, [&] {
        o.backend = resolve_backend(opt, rank != 0);
        o.staging = parse_staging(opt.staging);
        o.chunk_rows = opt.chunk_rows;
      }))
    return failed;
  if (mpi_step(failed, opt.mode.json, [&] {
        index.emplace(MPI_COMM_WORLD, in.ref_view, o, false, parse_layout(opt.layout));
        if (knn) {
          const KnnParams params{k, opt.exclude_self};
          mine = in.qv() ? index->knn(*in.qv(), params) : index->self_knn(params);
          if (!shared) result = index->gather(mine, rows, 0);
        } else if (hybrid) {
          const HybridParams hp{radius->radius, k, opt.exclude_self};
          mine = in.qv() ? index->hybrid(*in.qv(), hp) : index->self_hybrid(hp);
          if (!shared) capped.knn = index->gather(mine, rows, 0);
          if (!shared && rank == 0) capped.counts = row_counts(capped.knn);
        } else {
          const RadiusParams rp{radius->radius, opt.exclude_self};
          rr.result = index->gather(
              in.qv() ? index->radius_count(*in.qv(), rp) : index->self_radius_count(rp), rows, 0);
        }
      }))
    return failed;
  if (radius && !hybrid) {
    // The counts on rank 0 decide, before any pair is found, whether the results can be held.
    if (mpi_step(failed, opt.mode.json, [&] {
          if (rank == 0) check_held_radius(*radius, *outputs, rr.result, "the ranks");
        }))
      return failed;
    mpi::RankRadius pairs;
    if (mpi_step(failed, opt.mode.json, [&] {
          const RadiusParams rp{radius->radius, opt.exclude_self};
          pairs = in.qv() ? index->radius(*in.qv(), rp) : index->self_radius(rp);
          if (!shared) rr.result = index->gather(pairs, rows, 0);
        }))
      return failed;
    // Shared: rank 0 keeps the counted offsets for the summary; the pairs go to the files.
    rr.streamed = shared;
    if (shared && write_shared_radius(failed, opt.mode.json, *index, pairs, rows, rr.result,
                                      outputs, opt.out))
      return failed;
  }
  if (mpi_step(failed, opt.mode.json, [&] { stats = index->all_stats(); })) return failed;
  if (shared && dense &&
      write_shared(failed, opt.mode.json, *index, mine, rows, outputs, shared_outputs))
    return failed;
  // 3. Rank 0: the summary, the comparison, the outputs.
  int code = kExitOk;
  if (mpi_step(failed, opt.mode.json, [&] {
        if (rank != 0) return;
        const double total =
            ranks_section(*report, o.backend, stats, size, shared, index->replicated());
        code = knn ? compare_and_write(*knn, *outputs, in, *report, result, total, shared)
                   : compare_and_write_radius(*radius, *outputs, in, *report, rr, capped,
                                              shared && hybrid, total);
      }))
    return failed;
  // Every rank returns rank 0's verdict (6 when --compare-cpu found a difference).
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

}  // namespace

int run_knn_mpi(const KnnCommand& cmd) { return run_mpi(cmd, &cmd, nullptr); }
int run_radius_mpi(const RadiusCommand& cmd) { return run_mpi(cmd, nullptr, &cmd); }

}  // namespace pcnn::app
#else
namespace pcnn::app {
namespace {
[[noreturn]] void no_mpi() {
  throw error(
      "this pcnn was built without MPI: under mpirun every rank would search the whole cloud "
      "and write the same outputs (rebuild with libopenmpi-dev installed)");
}
}  // namespace
int run_knn_mpi(const KnnCommand&) { no_mpi(); }
int run_radius_mpi(const RadiusCommand&) { no_mpi(); }
}  // namespace pcnn::app
#endif
