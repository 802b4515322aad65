#include "knn_command.hpp"

#include <chrono>
#include <cstdio>
#include <optional>

#include "pcnn/baseline.hpp"
#include "pcnn/device.hpp"
#include "pcnn/io.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/reference.hpp"
#include "report.hpp"

namespace pcnn::app {

int run_knn(const KnnCommand& cmd) {
  const KnnParams params{cmd.k, cmd.exclude_self};
  const auto t_load = std::chrono::steady_clock::now();
  const Cloud refs = load_cloud(cmd.input, nullptr, /*keep_fields=*/false);
  std::optional<Cloud> queries;
  if (!cmd.query.empty()) queries = load_cloud(cmd.query, &refs.origin, /*keep_fields=*/false);
  const double load_ms = ms_since(t_load);
  const PointsView ref_view = refs.view();
  const PointsView query_view = queries ? queries->view() : PointsView{};
  const PointsView* qv = queries ? &query_view : nullptr;
  validate_knn_args(ref_view, qv, params);  // fail on bad options before any device work

  bool use_gpu = cmd.device != "cpu";
  const DeviceInfo dev = query_device();
  if (use_gpu && !dev.available) {
    if (cmd.device == "cuda") throw no_device_error("no usable CUDA device: " + dev.reason);
    std::fprintf(stderr, "pcnn: no usable CUDA device (%s); running on the CPU\n",
                 dev.reason.c_str());
    use_gpu = false;
  }

  Report report;
  report.add("command", "knn");
  report.add("k", cmd.k);
  report.add("exclude self", cmd.exclude_self ? "yes" : "no");
  report.add_section("references", describe_cloud(refs));
  if (queries) report.add_section("queries", describe_cloud(*queries));
  report.add("load", load_ms, "ms");

  KnnResult result;
  double gpu_total = 0;
  if (use_gpu) {
    Report g;
    g.add("device",
          dev.name + " (sm_" + std::to_string(dev.cc_major) + std::to_string(dev.cc_minor) + ")");
    g.add("context start-up", initialize_device(dev.ordinal), "ms");
    GpuKnnTimings t;
    result = gpu_knn(ref_view, qv, params, parse_algorithm(cmd.algorithm), &t);
    gpu_total = double(t.upload_ms) + t.build_ms + t.search_ms + t.download_ms;
    g.add("algorithm", to_string(t.algorithm));
    g.add("upload", t.upload_ms, "ms");
    g.add(t.algorithm == Algorithm::grid ? "build index" : "prepare", t.build_ms, "ms");
    g.add("search", t.search_ms, "ms");
    g.add("download", t.download_ms, "ms");
    g.add("total", gpu_total, "ms");
    if (t.algorithm == Algorithm::grid)
      g.add("outlier queries", static_cast<double>(t.outlier_queries));
    g.add_note("", "device time by CUDA events; start-up is not in the total");
    report.add_section("gpu", std::move(g));
  }

  KnnResult cpu_result;
  const bool run_cpu = !use_gpu || cmd.compare_cpu;
  int exit_code = kExitOk;
  if (run_cpu) {
    CpuKnnTimings t;
    cpu_result = pcl_knn(ref_view, qv, params, &t);
    Report c;
    c.add("method", "PCL KdTreeFLANN, " + std::to_string(t.threads) + " threads");
    c.add("build", t.build_ms, "ms");
    c.add("query", t.query_ms, "ms");
    c.add("total", t.build_ms + t.query_ms, "ms");
    report.add_section("cpu", std::move(c));
    if (use_gpu) {
      report.add("speedup", (t.build_ms + t.query_ms) / gpu_total, "x");
      report.add_note("", "speedup = CPU total / GPU total");
      const KnnAgreement ag = compare_knn(ref_view, qv, result, cpu_result, cmd.exclude_self);
      Report a;
      a.add("rows", static_cast<double>(ag.rows));
      a.add("agreeing rows", static_cast<double>(ag.agreeing_rows));
      a.add("agreeing percent", ag.rows ? 100.0 * ag.agreeing_rows / ag.rows : 100.0, "%");
      a.add("identical rows", static_cast<double>(ag.identical_rows));
      a.add("max sqdist difference", ag.max_abs_sqdist_diff);
      if (!ag.all_agree()) a.add("first difference", ag.first_problem);
      a.add_note("", "tie-aware: indices may differ only between neighbors at equal distance");
      report.add_section("agreement with CPU", std::move(a));
      if (!ag.all_agree()) exit_code = kExitDisagree;
    } else {
      result = std::move(cpu_result);
    }
  }

  if (!cmd.out.empty()) write_array(cmd.out, result.indices.data(), result.rows, result.k, "n");
  if (!cmd.distances.empty())
    write_array(cmd.distances, result.sqdist.data(), result.rows, result.k, "d");
  if (!cmd.out.empty()) report.add("indices written to", cmd.out);
  if (!cmd.distances.empty()) report.add("squared distances written to", cmd.distances);

  report.print_table(stderr);
  if (cmd.json) std::printf("%s\n", report.json().c_str());
  return exit_code;
}

}  // namespace pcnn::app
