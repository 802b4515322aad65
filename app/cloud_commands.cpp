#include "cloud_commands.hpp"

#include <Eigen/Eigenvalues>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "device_start.hpp"
#include "knn_command.hpp"
#include "pcnn/device.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/index.hpp"
#include "pcnn/io.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/smooth.hpp"
#include "pcnn/stats.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/smooth_reference.hpp"
#include "pcnn/testing/stats_reference.hpp"
#include "report.hpp"

namespace pcnn::app {
namespace {

// Whether to run on the GPU, adding the `device` row to the report. Its start-up (context and
// modules) begins on a thread, to overlap the load (see load).
bool want_gpu(const std::string& device, bool quiet, Report& r) {
  const std::optional<DeviceInfo> dev = choose_device(device, quiet);
  add_device(r, dev ? &*dev : nullptr);
  if (dev) start_device_early(dev->ordinal);
  return dev.has_value();
}

// The cloud a command reads, with progress shown on a terminal while it loads; then, for a GPU
// command (`gpu`), the end of the device's start-up that want_gpu began.
Cloud load(const std::string& input, const std::string& format, bool keep_fields, bool quiet,
           double& load_ms, bool gpu) {
  check_input_format(input, format);
  const auto t0 = std::chrono::steady_clock::now();
  Cloud c;
  {
    Progress p("loading " + input, -1, "", Progress::wanted(quiet));
    c = load_cloud(input, nullptr, keep_fields, parse_format(format));
  }
  load_ms = ms_since(t0);
  if (gpu) device_startup(0);
  return c;
}

// The outputs of a cloud command, checked before the cloud is loaded: known formats, writable
// directories, none the same file as the input or another output.
OutputSet plan_outputs(const std::string& input, const std::string& cloud_out,
                       const std::string& indices_out, bool json, bool csv_streams = false) {
  OutputSet outputs;
  outputs.prefer_csv_streams(csv_streams);
  outputs.add_input(input);
  if (json) outputs.reserve_stdout("--json");
  outputs.add(cloud_out, OutputKind::cloud);
  if (!indices_out.empty()) outputs.add(indices_out, OutputKind::array);
  return outputs;
}

std::vector<double> triple(const std::array<double, 3>& v) { return {v[0], v[1], v[2]}; }

}  // namespace

int run_stats(const StatsCommand& cmd) {
  Report r;
  r.add("command", "stats");
  // --device cuda without a usable GPU fails before loading.
  const bool gpu = want_gpu(cmd.device, cmd.mode.quiet, r);
  double load_ms = 0;
  Cloud cloud = load(cmd.input, cmd.format, /*keep_fields=*/false, cmd.mode.quiet, load_ms, gpu);
  CloudStats s = gpu ? gpu_cloud_stats(cloud.view()) : reference_cloud_stats(cloud.view());
  // Back to the file's coordinates: the statistics were taken around the origin.
  for (int a = 0; a < 3; ++a) {
    s.min[a] += cloud.origin[a];
    s.max[a] += cloud.origin[a];
    s.centroid[a] += cloud.origin[a];
  }
  r.add_section("cloud", describe_cloud(cloud));
  r.set_float_data(cloud.coordinate_type == "float32");
  r.add("load", load_ms, "ms");
  r.add("finite points", static_cast<double>(s.finite));
  if (s.finite > 0) {  // no bounds without a finite point
    r.add_vector("min", triple(s.min));
    r.add_vector("max", triple(s.max));
    r.add_vector("extent", triple({s.max[0] - s.min[0], s.max[1] - s.min[1], s.max[2] - s.min[2]}));
    r.add_vector("centroid", triple(s.centroid));
  }
  Report cov;
  const char* names[6] = {"xx", "xy", "xz", "yy", "yz", "zz"};
  for (int i = 0; i < 6; ++i) cov.add(names[i], s.covariance[i]);
  r.add_section("covariance", std::move(cov));
  if (s.finite > 0) {
    Eigen::Matrix3d m;
    m << s.covariance[0], s.covariance[1], s.covariance[2], s.covariance[1], s.covariance[3],
        s.covariance[4], s.covariance[2], s.covariance[4], s.covariance[5];
    const Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> eig(m);
    std::vector<std::pair<std::string, Report>> axes;  // largest spread first
    std::vector<std::string> lines;
    for (int i = 2; i >= 0; --i) {
      const Eigen::Vector3d v = eig.eigenvectors().col(i);
      const double sigma = std::sqrt(std::max(0.0, eig.eigenvalues()[i]));
      Report axis;
      axis.add("sigma", sigma);
      axis.add("variance", eig.eigenvalues()[i]);
      axis.add_vector("direction", {v[0], v[1], v[2]});
      char buf[200];
      std::snprintf(buf, sizeof buf, "sigma %.6f along (%.4f, %.4f, %.4f)", sigma, v[0], v[1],
                    v[2]);
      lines.push_back(buf);
      axes.emplace_back("axis " + std::to_string(3 - i), std::move(axis));
    }
    r.add_list("main axes", std::move(axes), lines);
  }
  if (s.finite > 1) {  // nearest-neighbor spacing
    const KnnParams p{1, true};
    IndexOptions o;
    o.backend = gpu ? Backend::cuda : Backend::cpu;
    const PointsView view = search_views(cloud, nullptr).first;  // exact as stored
    const KnnResult nn = Index(view, o).self_knn(p);
    // In double from the coordinates (std::hypot: no square to overflow or underflow): the
    // rows' float squared distances are 0 below ~1e-23 and lose bits in float's denormals.
    std::vector<double> spacing(static_cast<std::size_t>(nn.rows), NAN);
    const auto coord = [&](std::int64_t i, int a) {
      const std::int64_t at = i * view.stride + a;
      return view.data64 ? view.data64[at] : static_cast<double>(view.data[at]);
    };
    for (std::int64_t i = 0; i < nn.rows; ++i) {
      const std::int32_t j = nn.indices[static_cast<std::size_t>(i)];
      if (j < 0) continue;
      double d[3];
      for (int a = 0; a < 3; ++a) d[a] = coord(i, a) - coord(j, a);
      spacing[static_cast<std::size_t>(i)] = std::hypot(d[0], d[1], d[2]);
    }
    const ValueStats v = reference_value_stats(spacing.data(), nn.rows);
    Report sp;
    sp.add("min", v.min);
    sp.add("mean", v.mean);
    sp.add("max", v.max);
    sp.add("stddev", v.stddev);
    r.add_section("nearest-neighbor spacing", std::move(sp));
  }
  r.add("reduction (device)", gpu ? double(s.device_ms) : NAN, "ms");
  emit(r, cmd.mode);
  return kExitOk;
}

void check_filter_options(const FilterCommand& cmd, const std::vector<std::string>& given) {
  const bool sor = cmd.method == "sor";
  for (const std::string& o : given) {
    const bool sor_only = o == "--mean-k" || o == "--std-mul";
    const bool ror_only = o == "--radius" || o == "--min-neighbors";
    if ((sor && ror_only) || (!sor && sor_only))
      throw error(o + " applies to filter " + (sor ? "ror" : "sor") + ", not to filter " +
                  cmd.method);
  }
  if (!sor && cmd.radius <= 0) throw error("filter ror needs --radius (a positive distance)");
  if (sor)
    validate(SorParams{cmd.mean_k, cmd.std_mul});
  else
    validate(RorParams{cmd.radius, cmd.min_neighbors});
  check_input_format(cmd.input, cmd.format);
  if (cmd.compare_cpu) refuse_compare_on_cpu(cmd.device, "filter");
}

int run_filter(const FilterCommand& cmd) {
  OutputSet outputs =
      plan_outputs(cmd.input, cmd.out, cmd.kept_indices, cmd.mode.json, cmd.csv_streams);
  Report r;
  r.add("command", "filter");
  r.add("method", cmd.method);
  const bool gpu = want_gpu(cmd.device, cmd.mode.quiet, r);
  double load_ms = 0;
  const Cloud cloud =
      load(cmd.input, cmd.format, /*keep_fields=*/true, cmd.mode.quiet, load_ms, gpu);
  const bool sor = cmd.method == "sor";
  const SorParams sp{cmd.mean_k, cmd.std_mul};
  const RorParams rp{cmd.radius, cmd.min_neighbors};
  r.add_section("cloud", describe_cloud(cloud));
  r.set_float_data(cloud.coordinate_type == "float32");
  r.add("load", load_ms, "ms");
  if (sor) {
    r.add("mean_k", cmd.mean_k);
    r.add("std_mul", cmd.std_mul);
  } else {
    r.add("radius", cmd.radius);
    r.add("min_neighbors", cmd.min_neighbors);
  }
  FilterResult result;
  Progress progress("filtering", -1, "", Progress::wanted(cmd.mode.quiet));
  if (gpu) {
    result = sor ? gpu_statistical_outlier_removal(cloud.view(), sp)
                 : gpu_radius_outlier_removal(cloud.view(), rp);
    Report g;
    g.add("neighbor search", result.search_ms, "ms");
    g.add("statistics and decision", result.filter_ms, "ms");
    g.add("total", double(result.search_ms) + result.filter_ms, "ms");
    r.add_section("gpu", std::move(g));
  }
  int exit_code = kExitOk;
  if (!gpu || cmd.compare_cpu) {
    double ms = 0;
    FilterResult cpu = sor ? pcl_statistical_outlier_removal(cloud.view(), sp, &ms)
                           : pcl_radius_outlier_removal(cloud.view(), rp, &ms);
    Report c;
    c.add("method", sor ? "pcl::StatisticalOutlierRemoval" : "pcl::RadiusOutlierRemoval");
    c.add("total", ms, "ms");
    if (gpu) {
      const bool same = cpu.kept == result.kept;
      c.add_bool("same points kept", same);
      if (!same) exit_code = kExitDisagree;
      r.add("speedup", ms / (double(result.search_ms) + result.filter_ms), "x");
    } else {
      result = std::move(cpu);
    }
    r.add_section("cpu", std::move(c));
  }
  progress.finish();
  if (sor) {
    r.add("mean distance", result.mean);
    r.add("stddev", result.stddev);
    r.add("threshold", result.threshold);
  }
  r.add("kept", static_cast<double>(result.kept.size()));
  r.add("removed",
        static_cast<double>(cloud.size() - static_cast<std::int64_t>(result.kept.size())));
  if (gpu) r.add("borderline", static_cast<double>(result.borderline));
  save_cloud_subset(outputs, cloud, result.kept, cmd.out);
  r.add("written to", cmd.out);
  r.add_note("", "every field of the input, for the points kept");
  if (!cmd.kept_indices.empty()) {
    write_vector(outputs, cmd.kept_indices, result.kept.data(),
                 static_cast<std::int64_t>(result.kept.size()), "index");
    r.add("kept indices written to", cmd.kept_indices);
  }
  outputs.commit();
  emit(r, cmd.mode);
  return exit_code;
}

int run_smooth(const SmoothCommand& cmd) {
  check_input_format(cmd.input, cmd.format);
  if (cmd.compare_cpu) refuse_compare_on_cpu(cmd.device, "smoothing");
  OutputSet outputs = plan_outputs(cmd.input, cmd.out, "", cmd.mode.json);
  // Both methods' parameters are checked before loading (which one applies depends on the cloud).
  OrganizedSmoothParams op;
  UnorganizedSmoothParams up;
  op.stencil = parse_stencil(cmd.stencil);
  op.value = cmd.value == "z" ? SmoothValue::z : SmoothValue::range;
  op.depth_jump = cmd.depth_jump;
  op.max_move = cmd.max_move;
  validate(op);
  up.k = cmd.k;
  up.lambda = cmd.lambda;
  up.mu = cmd.mu;
  up.iterations = cmd.iterations;
  up.weights = cmd.weights == "distance" ? UnorganizedSmoothParams::Weights::distance
                                         : UnorganizedSmoothParams::Weights::rank;
  up.max_move = cmd.max_move;
  validate(up);
  Report r;
  r.add("command", "smooth");
  const bool gpu = want_gpu(cmd.device, cmd.mode.quiet, r);
  double load_ms = 0;
  const Cloud cloud =
      load(cmd.input, cmd.format, /*keep_fields=*/true, cmd.mode.quiet, load_ms, gpu);
  const bool organized = cloud.height > 1;
  // Which method applies depends on the cloud: the other method's options are refused.
  const auto& wrong = organized ? cmd.unorganized_options : cmd.organized_options;
  if (!wrong.empty())
    throw error(wrong.front() + " applies to " + (organized ? "unorganized" : "organized") +
                " clouds; '" + cloud.path + "' is " +
                (organized ? "organized (" + std::to_string(cloud.width) + " x " +
                                 std::to_string(cloud.height) + ")"
                           : "unorganized"));
  if (organized) {
    for (int a = 0; a < 3; ++a)  // rays from the file's (0, 0, 0), in re-centered coordinates
      op.sensor[a] = static_cast<float>(-cloud.origin[a]);
    validate(op);
  }
  r.add_section("cloud", describe_cloud(cloud));
  r.set_float_data(cloud.coordinate_type == "float32");
  r.add("load", load_ms, "ms");
  const int w = static_cast<int>(cloud.width), h = static_cast<int>(cloud.height);
  Report m;
  std::string method;
  if (organized) {
    char jump[64] = "";
    if (op.depth_jump > 0) std::snprintf(jump, sizeof jump, ", depth jump %g", op.depth_jump);
    method = "stencil " + cmd.stencil + " on " + cmd.value + jump;
    m.add("kind", "stencil");
    m.add("stencil", cmd.stencil);
    m.add("value", cmd.value);
    m.add("depth jump", op.depth_jump);
  } else {
    method = std::string(cmd.mu != 0 ? "Taubin" : "Laplacian") + ", k = " + std::to_string(cmd.k) +
             ", " + std::to_string(cmd.iterations) + " iterations, " + cmd.weights + " weights";
    m.add("kind", cmd.mu != 0 ? "taubin" : "laplacian");
    m.add("k", cmd.k);
    m.add("iterations", cmd.iterations);
    m.add("lambda", cmd.lambda);
    m.add("mu", cmd.mu);
    m.add("weights", cmd.weights);
  }
  m.add("max move", cmd.max_move);
  r.add_object("method", std::move(m), method);
  Progress progress("smoothing", -1, "", Progress::wanted(cmd.mode.quiet));
  std::vector<float> result;
  double gpu_total = 0;
  if (gpu) {
    SmoothTimings t;
    result = organized ? gpu_smooth_organized(cloud.view(), w, h, op, &t)
                       : gpu_smooth_unorganized(cloud.view(), up, &t);
    gpu_total = double(t.upload_ms) + t.knn_ms + t.smooth_ms + t.download_ms;
    Report g;
    g.add("upload", t.upload_ms, "ms");
    if (!organized) g.add("neighbor search", t.knn_ms, "ms");
    g.add(organized && t.separable ? "smooth (separable)" : "smooth", t.smooth_ms, "ms");
    g.add("download", t.download_ms, "ms");
    g.add("total", gpu_total, "ms");
    g.add_note("", "device time by CUDA events");
    r.add_section("gpu", std::move(g));
  }
  int exit_code = kExitOk;
  if (!gpu || cmd.compare_cpu) {
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<float> cpu;
    if (organized) {
      cpu = reference_smooth_organized(cloud.view(), w, h, op);
    } else {
      // The exact neighbors from the CPU backend (ties to the smaller index, as on the GPU; PCL
      // breaks ties its own way, and a different neighbor moves a point differently).
      IndexOptions on_cpu;
      on_cpu.backend = Backend::cpu;
      const KnnResult nb = Index(cloud.view(), on_cpu).self_knn(KnnParams{up.k, true});
      if (gpu) {
        // Neighbors at equal distance (up to rounding) may be listed either way, and a different
        // neighbor moves a point differently: check the GPU's lists against these, tie-aware,
        // then smooth over the GPU's lists (the ones gpu_smooth_unorganized used) to compare
        // the smoothing itself.
        IndexOptions on_gpu;
        on_gpu.backend = Backend::cuda;
        const KnnResult gpu_nb = Index(cloud.view(), on_gpu).self_knn(KnnParams{up.k, true});
        const KnnAgreement ag = compare_knn(cloud.view(), nullptr, gpu_nb, nb, true);
        r.add("neighbor lists agreeing (tie-aware)",
              100.0 * double(ag.agreeing_rows) / double(std::max<std::int64_t>(ag.rows, 1)), "%");
        if (!ag.all_agree()) exit_code = kExitDisagree;
        cpu = reference_smooth_unorganized(cloud.view(), gpu_nb, up);
      } else {
        cpu = reference_smooth_unorganized(cloud.view(), nb, up);
      }
    }
    const double cpu_ms = ms_since(t1);
    Report c;
    c.add("method", organized ? "pcnn CPU reference (1 thread)"
                              : "pcnn CPU backend kNN + pcnn CPU reference (1 thread)");
    c.add("total", cpu_ms, "ms");
    if (gpu) {
      double worst = 0;
      std::int64_t differing = 0;
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        if (std::isnan(cpu[i]) != std::isnan(result[i])) {
          ++differing;
          continue;
        }
        if (std::isnan(cpu[i])) continue;
        const double d = std::fabs(double(cpu[i]) - result[i]);
        worst = std::max(worst, d);
        differing += d > 1e-5 * std::max(1.0, std::fabs(double(cpu[i])));
      }
      c.add("max difference", worst);
      c.add("values differing by more than 1e-5 (relative)", static_cast<double>(differing));
      if (differing > 0) exit_code = kExitDisagree;
      r.add("speedup", cpu_ms / gpu_total, "x");
    } else {
      result = std::move(cpu);
    }
    r.add_section("cpu", std::move(c));
  }
  progress.finish();
  double moved = 0;
  for (std::int64_t i = 0; i < cloud.size(); ++i) {
    if (std::isnan(result[i * 3])) continue;
    const double dx = result[i * 3] - cloud.xyz[i * 3],
                 dy = result[i * 3 + 1] - cloud.xyz[i * 3 + 1],
                 dz = result[i * 3 + 2] - cloud.xyz[i * 3 + 2];
    moved = std::max(moved, std::sqrt(dx * dx + dy * dy + dz * dz));
  }
  r.add("largest move", moved);
  save_cloud_moved(outputs, cloud, result, cmd.out);
  outputs.commit();
  r.add("written to", cmd.out);
  r.add_note("", organized ? "organized, every field of the input" : "every field of the input");
  emit(r, cmd.mode);
  return exit_code;
}

}  // namespace pcnn::app
