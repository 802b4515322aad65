#include "normals_command.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "device_start.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/io.hpp"
#include "pcnn/normals.hpp"
#include "report.hpp"

namespace pcnn::app {
namespace {

// "X,Y,Z": three finite numbers.
std::array<double, 3> parse_viewpoint(const std::string& text) {
  const auto bad = [&] {
    return invalid_argument_error("--viewpoint needs three finite numbers X,Y,Z, got '" + text +
                                  "'");
  };
  if (!text.empty() && text.back() == ',') throw bad();  // getline drops an empty last item
  std::array<double, 3> v{};
  std::stringstream ss(text);
  std::string item;
  int n = 0;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (n >= 3 || item.empty() || *end != '\0' || !std::isfinite(x)) throw bad();
    v[n++] = x;
  }
  if (n != 3) throw bad();
  return v;
}

}  // namespace

CLI::App* add_normals_command(CLI::App& app, NormalsCommand& cmd) {
  CLI::App* c = app.add_subcommand(
      "normals",
      "surface normals and curvature (PCA of each neighborhood, as PCL's NormalEstimation), "
      "written with every field of the input");
  c->add_option("input", cmd.input, "cloud (.pcd or .ply; '-': stdin, with --format)")->required();
  add_input_format(c, cmd.format);
  auto* k =
      c->add_option("-k", cmd.k, "neighborhood: the k nearest points, itself included (3-128)");
  auto* r = c->add_option("-r,--radius", cmd.radius,
                          "neighborhood: every point within this distance, itself included");
  // The library reads a radius of 0 as "none given"; given here, it is a bad radius.
  r->check(CLI::Validator(
      [](std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return end != v.c_str() && *end == '\0' && x == 0
                   ? std::string("the radius must be a finite number > 0, got 0")
                   : std::string();
      },
      "", "nonzero"));
  k->excludes(r);
  c->add_option("--max-nn", cmd.max_nn,
                "with -r: only the nearest this many within the radius (3-128)")
      ->needs(r);
  c->add_option("-o,--out", cmd.out,
                "the cloud with normal_x normal_y normal_z curvature added (.pcd or .ply)")
      ->required();
  c->add_option("--viewpoint", cmd.viewpoint,
                "X,Y,Z in the file's coordinates: normals face it (default the origin, as "
                "PCL; negative values: --viewpoint=-1,0,2)")
      ->capture_default_str();
  c->add_option("--device", cmd.device,
                "auto (the GPU when one is usable, else the CPU), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  c->add_option("--staging", cmd.staging,
                "GPU transfers: auto, pageable, pinned, registered or mapped")
      ->check(CLI::IsMember({"auto", "pageable", "pinned", "registered", "mapped"}))
      ->capture_default_str();
  c->add_option("--max-device-memory", cmd.memory,
                "device memory pcnn may use (e.g. 2G, 512Mi): neighbor lists go in passes");
  c->add_flag("--json", cmd.mode.json, "print the summary as one JSON object on stdout");
  c->add_flag("-q,--quiet", cmd.mode.quiet, "no table on stderr");
  return c;
}

int run_normals(const NormalsCommand& cmd) {
  // Everything that does not depend on the cloud is checked before it is loaded.
  SearchOptions opt = cmd;
  if (!cmd.memory.empty()) opt.max_device_memory = parse_bytes(cmd.memory);
  check_search_options(opt);  // the input's format; GPU options not with --device cpu
  NormalParams params;
  params.k = cmd.k;
  params.radius = cmd.radius;
  params.max_nn = cmd.max_nn;
  const std::array<double, 3> viewpoint = parse_viewpoint(cmd.viewpoint);
  params.viewpoint = viewpoint;
  validate(params);
  OutputSet outputs;
  outputs.add_input(cmd.input);
  if (cmd.mode.json) outputs.reserve_stdout("--json");
  outputs.add(cmd.out, OutputKind::cloud);

  if (cmd.device != "cpu") {  // overlapping the load (device_start.hpp)
    const WarmUp kind = cmd.k > 0 ? WarmUp::knn : cmd.max_nn > 0 ? WarmUp::hybrid : WarmUp::radius;
    const int k = cmd.k > 0 ? cmd.k : cmd.max_nn;
    start_device_early(0, [kind, k] { warm_up(0, kind, k); });
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Cloud cloud =
      load_cloud(cmd.input, nullptr, /*keep_fields=*/true, parse_format(cmd.format));
  const double load_ms = ms_since(t0);
  for (int a = 0; a < 3; ++a)  // the index holds the cloud re-centered on its origin
    params.viewpoint[a] = viewpoint[a] - cloud.origin[a];

  Report r;
  r.add("command", "normals");
  r.add_section("cloud", describe_cloud(cloud));
  r.set_float_data(cloud.coordinate_type == "float32");
  r.add("load", load_ms, "ms");
  if (cmd.k > 0) r.add("k", cmd.k);
  if (cmd.radius > 0) r.add("radius", cmd.radius);
  if (cmd.max_nn > 0) r.add("max nn", cmd.max_nn);
  r.add_vector("viewpoint", {viewpoint[0], viewpoint[1], viewpoint[2]});

  Report s;
  Index index = build_index(opt, cloud.view(), r, s);
  const double build_ms = index.last_timings().total_ms;
  std::vector<float> normals(static_cast<std::size_t>(cloud.size()) * 3),
      curvature(static_cast<std::size_t>(cloud.size()));
  const NormalTimings t = estimate_normals(index, params, {normals.data(), cloud.size(), 3},
                                           {curvature.data(), cloud.size()});
  s.add("neighbor search", t.search_ms, "ms");
  s.add("normals", t.normals_ms, "ms");
  if (t.backend == Backend::cuda) s.add("download", t.download_ms, "ms");
  if (t.passes > 1) s.add("passes", t.passes);
  s.add("total", build_ms + t.total_ms, "ms");
  s.add_note("", t.backend == Backend::cuda
                     ? "parts: device time (CUDA events); total: wall clock of build, search and "
                       "normals, from points in host memory to normals in host memory, start-up "
                       "apart"
                     : "wall clock");
  r.add_section("normals", std::move(s));
  std::int64_t missing = 0;
  for (std::int64_t i = 0; i < cloud.size(); ++i) missing += std::isnan(normals[i * 3]) ? 1 : 0;
  r.add("points with a normal", static_cast<double>(cloud.size() - missing));
  r.add("points without a normal", static_cast<double>(missing));

  const auto t2 = std::chrono::steady_clock::now();
  const float* n = normals.data();
  save_cloud_with_fields(outputs, cloud,
                         {{"normal_x", n, 3},
                          {"normal_y", n + 1, 3},
                          {"normal_z", n + 2, 3},
                          {"curvature", curvature.data(), 1}},
                         cmd.out);
  outputs.commit();
  r.add("write", ms_since(t2), "ms");
  r.add("written to", cmd.out);
  r.add_note("", "every field of the input, and normal_x normal_y normal_z curvature");
  emit(r, cmd.mode);
  return kExitOk;
}

}  // namespace pcnn::app
