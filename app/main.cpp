// The pcnn command.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "../core/whole_number.hpp"
#include "cloud_commands.hpp"
#include "device_start.hpp"
#include "knn_command.hpp"
#include "normals_command.hpp"
#include "pcnn/device.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/io.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "report.hpp"

// The size of the last allocation that failed, for the "out of host memory" message (a
// std::bad_alloc carries none). The replaced operator new is the standard one otherwise.
namespace {
std::atomic<std::size_t> failed_allocation{0};
}  // namespace

void* operator new(std::size_t n) {
  for (;;) {
    if (void* p = std::malloc(n > 0 ? n : 1)) return p;
    if (std::new_handler h = std::get_new_handler()) {
      h();
      continue;
    }
    failed_allocation = n;
    throw std::bad_alloc();
  }
}
// The matching deletes (sanitizers check that what malloc gave, free takes back).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using namespace pcnn::app;

// --json and --quiet, which every command takes.
void add_output_mode(CLI::App* cmd, OutputMode& mode) {
  cmd->add_flag("--json", mode.json,
                "print the summary (or the error) as one JSON object on stdout");
  cmd->add_flag("-q,--quiet", mode.quiet, "no table and no progress on stderr");
}

// --stream-format, for commands that write arrays.
void add_stream_format(CLI::App* cmd, bool& csv) {
  cmd->add_option_function<std::string>(
         "--stream-format", [&csv](const std::string& f) { csv = f == "csv"; },
         "arrays written to '-' (stdout) or another stream (pipe, FIFO): npy (default) or csv")
      ->check(CLI::IsMember({"npy", "csv"}));
}

// Options every search command takes; `memory` receives --max-device-memory as typed.
void add_search_options(CLI::App* cmd, SearchOptions& o, std::string& memory) {
  cmd->add_option("input", o.input, "reference cloud (.pcd or .ply)")->required();
  cmd->add_option("--query", o.query, "separate query cloud (.pcd or .ply)");
  cmd->add_flag("--exclude-self", o.exclude_self, "a point is not its own neighbor");
  cmd->add_option("--device", o.device,
                  "auto (the GPU when one is usable, else the CPU; knn: the CPU too when the "
                  "search would end before a GPU's start-up), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--staging", o.staging,
                  "GPU transfers: auto (mapped on integrated GPUs; else, per transfer, pinned "
                  "below 8 MB and registered from 8 MB), pageable, pinned, registered or mapped "
                  "(zero-copy)")
      ->check(CLI::IsMember({"auto", "pageable", "pinned", "registered", "mapped"}))
      ->capture_default_str();
  cmd->add_option("--max-device-memory", memory,
                  "device memory pcnn may use (e.g. 2G, 512Mi): larger results go in passes");
  cmd->add_option("--chunk-rows", o.chunk_rows,
                  "rows per chunk; results are then streamed to the output files chunk by chunk "
                  "(automatic above a quarter of the host memory available for kNN and hybrid "
                  "results, half for radius results)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  cmd->add_flag("--compare-cpu", o.compare_cpu,
                "also run the CPU baseline (PCL's k-d tree on all cores), time it and compare");
  add_input_format(cmd, o.format);
  add_stream_format(cmd, o.csv_streams);
  add_output_mode(cmd, o.mode);
  cmd->add_option("--devices", o.devices,
                  "all or 0,1: several GPUs searched at once (see --layout; with --device cpu: "
                  "one spatial part per entry); the same rows as one device");
  cmd->add_option("--layout", o.layout,
                  "with --devices, or under mpirun: spatial (one spatial part per GPU or rank: "
                  "clouds larger than one GPU), replicated (every GPU or rank indexes the whole "
                  "cloud and searches its share of the rows) or auto (replicated on GPUs unless "
                  "--max-device-memory; under mpirun, where every rank's GPU holds the cloud)")
      ->check(CLI::IsMember({"auto", "spatial", "replicated"}));
  cmd->add_option("--tiles", o.tiles,
                  "the references in this many spatial parts searched one after the other "
                  "through the device (kNN: automatic when they exceed --max-device-memory)")
      ->check(CLI::Range(1, 4096));
}

