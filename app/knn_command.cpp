#include "knn_command.hpp"

#include <chrono>
#include <cstdio>
#include <optional>

#include <algorithm>
#include <vector>

#include "pcnn/device.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/index.hpp"
#include "pcnn/io.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/reference.hpp"
#include "report.hpp"

namespace pcnn::app {
namespace {

// The clouds a search command reads: references and, optionally, queries re-centered on the
// references' origin.
struct Inputs {
  Cloud refs;
  std::optional<Cloud> queries;
  double load_ms = 0;
  PointsView ref_view, query_view;
  const PointsView* qv() const { return queries ? &query_view : nullptr; }
};

// Every output of a search command, checked before anything is loaded or searched: known
// formats, writable directories, none the same file as an input or another output.
OutputSet plan_outputs(const SearchOptions& opt, OutputKind out_kind,
                       const std::string& counts = "") {
  OutputSet outputs;
  outputs.add_input(opt.input);
  if (!opt.query.empty()) outputs.add_input(opt.query);
  if (opt.json) outputs.reserve_stdout("--json");
  if (!opt.out.empty()) outputs.add(opt.out, out_kind);
  if (!opt.distances.empty()) outputs.add(opt.distances, OutputKind::array);
  if (!counts.empty()) outputs.add(counts, OutputKind::array);
  return outputs;
}

// The search arguments that do not depend on the clouds, checked before they are loaded.
void validate_before_loading(const SearchOptions& opt, int k) {
  const PointsView none{};
  validate_knn_args(none, opt.query.empty() ? nullptr : &none, {k, opt.exclude_self});
}

Inputs load_inputs(const SearchOptions& opt) {
  Inputs in;
  const auto t0 = std::chrono::steady_clock::now();
  in.refs = load_cloud(opt.input, nullptr, /*keep_fields=*/false);
  if (!opt.query.empty()) in.queries = load_cloud(opt.query, &in.refs.origin, false);
  in.load_ms = ms_since(t0);
  in.ref_view = in.refs.view();
  if (in.queries) in.query_view = in.queries->view();
  return in;
}

Report start_report(const char* command, const SearchOptions& opt, const Inputs& in) {
  Report report;
  report.add("command", command);
  report.add("exclude self", opt.exclude_self ? "yes" : "no");
  report.add_section("references", describe_cloud(in.refs));
  if (in.queries) report.add_section("queries", describe_cloud(*in.queries));
  report.add("load", in.load_ms, "ms");
  return report;
}

// The index every search command runs on: the backend from --device (auto: the GPU when one is
// usable, else the CPU backend), the device's start-up reported apart, the memory cap as the
// index's memory resource. Builds over the references; fills the section's first rows.
Backend resolve_backend(const SearchOptions& opt, bool quiet = false) {
  Backend b = parse_backend(opt.device);
  if (b == Backend::automatic) {
    const DeviceInfo dev = query_device();
    b = dev.available ? Backend::cuda : Backend::cpu;
    if (!dev.available && !quiet)
      std::fprintf(stderr, "pcnn: no usable CUDA device (%s); running on the CPU\n",
                   dev.reason.c_str());
  }
  return b;
}

Index build_index(const SearchOptions& opt, const Inputs& in, Report& s) {
  IndexOptions o;
  o.backend = resolve_backend(opt);
  if (o.backend == Backend::cuda) {
    const DeviceInfo dev = query_device();
    if (!dev.available) throw no_device_error("no usable CUDA device: " + dev.reason);
    s.add("device",
          dev.name + " (sm_" + std::to_string(dev.cc_major) + std::to_string(dev.cc_minor) + ")");
    s.add("context start-up", initialize_device(dev.ordinal), "ms");
    if (opt.max_device_memory > 0) {
      o.memory = make_limited_pool_resource(opt.max_device_memory);
      s.add("device memory limit", static_cast<double>(opt.max_device_memory), "bytes");
    }
  } else {
    s.add("device", "cpu");
  }
  o.staging = parse_staging(opt.staging);
  o.chunk_rows = opt.chunk_rows;
  Index index(o);
  index.build(in.ref_view);
  const SearchTimings& b = index.last_timings();
  if (b.backend == Backend::cuda) {
    s.add("staging", to_string(b.staging));
    s.add("upload references", b.upload_ms, "ms");
  }
  s.add("build index", b.build_ms, "ms");
  return index;
}

// The search's parts after the build; returns the whole (build + search) in milliseconds.
double finish_search_section(Report& s, const SearchTimings& build, const SearchTimings& t) {
  if (t.backend == Backend::cuda) {
    s.add("upload queries", t.upload_ms, "ms");
    s.add("order queries", t.build_ms, "ms");
    s.add("search", t.search_ms, "ms");
    s.add("download", t.download_ms, "ms");
    if (t.download_ms > 0)
      s.add("download rate", t.download_bytes / (double(t.download_ms) * 1e6), "GB/s");
    if (t.passes > 1) s.add("passes", t.passes);
    if (t.distance_evaluations > 0)
      s.add("distance evaluations", static_cast<double>(t.distance_evaluations));
  } else {
    s.add("search", t.search_ms, "ms");
  }
  const double total = build.total_ms + t.total_ms;
  s.add("total", total, "ms");
  s.add_note("", t.backend == Backend::cuda
                     ? "parts: device time (CUDA events); total: wall clock of build and search, "
                       "from points in host memory to results in host memory, start-up apart"
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

void write_dense(OutputSet& outputs, const SearchOptions& opt, const KnnResult& r, Report& report) {
  if (!opt.out.empty()) write_array(outputs, opt.out, r.indices.data(), r.rows, r.k, "n");
  if (!opt.distances.empty())
    write_array(outputs, opt.distances, r.sqdist.data(), r.rows, r.k, "d");
  if (!opt.out.empty()) report.add("indices written to", opt.out);
  if (!opt.distances.empty()) report.add("squared distances written to", opt.distances);
}

int finish(const SearchOptions& opt, Report& report, int exit_code) {
  report.print_table(stderr);
  if (opt.json) std::printf("%s\n", report.json().c_str());
  return exit_code;
}

// The end of every kNN run: the CPU comparison (--compare-cpu), the outputs (unless they were
// streamed already), the summary. `total` is pcnn's build + search wall clock.
int compare_and_write(const KnnCommand& cmd, OutputSet& outputs, const Inputs& in, Report& report,
                      const KnnResult& result, double total, bool streamed) {
  const KnnParams params{cmd.k, cmd.exclude_self};
  int exit_code = kExitOk;
  if (cmd.compare_cpu) {
    CpuKnnTimings ct;
    const KnnResult cpu_result = pcl_knn(in.ref_view, in.qv(), params, &ct);
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
  if (streamed) {
    if (!cmd.out.empty()) report.add("indices written to", cmd.out);
    if (!cmd.distances.empty()) report.add("squared distances written to", cmd.distances);
  } else {
    write_dense(outputs, cmd, result, report);
  }
  outputs.commit();
  return finish(cmd, report, exit_code);
}

// One process, several spatial parts: one per device searched at once (--devices), or `tiles`
// searched one after the other through one device (--tiles, or references larger than the
// device memory allowed). The rows are byte-identical to one index's.
int run_knn_parts(const KnnCommand& cmd, OutputSet& outputs, const Inputs& in, Report& report,
                  int tiles) {
  const KnnParams params{cmd.k, cmd.exclude_self};
  PartitionedOptions po;
  po.index.backend = resolve_backend(cmd, tiles > 0 && cmd.devices.empty());
  po.index.staging = parse_staging(cmd.staging);
  po.index.chunk_rows = cmd.chunk_rows;
  if (!cmd.devices.empty()) po.devices = parse_devices(cmd.devices, po.index.backend);
  po.tiles = tiles;
  po.max_device_memory = cmd.max_device_memory;
  Report s;
  if (po.index.backend == Backend::cuda) {
    double startup = 0;
    std::string names;
    for (int d : po.devices.empty() ? std::vector<int>{0} : po.devices) {
      const DeviceInfo dev = query_device(d);
      if (!dev.available) throw no_device_error("no usable CUDA device: " + dev.reason);
      names += (names.empty() ? "" : ", ") + std::to_string(d) + ": " + dev.name;
      startup += initialize_device(d);
    }
    s.add("devices", names);
    s.add("context start-up", startup, "ms");
    if (cmd.max_device_memory > 0)
      s.add("device memory limit", static_cast<double>(cmd.max_device_memory), "bytes");
  } else {
    s.add("device", "cpu");
  }
  PartitionedIndex index(in.ref_view, po);
  const KnnResult result = in.qv() ? index.knn(*in.qv(), params) : index.self_knn(params);
  const PartitionedTimings& t = index.last_timings();
  s.add(tiles > 0 ? "tiles" : "parts", index.parts());
  s.add("partition", t.partition_ms, "ms");
  s.add("build index", t.build_ms, "ms");
  s.add("home search", t.home_ms, "ms");
  s.add("boundary search and merge", t.boundary_ms, "ms");
  s.add("queries forwarded", static_cast<double>(t.queries_forwarded));
  s.add("total", t.total_ms, "ms");
  s.add_note("", tiles > 0 ? "wall clock; total: build and search of every tile, partition apart"
                           : "wall clock; total: build and search, parts at once, partition apart");
  for (std::size_t p = 0; p < t.parts.size(); ++p) {
    const PartStats& ps = t.parts[p];
    Report r;
    if (po.index.backend == Backend::cuda) r.add("device", ps.device);
    r.add("points", static_cast<double>(ps.points));
    r.add("home queries", static_cast<double>(ps.home_queries));
    r.add("queries forwarded", static_cast<double>(ps.queries_forwarded));
    r.add("queries received", static_cast<double>(ps.queries_received));
    r.add("build", ps.build_ms, "ms");
    r.add("search", ps.search_ms, "ms");
    s.add_section((tiles > 0 ? "tile " : "part ") + std::to_string(p), std::move(r));
  }
  report.add_section("search", std::move(s));
  return compare_and_write(cmd, outputs, in, report, result, t.total_ms, false);
}

}  // namespace

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

int run_knn(const KnnCommand& cmd) {
  const KnnParams params{cmd.k, cmd.exclude_self};
  validate_before_loading(cmd, cmd.k);
  OutputSet outputs = plan_outputs(cmd, OutputKind::array);
  const Inputs in = load_inputs(cmd);
  validate_knn_args(in.ref_view, in.qv(), params);  // bad options fail before any device work
  Report report = start_report("knn", cmd, in);
  report.add("k", cmd.k);

  if (!cmd.devices.empty() || cmd.tiles > 0)
    return run_knn_parts(cmd, outputs, in, report, cmd.tiles);
  Report s;
  std::optional<Index> built;
  try {
    built.emplace(build_index(cmd, in, s));
  } catch (const out_of_memory_error&) {
    // References larger than the device memory allowed: tiles of the index streamed through the
    // device, twice as many until one fits.
    if (cmd.max_device_memory <= 0 || resolve_backend(cmd, true) != Backend::cuda) throw;
    for (int tiles = 2;; tiles *= 2) {
      try {
        return run_knn_parts(cmd, outputs, in, report, tiles);
      } catch (const out_of_memory_error&) {
        if (tiles >= 1024) throw;
      }
    }
  }
  Index& index = *built;
  const SearchTimings build = index.last_timings();
  const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
  // Results go straight to the output files chunk by chunk when asked to (--chunk-rows) or when
  // they are large (over 1 GB), unless the CPU comparison needs them all.
  const bool streamed =
      !cmd.compare_cpu && (cmd.chunk_rows > 0 || rows * cmd.k * 8 > (std::int64_t(1) << 30));
  KnnResult result;
  SearchTimings t;
  if (streamed) {
    std::optional<ArrayStreamWriter> out_idx, out_dist;
    if (!cmd.out.empty()) out_idx.emplace(outputs, cmd.out, rows, cmd.k, false, "n");
    if (!cmd.distances.empty()) out_dist.emplace(outputs, cmd.distances, rows, cmd.k, true, "d");
    const std::int64_t chunk = cmd.chunk_rows > 0 ? cmd.chunk_rows : std::int64_t(1) << 22;
    std::vector<std::int32_t> idx;
    std::vector<float> dist;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t a = 0; a < rows; a += chunk) {
      const std::int64_t n = std::min(chunk, rows - a);
      idx.resize(static_cast<std::size_t>(n) * cmd.k);
      dist.resize(idx.size());
      const MatrixView<std::int32_t> iv{idx.data(), n, cmd.k};
      const MatrixView<float> dv{dist.data(), n, cmd.k};
      if (in.qv()) {
        const PointsView q{in.query_view.data + a * in.query_view.stride, n, in.query_view.stride};
        index.knn(q, params, iv, dv);
      } else {
        index.self_knn_rows(a, params, iv, dv);
      }
      const SearchTimings& c = index.last_timings();
      t.backend = c.backend;
      t.upload_ms += c.upload_ms;
      t.build_ms += c.build_ms;
      t.search_ms += c.search_ms;
      t.download_ms += c.download_ms;
      t.download_bytes += c.download_bytes;
      t.distance_evaluations += c.distance_evaluations;
      if (out_idx) out_idx->append(idx.data(), n);
      if (out_dist) out_dist->append(dist.data(), n);
    }
    t.passes = static_cast<int>((rows + chunk - 1) / chunk);
    t.total_ms = ms_since(t0);
    if (out_idx) out_idx->finish();
    if (out_dist) out_dist->finish();
    s.add("results", "streamed to the outputs chunk by chunk");
  } else {
    result = in.qv() ? index.knn(*in.qv(), params) : index.self_knn(params);
    t = index.last_timings();
  }
  const double total = finish_search_section(s, build, t);
  report.add_section("search", std::move(s));
  return compare_and_write(cmd, outputs, in, report, result, total, streamed);
}

namespace {

// Radius results: OUT.offsets.npy, OUT.indices.npy, OUT.sqdist.npy, or one CSV of pairs.
void write_csr(OutputSet& outputs, const SearchOptions& opt, const RadiusResult& r,
               Report& report) {
  if (opt.out.empty()) return;
  write_radius(outputs, opt.out, r.offsets.data(), r.rows, r.indices.data(), r.sqdist.data());
  const auto files = outputs.files(opt.out);
  if (files.size() == 1) {
    report.add("pairs written to", opt.out);
    return;
  }
  std::string written;
  for (const auto& f : files) written += (written.empty() ? "" : ", ") + f;
  report.add("written", written);
}

Report radius_agreement_section(const RadiusAgreement& ag) {
  return agreement_section(
      ag,
      [&](Report& a) { a.add("points on the boundary", static_cast<double>(ag.boundary_points)); },
      "a point may differ only within float rounding of r (PCL decides in float)");
}

}  // namespace

int run_radius(const RadiusCommand& cmd) {
  const bool hybrid = cmd.max_nn > 0;
  validate_radius(cmd.radius);
  validate_before_loading(cmd, hybrid ? cmd.max_nn : 1);
  OutputSet outputs =
      plan_outputs(cmd, hybrid ? OutputKind::array : OutputKind::radius, cmd.counts);
  const Inputs in = load_inputs(cmd);
  validate_knn_args(in.ref_view, in.qv(), {hybrid ? cmd.max_nn : 1, cmd.exclude_self});
  Report report = start_report(hybrid ? "radius (hybrid)" : "radius", cmd, in);
  report.add("radius", cmd.radius);
  if (hybrid) report.add("max nn", cmd.max_nn);

  Report s;
  Index index = build_index(cmd, in, s);
  const SearchTimings build = index.last_timings();
  RadiusResult radius;
  HybridResult capped;
  const HybridParams hp{cmd.radius, cmd.max_nn, cmd.exclude_self};
  const RadiusParams rp{cmd.radius, cmd.exclude_self};
  if (hybrid)
    capped = in.qv() ? index.hybrid(*in.qv(), hp) : index.self_hybrid(hp);
  else
    radius = in.qv() ? index.radius(*in.qv(), rp) : index.self_radius(rp);
  const double total = finish_search_section(s, build, index.last_timings());
  report.add_section("search", std::move(s));
  int exit_code = kExitOk;
  if (cmd.compare_cpu) {
    CpuKnnTimings t;
    RadiusResult cpu_radius;
    HybridResult cpu_capped;
    if (hybrid)
      cpu_capped = pcl_hybrid(in.ref_view, in.qv(), hp, &t);
    else
      cpu_radius = pcl_radius(in.ref_view, in.qv(), rp, &t);
    report.add_section("cpu baseline", cpu_section("PCL KdTreeFLANN radiusSearch", t));
    report.add("speedup", (t.build_ms + t.query_ms) / total, "x");
    report.add_note("", "speedup = CPU baseline total / pcnn total");
    const RadiusAgreement ag = hybrid ? compare_hybrid(in.ref_view, in.qv(), capped, cpu_capped,
                                                       cmd.radius, cmd.exclude_self)
                                      : compare_radius(in.ref_view, in.qv(), radius, cpu_radius,
                                                       cmd.radius, cmd.exclude_self);
    report.add_section("agreement with CPU", radius_agreement_section(ag));
    if (!ag.all_agree()) exit_code = kExitDisagree;
  }
  if (hybrid) {
    write_dense(outputs, cmd, capped.knn, report);
    if (!cmd.counts.empty()) {
      write_array(outputs, cmd.counts, capped.counts.data(), capped.knn.rows, 1, "count");
      report.add("counts written to", cmd.counts);
    }
  } else {
    std::int64_t longest = 0;
    for (std::int64_t q = 0; q < radius.rows; ++q) longest = std::max(longest, radius.count(q));
    report.add("neighbors found", static_cast<double>(radius.offsets.back()));
    report.add("mean per query",
               radius.rows ? double(radius.offsets.back()) / double(radius.rows) : 0.0);
    report.add("most for one query", static_cast<double>(longest));
    write_csr(outputs, cmd, radius, report);
  }
  outputs.commit();
  return finish(cmd, report, exit_code);
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
int mpi_step(int& failed, F&& f) {
  int mine = failed;
  if (mine == 0) {
    try {
      f();
    } catch (const mpi::peer_failure&) {
      mine = -1;
    } catch (...) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      mine = report_error(std::current_exception(), "pcnn (rank " + std::to_string(rank) + ")");
      if (mine == 0) mine = kExitInternal;
    }
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  failed = 0;
  for (int c : all)
    if (c > 0) {
      failed = c;
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

int run_knn_mpi(const KnnCommand& cmd) {
  const MpiSession session;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const KnnParams params{cmd.k, cmd.exclude_self};
  int failed = 0;
  std::optional<OutputSet> outputs;  // rank 0 alone writes
  Inputs in;
  std::optional<Report> report;
  // 1. Options, outputs (rank 0), inputs (every rank reads them whole).
  if (mpi_step(failed, [&] {
        PCNN_EXPECTS(cmd.devices.empty() && cmd.tiles == 0 && cmd.max_device_memory == 0,
                     "--devices, --tiles and --max-device-memory are for one process; under "
                     "mpirun each rank owns one part on one device");
        validate_before_loading(cmd, cmd.k);
        if (rank == 0) outputs.emplace(plan_outputs(cmd, OutputKind::array));
        in = load_inputs(cmd);
        validate_knn_args(in.ref_view, in.qv(), params);
        if (rank == 0) {
          report.emplace(start_report("knn", cmd, in));
          report->add("k", cmd.k);
        }
      }))
    return failed;
  // 2. The distributed index and search; rank 0 gathers every row.
  IndexOptions o;
  std::optional<mpi::DistributedIndex> index;
  KnnResult result;
  std::vector<mpi::RankStats> stats;
  if (mpi_step(failed, [&] {
        o.backend = resolve_backend(cmd, rank != 0);
        o.staging = parse_staging(cmd.staging);
        o.chunk_rows = cmd.chunk_rows;
      }))
    return failed;
  if (mpi_step(failed, [&] {
        index.emplace(MPI_COMM_WORLD, in.ref_view, o);
        const mpi::RankRows mine = in.qv() ? index->knn(*in.qv(), params) : index->self_knn(params);
        const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
        result = index->gather(mine, rows, 0);
        stats = index->all_stats();
      }))
    return failed;
  // 3. Rank 0: the summary, the comparison, the outputs.
  int code = kExitOk;
  if (mpi_step(failed, [&] {
        if (rank != 0) return;
        Report s;
        s.add("ranks", size);
        s.add("device", o.backend == Backend::cuda ? "cuda (one device per rank)" : "cpu");
        double slowest = 0, forwarded = 0;
        for (const mpi::RankStats& r : stats) {
          slowest = std::max(slowest, r.build_ms + r.total_ms);
          forwarded += static_cast<double>(r.queries_forwarded);
        }
        s.add("queries forwarded", forwarded);
        s.add("total", slowest, "ms");
        s.add_note("", "wall clock; total: the slowest rank's build and search with its exchanges");
        for (const mpi::RankStats& r : stats) {
          Report rr;
          if (r.device >= 0) rr.add("device", r.device);
          rr.add("points", static_cast<double>(r.points));
          rr.add("home queries", static_cast<double>(r.home_queries));
          rr.add("queries forwarded", static_cast<double>(r.queries_forwarded));
          rr.add("queries received", static_cast<double>(r.queries_received));
          rr.add("build", r.build_ms, "ms");
          rr.add("search", r.search_ms, "ms");
          rr.add("exchange", r.exchange_ms, "ms");
          rr.add("time", r.build_ms + r.total_ms, "ms");
          s.add_section("rank " + std::to_string(r.rank), std::move(rr));
        }
        report->add("ranks", size);
        report->add_section("search", std::move(s));
        code = compare_and_write(cmd, *outputs, in, *report, result, slowest, false);
      }))
    return failed;
  // Every rank returns rank 0's verdict (6 when --compare-cpu found a difference).
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

}  // namespace pcnn::app
#else
namespace pcnn::app {
int run_knn_mpi(const KnnCommand&) {
  throw error(
      "this pcnn was built without MPI: under mpirun every rank would search the whole cloud "
      "and write the same outputs (rebuild with libopenmpi-dev installed)");
}
}  // namespace pcnn::app
#endif
