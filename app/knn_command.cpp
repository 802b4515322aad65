#include "knn_command.hpp"

#include <chrono>
#include <cstdio>
#include <optional>

#include "pcnn/baseline.hpp"
#include "pcnn/device.hpp"
#include "pcnn/io.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/radius.hpp"
#include "pcnn/reference.hpp"
#include "pcnn/session.hpp"
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

// Whether the GPU runs (with --device auto, only when one is usable), and the device.
bool want_gpu(const SearchOptions& opt, DeviceInfo& dev) {
  dev = query_device();
  if (opt.device == "cpu") return false;
  if (dev.available) return true;
  if (opt.device == "cuda") throw no_device_error("no usable CUDA device: " + dev.reason);
  std::fprintf(stderr, "pcnn: no usable CUDA device (%s); running on the CPU\n",
               dev.reason.c_str());
  return false;
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

// The device, its start-up (kept out of the total) and the memory cap, before the search.
Report start_gpu_section(const SearchOptions& opt, const DeviceInfo& dev) {
  Report g;
  g.add("device",
        dev.name + " (sm_" + std::to_string(dev.cc_major) + std::to_string(dev.cc_minor) + ")");
  g.add("context start-up", initialize_device(dev.ordinal), "ms");
  if (opt.max_device_memory > 0) {
    set_device_memory_limit(opt.max_device_memory);
    g.add("device memory limit", static_cast<double>(opt.max_device_memory), "bytes");
  }
  return g;
}

// The parts of a GPU search; returns the total.
double finish_gpu_section(Report& g, const GpuKnnTimings& t) {
  const double total = double(t.upload_ms) + t.build_ms + t.search_ms + t.download_ms;
  g.add("algorithm", to_string(t.algorithm));
  g.add("upload", t.upload_ms, "ms");
  g.add(t.algorithm == Algorithm::grid ? "build index" : "prepare", t.build_ms, "ms");
  g.add("search", t.search_ms, "ms");
  g.add("download", t.download_ms, "ms");
  g.add("total", total, "ms");
  if (t.passes > 1) g.add("passes", t.passes);
  if (t.algorithm == Algorithm::grid && t.outlier_queries > 0)
    g.add("outlier queries", static_cast<double>(t.outlier_queries));
  g.add_note("", "device time by CUDA events; start-up is not in the total");
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
  DeviceInfo dev;
  const bool use_gpu = want_gpu(cmd, dev);
  Report report = start_report("knn", cmd, in);
  report.add("k", cmd.k);

  KnnResult result;
  double gpu_total = 0;
  bool streamed = false;
  const Staging staging = parse_staging(cmd.staging);
  Algorithm algorithm = parse_algorithm(cmd.algorithm);
  if (algorithm == Algorithm::automatic)
    algorithm = choose_algorithm(in.ref_view.count, in.qv() ? in.qv()->count : in.ref_view.count);
  const bool session_path =
      algorithm == Algorithm::grid && (staging != Staging::pageable || cmd.chunk_rows > 0);
  if (use_gpu && !session_path) {
    Report g = start_gpu_section(cmd, dev);
    GpuKnnTimings t;
    result = gpu_knn(in.ref_view, in.qv(), params, algorithm, &t);
    g.add("staging", "pageable");
    gpu_total = finish_gpu_section(g, t);
    report.add_section("gpu", std::move(g));
  } else if (use_gpu) {
    // The session: staged transfers, chunks over two streams (download overlapping search).
    Report g = start_gpu_section(cmd, dev);
    KnnSession session({staging, cmd.chunk_rows});
    SessionTimings rt, qt;
    session.set_reference(in.ref_view, &rt);
    const std::int64_t rows = in.qv() ? in.qv()->count : in.ref_view.count;
    // Results streamed chunk by chunk into the output files when asked to (--chunk-rows) or when
    // they are large (over 1 GB), unless the CPU comparison needs them all.
    streamed =
        !cmd.compare_cpu && (cmd.chunk_rows > 0 || rows * cmd.k * 8 > (std::int64_t(1) << 30));
    if (streamed) {
      std::optional<ArrayStreamWriter> out_idx, out_dist;
      if (!cmd.out.empty()) out_idx.emplace(outputs, cmd.out, rows, cmd.k, false, "n");
      if (!cmd.distances.empty()) out_dist.emplace(outputs, cmd.distances, rows, cmd.k, true, "d");
      session.query_stream(
          in.qv(), params,
          [&](std::int64_t, const KnnView& v) {
            if (out_idx) out_idx->append(v.indices, v.rows);
            if (out_dist) out_dist->append(v.sqdist, v.rows);
          },
          &qt);
      if (out_idx) out_idx->finish();
      if (out_dist) out_dist->finish();
      result.rows = rows;
      result.k = cmd.k;
    } else {
      const KnnView v = session.query(in.qv(), params, &qt);
      result.rows = v.rows;
      result.k = v.k;
      result.indices.assign(v.indices, v.indices + v.rows * v.k);
      result.sqdist.assign(v.sqdist, v.sqdist + v.rows * v.k);
    }
    g.add("algorithm", "grid");
    g.add("staging", to_string(session.staging()));
    g.add("upload", double(rt.upload_ms) + qt.upload_ms, "ms");
    const double up_bytes = double(rt.upload_bytes + qt.upload_bytes);
    const double up_ms = double(rt.upload_ms) + qt.upload_ms;
    if (up_ms > 0) g.add("upload rate", up_bytes / (up_ms * 1e6), "GB/s");
    g.add("build index", rt.build_ms, "ms");
    g.add("search", qt.search_ms, "ms");
    g.add("download", qt.download_ms, "ms");
    if (qt.download_ms > 0) g.add("download rate", qt.download_gbps(), "GB/s");
    g.add("chunks", qt.chunks);
    if (streamed) g.add("results", "streamed to the outputs chunk by chunk");
    gpu_total = rt.total_ms + qt.total_ms;
    g.add("total (wall, overlapped)", gpu_total, "ms");
    g.add_note("", "parts: device time by CUDA events; total: host clock to results in memory");
    report.add_section("gpu", std::move(g));
  }
  int exit_code = kExitOk;
  if (!use_gpu || cmd.compare_cpu) {
    CpuKnnTimings t;
    KnnResult cpu_result = pcl_knn(in.ref_view, in.qv(), params, &t);
    report.add_section("cpu", cpu_section("PCL KdTreeFLANN", t));
    if (use_gpu) {
      report.add("speedup", (t.build_ms + t.query_ms) / gpu_total, "x");
      report.add_note("", "speedup = CPU total / GPU total");
      const KnnAgreement ag =
          compare_knn(in.ref_view, in.qv(), result, cpu_result, cmd.exclude_self);
      report.add_section("agreement with CPU", knn_agreement_section(ag));
      if (!ag.all_agree()) exit_code = kExitDisagree;
    } else {
      result = std::move(cpu_result);
    }
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
  DeviceInfo dev;
  const bool use_gpu = want_gpu(cmd, dev);
  Report report = start_report(hybrid ? "radius (hybrid)" : "radius", cmd, in);
  report.add("radius", cmd.radius);
  if (hybrid) report.add("max nn", cmd.max_nn);

  RadiusResult radius;
  HybridResult capped;
  double gpu_total = 0;
  if (use_gpu) {
    Report g = start_gpu_section(cmd, dev);
    GpuKnnTimings t;
    if (hybrid)
      capped =
          gpu_hybrid_search(in.ref_view, in.qv(), {cmd.radius, cmd.max_nn, cmd.exclude_self}, &t);
    else
      radius = gpu_radius_search(in.ref_view, in.qv(), {cmd.radius, cmd.exclude_self}, &t);
    gpu_total = finish_gpu_section(g, t);
    report.add_section("gpu", std::move(g));
  }
  int exit_code = kExitOk;
  if (!use_gpu || cmd.compare_cpu) {
    CpuKnnTimings t;
    RadiusResult cpu_radius;
    HybridResult cpu_capped;
    if (hybrid)
      cpu_capped = pcl_hybrid(in.ref_view, in.qv(), {cmd.radius, cmd.max_nn, cmd.exclude_self}, &t);
    else
      cpu_radius = pcl_radius(in.ref_view, in.qv(), {cmd.radius, cmd.exclude_self}, &t);
    report.add_section("cpu", cpu_section("PCL KdTreeFLANN radiusSearch", t));
    if (use_gpu) {
      report.add("speedup", (t.build_ms + t.query_ms) / gpu_total, "x");
      report.add_note("", "speedup = CPU total / GPU total");
      const RadiusAgreement ag = hybrid ? compare_hybrid(in.ref_view, in.qv(), capped, cpu_capped,
                                                         cmd.radius, cmd.exclude_self)
                                        : compare_radius(in.ref_view, in.qv(), radius, cpu_radius,
                                                         cmd.radius, cmd.exclude_self);
      report.add_section("agreement with CPU", radius_agreement_section(ag));
      const bool agree = ag.all_agree();
      if (!agree) exit_code = kExitDisagree;
    } else {
      radius = std::move(cpu_radius);
      capped = std::move(cpu_capped);
    }
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