struct GenerateCommand {
  std::string kind, out;
  long long n = 50000;
  unsigned long long seed = 1;
  int width = 640, height = 480;
  OutputMode mode;
};

int run_generate(const GenerateCommand& g) {
  pcnn::OutputSet outputs;  // checked before the cloud is made
  if (g.mode.json) outputs.reserve_stdout("--json");
  outputs.add(g.out, pcnn::OutputKind::cloud);
  const bool depth = g.kind == "depth";
  const std::vector<float> xyz =
      depth ? pcnn::make_depth_scene(g.width, g.height, 0.005, 0.02, g.seed)
            : pcnn::make_synthetic_cloud(pcnn::parse_synthetic_kind(g.kind), g.n, g.seed);
  pcnn::save_xyz(outputs, g.out, xyz, depth ? static_cast<std::uint32_t>(g.width) : 0);
  outputs.commit();
  const auto points = static_cast<long long>(xyz.size() / 3);
  if (!g.mode.quiet) {
    if (depth)
      std::fprintf(stderr, "pcnn: wrote %s %d x %d depth scene (seed %llu) to %s\n",
                   g.height > 1 ? "an organized" : "a", g.width, g.height, g.seed, g.out.c_str());
    else
      std::fprintf(stderr, "pcnn: wrote %s points (%s, seed %llu) to %s\n",
                   thousands(points).c_str(), g.kind.c_str(), g.seed, g.out.c_str());
  }
  if (g.mode.json) {
    Report r;
    r.add("command", "generate");
    r.add("kind", g.kind);
    r.add("points", static_cast<double>(points));
    r.add("seed", static_cast<double>(g.seed));
    r.add_bool("organized", depth && g.height > 1);  // as stats reads the file
    r.add("width", depth ? g.width : static_cast<double>(points));
    r.add("height", depth ? g.height : 1);
    r.add("written to", g.out);
    write_stdout(r.json() + "\n");
  }
  return kExitOk;
}

int run_devices(OutputMode mode) {
  const pcnn::DeviceInfo d = pcnn::query_device();
  Report r;
  r.add("command", "devices");
  r.add_bool("available", d.available);
  if (d.available) {
    add_device(r, &d);
    r.add("driver version", d.driver_version);
    r.add("runtime version", d.runtime_version);
  } else {
    r.add("reason", d.reason);
  }
  if (mode.json) {
    write_stdout(r.json() + "\n");
  } else if (!d.available) {
    write_stdout("no usable CUDA device: " + d.reason + "\n");
  } else {
    char line[512];
    std::snprintf(line, sizeof line,
                  "device %d: %s, compute capability %d.%d, %d multiprocessors, %.1f GiB%s\n",
                  d.ordinal, d.name.c_str(), d.cc_major, d.cc_minor, d.multiprocessors,
                  d.total_memory / 1073741824.0, d.integrated ? ", integrated" : "");
    write_stdout(line);
  }
  return d.available ? kExitOk : kExitDevice;
}

// The options of `cmd` among `names` that were given on the command line.
std::vector<std::string> given(CLI::App* cmd, std::initializer_list<const char*> names) {
  std::vector<std::string> out;
  for (const char* n : names)
    if (cmd->count(n) > 0) out.emplace_back(n);
  return out;
}

// An error: the message on stderr and, with --json, as one JSON object on stdout.
int fail(const std::string& message, int exit_code, const std::string& file, bool json,
         const char* prefix = "error") {
  print_error({message, exit_code, file, prefix}, "pcnn");
  if (json) {
    std::printf("%s\n", json_error(message, exit_code, file).c_str());
    std::fflush(stdout);
  }
  return exit_code;
}

// Whether this process is one of several ranks started by mpirun (Open MPI, or a PMI launcher).
int mpi_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

