#include "knn_command.hpp"

#include <chrono>
#include <cstdio>
#include <optional>

#include <algorithm>
#include <vector>

#include "pcnn/device.hpp"
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

}  // namespace

Index build_index(const SearchOptions& opt, PointsView refs, Report& s) {
  IndexOptions o;
  o.backend = parse_backend(opt.device);
  if (o.backend == Backend::automatic) {
    const DeviceInfo dev = query_device();
    o.backend = dev.available ? Backend::cuda : Backend::cpu;
    if (!dev.available)
      std::fprintf(stderr, "pcnn: no usable CUDA device (%s); running on the CPU\n",
                   dev.reason.c_str());
  }
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

  Report s;
  Index index = build_index(cmd, in.ref_view, s);
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
  Index index = build_index(cmd, in.ref_view, s);
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