// Every option that takes a value, in every command, refuses an empty one: CLI11 took "" for an
// option not given (--query "" ran a self-search, -o "" wrote nothing, --devices "" used one
// device) or for 0 (-r "" searched a radius of 0), so an unset shell variable changed what ran.
void refuse_empty_values(CLI::App& app) {
  const CLI::Validator nonempty(
      [](std::string& v) {
        return v.empty() ? std::string("the value is empty (give one, or leave the option out)")
                         : std::string();
      },
      "", "nonempty");
  for (CLI::Option* o : app.get_options())
    if (o->get_expected_min() > 0) o->check(nonempty);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_values(*sub);
}

// Integer options read as decimal: CLI11 read "016" as octal (14), and refused "08", so
// zero-padded numbers, as scripts write them, changed what ran (or were checked against a range
// as octal). Before parsing, the leading zeros of the values of integer options are dropped
// ("0x" and other prefixes are left to CLI11's conversion).
std::vector<std::string> integers_as_decimal(CLI::App& app, int argc, char** argv) {
  const auto strip = [](std::string v) {
    const std::size_t sign = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
    std::size_t end = sign;
    while (end < v.size() && std::isdigit(static_cast<unsigned char>(v[end]))) ++end;
    if (end != v.size() || end - sign < 2) return v;  // not a zero-padded decimal
    const std::size_t first = v.find_first_not_of('0', sign);
    v.erase(sign, (first == std::string::npos ? v.size() - 1 : first) - sign);
    return v;
  };
  const auto integer = [](const CLI::Option* o) {
    if (!o) return false;  // the type's name, and its validators' after a ':'
    const std::string type = o->get_type_name().substr(0, o->get_type_name().find(':'));
    return type == "INT" || type == "UINT";
  };
  std::vector<std::string> args(argv, argv + argc);
  CLI::App* at = &app;  // the (sub)command whose options follow
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;  // positional arguments only from here
    const auto named = at->get_subcommands([&](CLI::App* sub) { return sub->check_name(a); });
    if (!named.empty()) {
      at = named.front();
      continue;
    }
    if (a.size() < 2 || a[0] != '-') continue;
    // The value of an option that takes one is never read as an option itself (-o -k010.npy).
    const auto takes_value = [](const CLI::Option* o) { return o && o->get_expected_min() > 0; };
    if (a[1] == '-') {  // --name=VALUE, or --name VALUE
      const std::size_t eq = a.find('=');
      if (eq != std::string::npos) {
        if (integer(at->get_option_no_throw(a.substr(0, eq))))
          a = a.substr(0, eq + 1) + strip(a.substr(eq + 1));
      } else if (const CLI::Option* o = at->get_option_no_throw(a);
                 takes_value(o) && i + 1 < args.size()) {
        if (integer(o)) args[i + 1] = strip(args[i + 1]);
        ++i;
      }
      continue;
    }
    // -k VALUE, -kVALUE, or flags and then one such option (-qk VALUE).
    for (std::size_t c = 1; c < a.size(); ++c) {
      const CLI::Option* o = at->get_option_no_throw(std::string("-") + a[c]);
      if (!o) break;
      if (!takes_value(o)) continue;  // a flag
      if (c + 1 < a.size()) {
        if (integer(o)) a = a.substr(0, c + 1) + strip(a.substr(c + 1));
      } else if (i + 1 < args.size()) {
        if (integer(o)) args[i + 1] = strip(args[i + 1]);
        ++i;
      }
      break;
    }
  }
  return args;
}

// Ctrl-C, kill, a closed terminal, a reader gone from a pipe pcnn writes messages to, or a CPU
// time limit end the process as they would, but first remove the temporaries of outputs not
// yet in place (hidden files, up to the whole result's size).
extern "C" void end_on_signal(int sig) {
  pcnn::remove_uncommitted_outputs();
  ::raise(sig);  // SA_RESETHAND restored the default action, which ends the process
}

// The reader of standard output went away (`pcnn ... -o - | head`): the library reports the
// write's EPIPE rather than dying of SIGPIPE, and the command then ends as Unix commands do, by
// that signal, silently (exit 141 in a shell) — unless SIGPIPE was not left to kill it.
void end_if_stdout_reader_gone(const std::string& message) {
  const std::string epipe = std::strerror(EPIPE);
  if (message.size() < epipe.size() ||
      message.compare(message.size() - epipe.size(), epipe.size(), epipe) != 0)
    return;  // another failure (a full disk...): reported
  struct stat st;
  pollfd out{1, 0, 0};
  struct sigaction action;
  if (fstat(1, &st) == 0 && S_ISFIFO(st.st_mode) && poll(&out, 1, 0) == 1 &&
      (out.revents & POLLERR) && sigaction(SIGPIPE, nullptr, &action) == 0 &&
      (action.sa_handler == SIG_DFL || action.sa_handler == end_on_signal))
    std::raise(SIGPIPE);
}

}  // namespace

pcnn::app::ErrorReport pcnn::app::describe_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const pcnn::input_error& e) {
    return {e.what(), kExitInput, e.path()};
  } catch (const pcnn::output_error& e) {
    end_if_stdout_reader_gone(e.what());
    return {e.what(), kExitOutput, e.path()};
  } catch (const pcnn::cuda_error& e) {
    return {e.what(), kExitDevice, ""};
  } catch (const pcnn::out_of_memory_error& e) {  // device or host: the message has the bytes
    return {e.what(), kExitDevice, ""};
  } catch (const pcnn::error& e) {
    return {e.what(), kExitUsage, ""};
  } catch (const std::bad_alloc&) {
    const std::size_t n = failed_allocation;
    return {n > 0 ? "out of host memory: " + std::to_string(n) + " bytes needed in one allocation"
                  : std::string("out of host memory"),
            kExitDevice, ""};
  } catch (const std::exception& e) {
    return {e.what(), kExitInternal, "", "internal error"};
  } catch (...) {
    return {"an exception that is not a std::exception", kExitInternal, "", "internal error"};
  }
}

void pcnn::app::print_error(const ErrorReport& e, const std::string& who) {
  std::fprintf(stderr, "%s: %s: %s\n", who.c_str(), e.prefix, e.message.c_str());
}

namespace {

void remove_temporaries_on_signals() {
  const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU};
  for (int sig : handled) {
    struct sigaction was {};
    if (::sigaction(sig, nullptr, &was) == 0 && was.sa_handler == SIG_IGN) continue;  // nohup
    struct sigaction sa {};
    sa.sa_handler = end_on_signal;
    sigemptyset(&sa.sa_mask);  // a second signal waits for the first's clean-up
    for (int other : handled) sigaddset(&sa.sa_mask, other);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

// Descriptors 0, 1 and 2 closed by the caller (`>&-`) are opened on /dev/null: otherwise the
// first file pcnn opens (an output's temporary) would take the number, and messages for stderr
// would be written into it. Stdout read-only, so that what is meant for it (--json, '-') still
// fails as on a closed descriptor; stderr writable (its messages were not wanted).
void open_missing_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int got = ::open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
      if (got >= 0 && got != fd) ::close(got);  // another thread took the number: leave it
    }
}

int run_command(int argc, char** argv) {
  open_missing_standard_descriptors();
  remove_temporaries_on_signals();
  // A file size limit (RLIMIT_FSIZE) then fails the write with EFBIG, reported as an output
  // error, instead of killing the process with a half-written temporary left behind.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"pcnn: exact nearest neighbors for point clouds on NVIDIA GPUs"};
  app.set_version_flag("--version", "pcnn 0.1.0");
  app.require_subcommand(1);

  KnnCommand knn;
  std::string knn_memory;
  auto* knn_cmd = app.add_subcommand("knn", "k nearest neighbors of every point (or query point)");
  add_search_options(knn_cmd, knn, knn_memory);
  knn_cmd->add_option("-k", knn.k, "neighbors per point (1-128)")->capture_default_str();
  knn_cmd->add_option("-o,--out", knn.out, "neighbor indices: .npy (int32, n x k) or .csv");
  knn_cmd->add_option("--distances", knn.distances,
                      "squared distances: .npy (float32, n x k) or .csv");

  RadiusCommand radius;
  std::string radius_memory;
  auto* radius_cmd = app.add_subcommand(
      "radius", "every neighbor within a radius (or, with --max-nn, the nearest ones within it)");
  add_search_options(radius_cmd, radius, radius_memory);
  radius_cmd->add_option("-r,--radius", radius.radius, "search radius (d^2 <= r^2 is inside)")
      ->required();
  radius_cmd->add_option("--max-nn", radius.max_nn,
                         "hybrid search: at most this many nearest within r (1-128), dense rows");
  radius_cmd->add_option(
      "-o,--out", radius.out,
      "radius: OUT.offsets.npy (int64, n+1), OUT.indices.npy (int32), OUT.sqdist.npy (float32), "
      "or OUT.csv with one query,neighbor,sqdist line per pair; with --max-nn: indices, n x "
      "max_nn (.npy or .csv)");
  radius_cmd->add_option("--distances", radius.distances,
                         "with --max-nn: squared distances, n x max_nn (.npy or .csv)");
  radius_cmd->add_option("--counts", radius.counts,
                         "with --max-nn: neighbors found per query (.npy int32 or .csv)");

  GenerateCommand gen;
  auto* gen_cmd = app.add_subcommand("generate", "write a synthetic cloud as binary PCD");
  gen_cmd
      ->add_option("kind", gen.kind,
                   pcnn::synthetic_kind_names() +
                       ", or depth (an organized depth-camera scene with noise, holes and depth "
                       "edges)")
      ->required()
      ->check([](const std::string& kind) -> std::string {
        if (kind == "depth") return {};
        try {
          pcnn::parse_synthetic_kind(kind);
          return {};
        } catch (const pcnn::error& e) {
          return e.what();
        }
      });
  auto* gen_width = gen_cmd->add_option("--width", gen.width, "depth: columns")
                        ->capture_default_str()
                        ->check(CLI::Range(1, 100000));
  auto* gen_height = gen_cmd->add_option("--height", gen.height, "depth: rows (> 1: organized)")
                         ->capture_default_str()
                         ->check(CLI::Range(1, 100000));
  auto* gen_points = gen_cmd->add_option("-n,--points", gen.n, "number of points (not depth)")
                         ->capture_default_str()
                         ->check(CLI::Range(0LL, 2147483647LL));
  gen_cmd->add_option("--seed", gen.seed, "random seed (0 to 2^53, exact in JSON)")
      ->capture_default_str()
      ->check(CLI::Range(0ULL, 1ULL << 53));
  gen_cmd->add_option("-o,--out", gen.out, "output .pcd or .ply ('-': stdout)")->required();
  add_output_mode(gen_cmd, gen.mode);

  StatsCommand stats;
  auto* stats_cmd = app.add_subcommand("stats", "count, bounds, centroid, covariance, spacing");
  stats_cmd->add_option("input", stats.input, "cloud (.pcd or .ply)")->required();
  stats_cmd->add_option("--device", stats.device, "auto, cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  add_input_format(stats_cmd, stats.format);
  add_output_mode(stats_cmd, stats.mode);

  FilterCommand filter;
  auto* filter_cmd = app.add_subcommand(
      "filter", "remove outliers as PCL does (sor: statistical, ror: radius), keeping every field");
  filter_cmd->add_option("method", filter.method, "sor or ror")
      ->required()
      ->check(CLI::IsMember({"sor", "ror"}));
  filter_cmd->add_option("input", filter.input, "cloud (.pcd or .ply)")->required();
  filter_cmd->add_option("-o,--out", filter.out, "filtered cloud (.pcd or .ply)")->required();
  filter_cmd->add_option("--mean-k", filter.mean_k, "sor: neighbors per point (1-128)")
      ->capture_default_str();
  filter_cmd->add_option("--std-mul", filter.std_mul, "sor: threshold = mean + std_mul * stddev")
      ->capture_default_str();
  filter_cmd->add_option("--radius", filter.radius, "ror: search radius");
  filter_cmd
      ->add_option("--min-neighbors", filter.min_neighbors,
                   "ror: other points needed within the radius (0-128)")
      ->capture_default_str();
  filter_cmd->add_option("--kept-indices", filter.kept_indices,
                         "also write the kept point indices (.npy int32 or .csv)");
  filter_cmd->add_option("--device", filter.device, "auto, cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  filter_cmd->add_flag("--compare-cpu", filter.compare_cpu,
                       "also run PCL's filter and check that the same points are kept");
  add_input_format(filter_cmd, filter.format);
  add_stream_format(filter_cmd, filter.csv_streams);
  add_output_mode(filter_cmd, filter.mode);

  SmoothCommand smooth;
  std::string taubin;
  auto* smooth_cmd = app.add_subcommand(
      "smooth",
      "smooth a cloud: a stencil over the grid of an organized cloud, Laplacian or Taubin "
      "smoothing over the k nearest neighbors of an unorganized one");
  smooth_cmd->add_option("input", smooth.input, "cloud (.pcd or .ply)")->required();
  smooth_cmd->add_option("-o,--out", smooth.out, "smoothed cloud (.pcd or .ply)")->required();
  smooth_cmd
      ->add_option("--stencil", smooth.stencil,
                   "organized: box:R, gaussian:R:SIGMA, list:c0,c1,... (separable taps) or "
                   "grid:c0,c1,... ((2R+1)^2 coefficients), R <= 7")
      ->capture_default_str();
  smooth_cmd->add_option("--depth-jump", smooth.depth_jump,
                         "organized: skip neighbors whose range differs by more (keeps edges)");
  smooth_cmd->add_option("--max-move", smooth.max_move, "no point moves farther than this");
  smooth_cmd->add_option("--value", smooth.value, "organized: smooth the range or z")
      ->check(CLI::IsMember({"range", "z"}))
      ->capture_default_str();
  auto* lap_opt = smooth_cmd->add_option("--laplacian", smooth.lambda,
                                         "unorganized: Laplacian smoothing with this lambda");
  auto* taubin_opt =
      smooth_cmd->add_option("--taubin", taubin, "unorganized: Taubin smoothing, LAMBDA,MU");
  lap_opt->excludes(taubin_opt);
  smooth_cmd->add_option("--iterations", smooth.iterations, "unorganized: iterations")
      ->capture_default_str();
  smooth_cmd->add_option("-k", smooth.k, "unorganized: neighbors (1-128)")->capture_default_str();
  smooth_cmd->add_option("--weights", smooth.weights, "unorganized: rank or distance")
      ->check(CLI::IsMember({"rank", "distance"}))
      ->capture_default_str();
  smooth_cmd->add_option("--device", smooth.device, "auto, cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  smooth_cmd->add_flag("--compare-cpu", smooth.compare_cpu,
                       "also run the CPU reference and compare");
  add_input_format(smooth_cmd, smooth.format);
  add_output_mode(smooth_cmd, smooth.mode);

  NormalsCommand normals;
  CLI::App* normals_cmd = add_normals_command(app, normals);

  OutputMode devices_mode;
  auto* devices_cmd = app.add_subcommand("devices", "show the CUDA device pcnn would use");
  add_output_mode(devices_cmd, devices_mode);

  refuse_empty_values(app);

  // --json anywhere asks for errors as JSON too, parse errors included.
  bool json = false;
  for (int i = 1; i < argc; ++i) json = json || std::string(argv[i]) == "--json";
  try {
    std::vector<std::string> args = integers_as_decimal(app, argc, argv);
    std::vector<char*> arg_ptrs;
    for (std::string& a : args) arg_ptrs.push_back(a.data());
    app.parse(argc, arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0 || !json) {
      const int rc = app.exit(e);
      return rc == 0 ? kExitOk : kExitUsage;
    }
    return fail(e.what(), kExitUsage, "", true);
  }

  try {
    const int world = mpi_world_size();
    if (world > 1 && !knn_cmd->parsed() && !radius_cmd->parsed())
      throw pcnn::error(
          "under mpirun only 'pcnn knn' and 'pcnn radius' run distributed; run this command "
          "once");
    if (knn_cmd->parsed()) {
      if (!knn_memory.empty()) knn.max_device_memory = parse_bytes(knn_memory);
      if (world > 1) return run_knn_mpi(knn);
      return run_knn(knn);
    }
    if (radius_cmd->parsed()) {
      if (!radius_memory.empty()) radius.max_device_memory = parse_bytes(radius_memory);
      if (radius_cmd->count("--max-nn") > 0 && (radius.max_nn <= 0 || radius.max_nn > pcnn::kMaxK))
        throw pcnn::error("--max-nn must be between 1 and " + std::to_string(pcnn::kMaxK) +
                          ", got " + std::to_string(radius.max_nn));
      if (radius.max_nn <= 0 && !radius.csv_streams && radius_cmd->count("--stream-format") > 0 &&
          pcnn::OutputSet::is_stream(radius.out))
        throw pcnn::error(
            "--stream-format npy: radius results (without --max-nn) go to a stream as CSV pairs "
            "query,neighbor,sqdist; name a .npy file for OUT.offsets/indices/sqdist.npy");
      if (radius.max_nn <= 0 && (!radius.distances.empty() || !radius.counts.empty()))
        throw pcnn::error(
            "--distances and --counts go with --max-nn (radius results are "
            "written as OUT.offsets/indices/sqdist)");
      if (world > 1) return run_radius_mpi(radius);
      return run_radius(radius);
    }
    if (smooth_cmd->parsed()) {
      smooth.organized_options = given(smooth_cmd, {"--stencil", "--depth-jump", "--value"});
      smooth.unorganized_options =
          given(smooth_cmd, {"--laplacian", "--taubin", "--iterations", "-k", "--weights"});
      if (!taubin.empty()) {
        const std::size_t comma = taubin.find(',');
        if (comma == std::string::npos)
          throw pcnn::error("--taubin needs LAMBDA,MU (e.g. 0.5,-0.53), got '" + taubin + "'");
        // Each part a whole number (std::stof alone took "0.5,-0.53,1" as 0.5 and -0.53).
        auto number = [&](const std::string& part) {
          const std::optional<float> v = pcnn::detail::whole_float(part);
          if (!v || !std::isfinite(*v))
            throw pcnn::error("--taubin needs two numbers LAMBDA,MU, got '" + taubin + "'");
          return *v;
        };
        smooth.lambda = number(taubin.substr(0, comma));
        smooth.mu = number(taubin.substr(comma + 1));
        if (smooth.mu == 0)  // the library's "no MU": it would run Laplacian silently
          throw pcnn::error("--taubin needs MU < -LAMBDA (e.g. 0.5,-0.53), got '" + taubin +
                            "' (MU 0 is --laplacian LAMBDA)");
      }
      return run_smooth(smooth);
    }
    if (normals_cmd->parsed()) return run_normals(normals);
    if (gen_cmd->parsed()) {
      // Options of the other kind of cloud are refused, as filter and smooth refuse theirs.
      const bool depth = gen.kind == "depth";
      for (const CLI::Option* o : {gen_width, gen_height, gen_points})
        if (o->count() > 0 && depth == (o == gen_points))
          throw pcnn::error(o->get_name() + " applies to generate " +
                            (depth ? "of an unorganized cloud" : "depth") + ", not to generate " +
                            gen.kind);
      return run_generate(gen);
    }
    if (stats_cmd->parsed()) return run_stats(stats);
    if (filter_cmd->parsed()) {
      check_filter_options(
          filter, given(filter_cmd, {"--mean-k", "--std-mul", "--radius", "--min-neighbors"}));
      return run_filter(filter);
    }
    return run_devices(devices_mode);
  } catch (...) {
    const ErrorReport e = describe_error(std::current_exception());
    return fail(e.message, e.exit_code, e.file, json, e.prefix);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = run_command(argc, argv);
  finish_early_start();  // a start-up nobody waited for ends before the runtime is torn down
  return rc;
}
