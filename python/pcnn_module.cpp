// pcnn Python module — exact nearest neighbors of NumPy point clouds over pcnn::Index.
//
// Inputs are viewed in place when the library can read them as they are (see arrays.cpp);
// results are NumPy arrays the library writes into directly. The GIL is released while the
// library builds and searches, so other Python threads run meanwhile.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "arrays.hpp"
#include "host_stats.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/normals.hpp"
#include "pcnn/stats.hpp"
#ifdef PCNN_PYTHON_WITH_IO
#include "pcnn/io.hpp"
#endif

namespace py = pybind11;

namespace pcnn_python {
namespace {

// Raises `type` with the library's message. Messages name files, whose names need not be UTF-8:
// bytes that are not are shown escaped (\xe9) rather than losing the whole message.
void set_error(PyObject* type, const char* what) {
  PyObject* message =
      PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "backslashreplace");
  if (!message) return;  // the decoder's own error (memory) is raised instead
  PyErr_SetObject(type, message);
  Py_DECREF(message);
}

// The library's exceptions as Python's own; the messages are the library's.
void translate_errors(std::exception_ptr e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const pcnn::invalid_argument_error& x) {
    set_error(PyExc_ValueError, x.what());
  } catch (const pcnn::no_device_error& x) {
    set_error(PyExc_RuntimeError, x.what());
  } catch (const pcnn::out_of_memory_error& x) {
    set_error(PyExc_MemoryError, x.what());
  } catch (const pcnn::io_error& x) {
    set_error(PyExc_OSError, x.what());
  } catch (const pcnn::error& x) {
    set_error(PyExc_RuntimeError, x.what());
  }
}

pcnn::IndexOptions index_options(const std::string& device, int threads) {
  pcnn::IndexOptions options;
  options.backend = pcnn::parse_backend(device);
  options.threads = threads;
  return options;
}

py::array_t<double> vector3(const std::array<double, 3>& v) {
  py::array_t<double> a(3);
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// Entries of each dense row before its first -1 (the library's padding).
void count_rows(const pcnn::MatrixView<std::int32_t>& indices, std::int32_t* counts) {
  for (std::int64_t q = 0; q < indices.rows; ++q) {
    const std::int32_t* row = indices.data + q * indices.cols;
    counts[q] = static_cast<std::int32_t>(std::find(row, row + indices.cols, -1) - row);
  }
}

// An integer argument (k, max_nn): Python's or NumPy's integers (not floats, as range() takes
// them). TypeError for another type; ValueError beyond int, where the library, which checks the
// range with its own message, cannot be given the value.
int int_arg(py::handle v, const char* name) {
  const auto i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow || x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    throw py::value_error(std::string(name) + " is out of range, got " + std::string(py::str(i)));
  return static_cast<int>(x);
}

// A real-number argument: what float() takes but strings (TypeError for those, as for "a").
double real_arg(py::handle v) {
  const double x = PyFloat_AsDouble(v.ptr());
  if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return x;
}

// Output columns for a k the library has yet to check: an invalid k is reported by the library
// (its message), not by a failed or huge allocation here.
std::int64_t output_cols(int k) { return std::clamp(k, 1, pcnn::kMaxK); }

/// pcnn::Index for Python: the index plus a mutex, since the library's index is used by one
/// thread at a time and its calls here run without the GIL.
class SearchIndex {
 public:
  SearchIndex(const pcnn::PointsView& points, const pcnn::IndexOptions& options) {
    locked([&] {
      index_ = std::make_unique<pcnn::Index>(options);
      index_->build(points);
    });
    std::lock_guard<std::mutex> lock(alive_mutex());
    alive().insert(this);
  }
  SearchIndex(const SearchIndex&) = delete;
  SearchIndex& operator=(const SearchIndex&) = delete;
  ~SearchIndex() {
    std::lock_guard<std::mutex> lock(alive_mutex());
    alive().erase(this);
  }

  /// `self`, once it is known to be a constructed index. pybind11 2.10 (Debian 12's) lets
  /// pcnn.Index.__new__(pcnn.Index) make a wrapper whose C++ object was never constructed, and
  /// hands the methods its raw storage (pybind11 issue 6153: a crash). The methods ask first,
  /// by address, without reading that storage.
  static SearchIndex& checked(SearchIndex& self) {
    std::lock_guard<std::mutex> lock(alive_mutex());
    if (alive().count(&self) == 0)
      throw py::type_error(
          "pcnn.Index was made without __init__ (by __new__): make one with pcnn.Index(points)");
    return self;
  }

  void build(const pcnn::PointsView& points) {
    locked([&] { index_->build(points); });
  }

  py::tuple knn(const pcnn::PointsView* queries, int k, bool exclude_self) {
    pcnn::KnnParams params;
    params.k = k;
    params.exclude_self = exclude_self;
    return sized(queries, [&](std::int64_t rows) {
      auto [indices, iv] = new_matrix<std::int32_t>(rows, output_cols(k));
      auto [sqdist, dv] = new_matrix<float>(rows, output_cols(k));
      return Call{py::make_tuple(indices, sqdist), [&, iv = iv, dv = dv] {
                    if (queries)
                      index_->knn(*queries, params, iv, dv);
                    else
                      index_->self_knn(params, iv, dv);
                  }};
    });
  }

  py::tuple radius(const pcnn::PointsView* queries, double r, bool exclude_self) {
    pcnn::RadiusParams params;
    params.radius = r;
    params.exclude_self = exclude_self;
    // The owning result is one search; its vectors become the arrays (no copy). Count-then-fill
    // into NumPy arrays would search twice.
    pcnn::RadiusResult res = locked(
        [&] { return queries ? index_->radius(*queries, params) : index_->self_radius(params); });
    const auto m = static_cast<py::ssize_t>(res.indices.size());
    const auto rows = static_cast<py::ssize_t>(res.offsets.size());
    return py::make_tuple(adopt(std::move(res.offsets), {rows}), adopt(std::move(res.indices), {m}),
                          adopt(std::move(res.sqdist), {m}));
  }

  py::tuple hybrid(const pcnn::PointsView* queries, double r, int max_nn, bool exclude_self) {
    pcnn::HybridParams params;
    params.radius = r;
    params.max_nn = max_nn;
    params.exclude_self = exclude_self;
    return sized(queries, [&](std::int64_t rows) {
      auto [indices, iv] = new_matrix<std::int32_t>(rows, output_cols(max_nn));
      auto [sqdist, dv] = new_matrix<float>(rows, output_cols(max_nn));
      py::array_t<std::int32_t> counts(static_cast<py::ssize_t>(rows));
      std::int32_t* cv = counts.mutable_data();
      return Call{py::make_tuple(indices, sqdist, counts), [&, iv = iv, dv = dv, cv] {
                    if (queries)
                      index_->hybrid(*queries, params, iv, dv);
                    else
                      index_->self_hybrid(params, iv, dv);
                    count_rows(iv, cv);
                  }};
    });
  }

  py::tuple normals(const pcnn::NormalParams& params) {
    return sized(nullptr, [&](std::int64_t rows) {
      auto [normals, nv] = new_matrix<float>(rows, 3);
      py::array_t<float> curvature(static_cast<py::ssize_t>(rows));
      const pcnn::ArrayView<float> cv{curvature.mutable_data(), rows};
      return Call{py::make_tuple(normals, curvature),
                  [&, nv = nv, cv] { pcnn::estimate_normals(*index_, params, nv, cv); }};
    });
  }

  std::string backend() {
    return pcnn::to_string(locked([&] { return index_->backend(); }));
  }
  std::int64_t size() {
    return locked([&] { return index_->size(); });
  }
  std::int64_t finite_size() {
    return locked([&] { return index_->finite_size(); });
  }

  py::dict last_timings() {
    const pcnn::SearchTimings t = locked([&] { return index_->last_timings(); });
    py::dict d;
    d["backend"] = pcnn::to_string(t.backend);
    d["staging"] = pcnn::to_string(t.staging);
    d["total_ms"] = t.total_ms;
    d["upload_ms"] = t.upload_ms;
    d["build_ms"] = t.build_ms;
    d["search_ms"] = t.search_ms;
    d["download_ms"] = t.download_ms;
    d["upload_bytes"] = t.upload_bytes;
    d["download_bytes"] = t.download_bytes;
    d["distance_evaluations"] = t.distance_evaluations;
    d["passes"] = t.passes;
    return d;
  }

 private:
  // Runs `f` on the index without the GIL and with the index to itself. The GIL goes first, so a
  // thread waiting for the mutex never holds it.
  template <class F>
  auto locked(F&& f) -> decltype(f()) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    return f();
  }

  // A call's outputs (NumPy arrays, made with the GIL) and the search that fills them.
  struct Call {
    py::tuple outputs;
    std::function<void()> run;
  };
  // Makes the outputs of a search of `queries` (nullptr: the indexed points) with `make(rows)`
  // and runs it. The outputs are made outside the lock, so another thread may rebuild the index
  // in between: a self-search whose row count changed meanwhile is made again for the new one.
  template <class Make>
  py::tuple sized(const pcnn::PointsView* queries, Make&& make) {
    for (;;) {
      const std::int64_t rows = queries ? queries->count : size();
      Call call = make(rows);
      const bool ran = locked([&] {
        if (!queries && index_->size() != rows) return false;
        call.run();
        return true;
      });
      if (ran) return call.outputs;
    }
  }

  static std::mutex& alive_mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_set<const SearchIndex*>& alive() {
    static std::unordered_set<const SearchIndex*> s;
    return s;
  }

  std::mutex mutex_;
  std::unique_ptr<pcnn::Index> index_;
};

// ---- module-level functions: one index, one search ----

py::tuple knn(py::object points, py::object k_given, py::object queries, bool exclude_self,
              const std::string& device, int threads) {
  const int k = int_arg(k_given, "k");
  const Points p = as_points(points, "points");
  SearchIndex index(p.view, index_options(device, threads));
  if (queries.is_none()) return index.knn(nullptr, k, exclude_self);
  const Points q = as_points(queries, "queries");
  return index.knn(&q.view, k, exclude_self);
}

py::tuple radius(py::object points, double r, py::object queries, bool exclude_self,
                 const std::string& device, int threads) {
  const Points p = as_points(points, "points");
  SearchIndex index(p.view, index_options(device, threads));
  if (queries.is_none()) return index.radius(nullptr, r, exclude_self);
  const Points q = as_points(queries, "queries");
  return index.radius(&q.view, r, exclude_self);
}

py::tuple hybrid(py::object points, double r, py::object max_nn_given, py::object queries,
                 bool exclude_self, const std::string& device, int threads) {
  const int max_nn = int_arg(max_nn_given, "max_nn");
  const Points p = as_points(points, "points");
  SearchIndex index(p.view, index_options(device, threads));
  if (queries.is_none()) return index.hybrid(nullptr, r, max_nn, exclude_self);
  const Points q = as_points(queries, "queries");
  return index.hybrid(&q.view, r, max_nn, exclude_self);
}

// k or radius (None: not given), max_nn (None: all within the radius), a 3-sequence viewpoint.
pcnn::NormalParams normal_params(py::object k, py::object radius, py::object max_nn,
                                 py::object viewpoint) {
  pcnn::NormalParams p;
  // 0 means "not given" to the library; given here, it is checked as the value it is.
  if (!k.is_none() && (p.k = int_arg(k, "k")) == 0)
    throw pcnn::invalid_argument_error("normals: k must be between 3 and " +
                                       std::to_string(pcnn::kMaxK) + ", got 0");
  if (!radius.is_none() && (p.radius = real_arg(radius)) == 0)
    throw pcnn::invalid_argument_error("normals: the radius must be a finite number > 0, got 0");
  if (!max_nn.is_none()) p.max_nn = int_arg(max_nn, "max_nn");
  // Any sequence of 3 reals, each taken as real_arg takes it (strided NumPy views included).
  const auto vp = py::reinterpret_steal<py::object>(
      PySequence_Fast(viewpoint.ptr(), "normals: the viewpoint must be a sequence (x, y, z)"));
  if (!vp) throw py::error_already_set();
  if (PySequence_Fast_GET_SIZE(vp.ptr()) != 3)
    throw pcnn::invalid_argument_error("normals: the viewpoint must be 3 numbers (x, y, z), got " +
                                       std::string(py::str(py::repr(viewpoint))));
  for (int a = 0; a < 3; ++a) p.viewpoint[a] = real_arg(PySequence_Fast_GET_ITEM(vp.ptr(), a));
  pcnn::validate(p);
  return p;
}

py::tuple normals(py::object points, py::object k, py::object radius, py::object max_nn,
                  py::object viewpoint, const std::string& device, int threads) {
  const pcnn::NormalParams params = normal_params(k, radius, max_nn, viewpoint);
  const Points p = as_points(points, "points");
  SearchIndex index(p.view, index_options(device, threads));
  return index.normals(params);
}

py::dict stats(py::object points, const std::string& device) {
  const Points p = as_points(points, "points");
  const pcnn::Backend b = pcnn::parse_backend(device);
  // The GPU reduction takes float32 (and refuses float64 by name): "auto" describes float64
  // points on the CPU, in long double, rather than round them.
  const bool gpu =
      b == pcnn::Backend::cuda ||
      (b == pcnn::Backend::automatic && !p.view.is_double() && pcnn::query_device().available);
  pcnn::CloudStats s;
  {
    py::gil_scoped_release nogil;
    if (gpu) {
      pcnn::initialize_device();  // no_device_error, with the reason, when there is none
      s = pcnn::gpu_cloud_stats(p.view);
    } else {
      s = host_cloud_stats(p.view);
    }
  }
  py::dict d;
  d["count"] = s.count;
  d["finite"] = s.finite;
  d["backend"] = gpu ? "cuda" : "cpu";
  py::array_t<double> cov({3, 3});
  static constexpr int kEntry[3][3] = {{0, 1, 2}, {1, 3, 4}, {2, 4, 5}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) cov.mutable_at(i, j) = s.covariance[kEntry[i][j]];
  if (s.finite == 0) {  // nothing to describe: NaN, as NumPy's mean of nothing
    const double nan = std::numeric_limits<double>::quiet_NaN();
    s.min = s.max = s.centroid = {nan, nan, nan};
    std::fill(cov.mutable_data(), cov.mutable_data() + 9, nan);
  }
  d["min"] = vector3(s.min);
  d["max"] = vector3(s.max);
  d["centroid"] = vector3(s.centroid);
  d["covariance"] = cov;
  return d;
}

#ifdef PCNN_PYTHON_WITH_IO
// A file name as the OS takes it: str (encoded as os.fsencode does), bytes or os.PathLike.
std::string file_name(py::object path) {
  const auto bytes = py::module_::import("os").attr("fsencode")(path).cast<std::string>();
  if (bytes.find('\0') != std::string::npos) throw py::value_error("path: embedded null byte");
  return bytes;
}

py::tuple load(py::object path_given) {
  const std::string path = file_name(path_given);
  pcnn::Cloud cloud;
  {
    py::gil_scoped_release nogil;
    cloud = pcnn::load_cloud(path, nullptr, /*keep_fields=*/false);
  }
  const std::int64_t n = cloud.size();
  py::array_t<double> xyz({static_cast<py::ssize_t>(n), py::ssize_t{3}});
  double* out = xyz.mutable_data();
  {
    py::gil_scoped_release nogil;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (!cloud.exact) {  // float offsets could not hold them: the coordinates as stored
      std::copy(cloud.stored.begin(), cloud.stored.end(), out);
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        const float* p = cloud.xyz.data() + 3 * i;
        const bool finite = std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
        for (int a = 0; a < 3; ++a)
          out[3 * i + a] = finite ? static_cast<double>(p[a]) + cloud.origin[a] : nan;
      }
    }
  }
  py::dict info;
  const auto name = py::reinterpret_steal<py::object>(PyUnicode_DecodeFSDefaultAndSize(
      cloud.path.data(), static_cast<Py_ssize_t>(cloud.path.size())));  // as os.fsdecode
  if (!name) throw py::error_already_set();
  info["path"] = name;
  info["exact"] = cloud.exact;
  info["origin"] = vector3(cloud.origin);
  info["local"] = adopt(std::move(cloud.xyz), {static_cast<py::ssize_t>(n), py::ssize_t{3}});
  info["width"] = cloud.width;
  info["height"] = cloud.height;
  info["finite"] = cloud.finite;
  info["coordinate_type"] = cloud.coordinate_type;
  info["field_names"] = cloud.field_names;
  return py::make_tuple(xyz, info);
}
#endif

py::dict device_info(int ordinal) {
  const pcnn::DeviceInfo i = pcnn::query_device(ordinal);
  py::dict d;
  d["available"] = i.available;
  d["reason"] = i.reason;
  d["ordinal"] = i.ordinal;
  d["name"] = i.name;
  d["compute_capability"] = py::make_tuple(i.cc_major, i.cc_minor);
  d["total_memory"] = i.total_memory;
  d["multiprocessors"] = i.multiprocessors;
  d["integrated"] = i.integrated;
  return d;
}

py::dict view_info(py::object points) {
  const Points p = as_points(points, "points");
  py::dict d;
  d["copied"] = p.copied;
  d["stride"] = p.view.stride;
  d["dtype"] = p.view.is_double() ? "float64" : "float32";
  return d;
}

const char* const kModuleDoc =
    R"doc(Exact nearest neighbors of 3-D point clouds (pcnn), on the GPU when one is usable.

Points are NumPy arrays of shape (n, 3), float32 or float64, searched exactly as given: the k
nearest under the squared distance computed in double precision from the coordinates, ties
broken by the smaller index; reported squared distances are that double value rounded to
float32; radius membership is d² <= r² decided in double. Points and queries may differ in type.
float64 keeps georeferenced coordinates (UTM, ECEF) exact without re-centering. Other dtypes are
converted to whichever of float32 and float64 holds their values exactly (float16 and integers of
up to 16 bits: float32; wider integers and long double: float64), and refused (ValueError) where
a value is one float64 cannot hold.

float32 and float64 arrays whose rows hold x, y, z adjacently (C-contiguous (n, 3), or column
slices of wider arrays such as a[:, :3]) are read in place, without a copy; other layouts are
copied (in the same type).
Rows with a non-finite coordinate are never neighbors, and as queries get empty rows.
Results: indices int32 and squared distances float32, each row sorted by (distance, index),
padded with -1 and +inf where fewer neighbors exist.

device: "auto" (the GPU when usable, else the CPU), "cuda" or "cpu".
Errors: ValueError (invalid values), TypeError (values of the wrong type), RuntimeError (no CUDA
device, CUDA failures), MemoryError, OSError (files).)doc";

}  // namespace
}  // namespace pcnn_python

PYBIND11_MODULE(pcnn, m) {
  using namespace pcnn_python;
  m.doc() = kModuleDoc;
  py::register_exception_translator(&translate_errors);

  m.def("knn", &knn, py::arg("points"), py::arg("k"), py::arg("queries") = py::none(),
        py::arg("exclude_self") = false, py::arg("device") = "auto", py::arg("threads") = 0,
        R"doc(The k nearest neighbors of each query (or of each point when queries is None).

Returns (indices, sqdist): int32 (n, k) indices into points and float32 (n, k) squared
distances, each row sorted by (squared distance, index), padded with -1 / inf where fewer than k
finite points exist. k is 1..128. exclude_self (self-search only): a point is not its own
neighbor. threads: CPU backend worker threads (0: all).)doc");

  m.def("radius", &radius, py::arg("points"), py::arg("r"), py::arg("queries") = py::none(),
        py::arg("exclude_self") = false, py::arg("device") = "auto", py::arg("threads") = 0,
        R"doc(Every point within distance r of each query (or of each point when queries is None).

Returns (offsets, indices, sqdist) in CSR form: int64 offsets (n + 1,), int32 indices (m,),
float32 squared distances (m,). The neighbors of query q are indices[offsets[q]:offsets[q+1]],
sorted by (squared distance, index). Membership is d² <= r*r (inclusive), decided in double.
r must be finite and >= 0.)doc");

  m.def("hybrid", &hybrid, py::arg("points"), py::arg("r"), py::arg("max_nn"),
        py::arg("queries") = py::none(), py::arg("exclude_self") = false,
        py::arg("device") = "auto", py::arg("threads") = 0,
        R"doc(The max_nn nearest neighbors among those within distance r.

Returns (indices, sqdist, counts): int32 (n, max_nn), float32 (n, max_nn) as knn (padded with
-1 / inf), and int32 (n,) counts of the filled entries of each row.)doc");

  m.def("normals", &normals, py::arg("points"), py::arg("k") = py::none(),
        py::arg("radius") = py::none(), py::arg("max_nn") = py::none(),
        py::arg("viewpoint") = py::make_tuple(0.0, 0.0, 0.0), py::arg("device") = "auto",
        py::arg("threads") = 0,
        R"doc(Surface normals and curvature of every point, as PCL's NormalEstimation computes them.

Give k (the k nearest points, 3..128) or radius (every point within it; with max_nn, only the
max_nn nearest of them, 3..128). Neighborhoods include the point itself. Per point: the
covariance of its neighborhood about the neighborhood's mean (in double), the unit eigenvector
of its smallest eigenvalue l0, turned so that dot(normal, viewpoint - point) >= 0; curvature =
|l0| / (l0 + l1 + l2). Returns (normals, curvature): float32 (n, 3) and float32 (n,); NaN where a
point is not finite or its neighborhood has fewer than 3 points (coincident points: NaN normal,
curvature 0), and for float64 neighborhoods so large (~1e154 apart) or small (below ~1e-162) that
their covariance overflows or vanishes. The GPU and CPU backends give the same bits.)doc");

  m.def("stats", &stats, py::arg("points"), py::arg("device") = "auto",
        R"doc(Count, bounds, centroid and covariance of the finite points.

Returns a dict: count (all rows), finite (rows with finite x, y, z), min, max, centroid
(float64 (3,)), covariance (float64 (3, 3), population: divided by finite), backend ("cuda" or
"cpu"). Computed on the GPU when device allows (accumulated in double), else on the CPU in long
double; float64 points on the CPU with device "auto" (the GPU reduction takes float32 only, and
device "cuda" refuses them). With no finite point, min/max/centroid/covariance are NaN.)doc");

#ifdef PCNN_PYTHON_WITH_IO
  m.def("load", &load, py::arg("path"),
        R"doc(Loads a .pcd or .ply cloud.

Returns (xyz, info): xyz float64 (n, 3), the coordinates as the file stored them (exact for
every stored type), NaN rows for non-finite points. info: path, exact, origin (float64 (3,)),
local (float32 (n, 3): the coordinates re-centered on origin; when exact is True, xyz = local +
origin exactly and local may be searched in place of xyz; when False, float32 offsets cannot
hold the stored doubles and local is rounded: search xyz), width, height (organized clouds:
height > 1), finite, coordinate_type (as stored: "float32", "float64", ...), field_names.
path may be str, bytes or os.PathLike. Raises OSError when the file cannot be read as a cloud.)doc");
#endif

  m.def(
      "cuda_available", [] { return pcnn::query_device().available; },
      "Whether a usable CUDA device is present (device 0). Creates no CUDA context.");
  m.def("device_info", &device_info, py::arg("ordinal") = 0,
        R"doc(What pcnn knows of CUDA device `ordinal`, as a dict: available, reason (why not),
name, compute_capability, total_memory (bytes), multiprocessors, integrated.)doc");
  m.def("_view_info", &view_info, py::arg("points"),
        R"doc(For tests: how points would be passed to the library, as {copied, stride, dtype}:
whether the array is converted (copied) first, the stride in coordinates between points, and the
coordinate type the library reads ("float32" or "float64").)doc");

  py::class_<SearchIndex>(m, "Index", R"doc(An index over points, kept for repeated searches.

Index(points, device="auto", threads=0) builds it (the points are copied into the index, so the
array may change afterwards). Searches release the GIL; an Index may be shared between threads
(its calls run one at a time).)doc")
      .def(py::init([](py::object points, const std::string& device, int threads) {
             const Points p = as_points(points, "points");
             return std::make_unique<SearchIndex>(p.view, index_options(device, threads));
           }),
           py::arg("points"), py::arg("device") = "auto", py::arg("threads") = 0,
           "Builds an index over points ((n, 3) array) on device \"auto\", \"cuda\" or \"cpu\".")
      .def(
          "build",
          [](SearchIndex& index, py::object points) {
            SearchIndex& self = SearchIndex::checked(index);
            const Points p = as_points(points, "points");
            self.build(p.view);
          },
          py::arg("points"), "Rebuilds the index over new points; the previous ones are forgotten.")
      .def(
          "knn",
          [](SearchIndex& index, py::object queries, py::object k) {
            SearchIndex& self = SearchIndex::checked(index);
            const Points q = as_points(queries, "queries");
            return self.knn(&q.view, int_arg(k, "k"), false);
          },
          py::arg("queries"), py::arg("k"),
          "(indices int32 (n, k), sqdist float32 (n, k)) of the k nearest indexed points to each "
          "query; rows sorted by (squared distance, index), padded with -1 / inf.")
      .def(
          "self_knn",
          [](SearchIndex& index, py::object k, bool exclude_self) {
            SearchIndex& self = SearchIndex::checked(index);
            return self.knn(nullptr, int_arg(k, "k"), exclude_self);
          },
          py::arg("k"), py::arg("exclude_self") = false,
          "knn of the indexed points themselves; exclude_self: a point is not its own neighbor.")
      .def(
          "radius",
          [](SearchIndex& index, py::object queries, double r) {
            SearchIndex& self = SearchIndex::checked(index);
            const Points q = as_points(queries, "queries");
            return self.radius(&q.view, r, false);
          },
          py::arg("queries"), py::arg("r"),
          "(offsets int64 (n + 1,), indices int32 (m,), sqdist float32 (m,)): every indexed "
          "point with d² <= r*r, CSR rows sorted by (squared distance, index).")
      .def(
          "self_radius",
          [](SearchIndex& index, double r, bool exclude_self) {
            SearchIndex& self = SearchIndex::checked(index);
            return self.radius(nullptr, r, exclude_self);
          },
          py::arg("r"), py::arg("exclude_self") = false,
          "radius of the indexed points themselves; exclude_self: a point is not its own "
          "neighbor.")
      .def(
          "hybrid",
          [](SearchIndex& index, py::object queries, double r, py::object max_nn) {
            SearchIndex& self = SearchIndex::checked(index);
            const Points q = as_points(queries, "queries");
            return self.hybrid(&q.view, r, int_arg(max_nn, "max_nn"), false);
          },
          py::arg("queries"), py::arg("r"), py::arg("max_nn"),
          "(indices, sqdist, counts): the max_nn nearest indexed points within r of each query.")
      .def(
          "self_hybrid",
          [](SearchIndex& index, double r, py::object max_nn, bool exclude_self) {
            SearchIndex& self = SearchIndex::checked(index);
            return self.hybrid(nullptr, r, int_arg(max_nn, "max_nn"), exclude_self);
          },
          py::arg("r"), py::arg("max_nn"), py::arg("exclude_self") = false,
          "hybrid of the indexed points themselves.")
      .def(
          "normals",
          [](SearchIndex& index, py::object k, py::object radius, py::object max_nn,
             py::object viewpoint) {
            SearchIndex& self = SearchIndex::checked(index);
            return self.normals(normal_params(k, radius, max_nn, viewpoint));
          },
          py::arg("k") = py::none(), py::arg("radius") = py::none(), py::arg("max_nn") = py::none(),
          py::arg("viewpoint") = py::make_tuple(0.0, 0.0, 0.0),
          "(normals float32 (n, 3), curvature float32 (n,)) of the indexed points, as "
          "pcnn.normals.")
      .def_property_readonly(
          "backend", [](SearchIndex& self) { return SearchIndex::checked(self).backend(); },
          "The backend that runs the searches: \"cuda\" or \"cpu\".")
      .def_property_readonly(
          "size", [](SearchIndex& self) { return SearchIndex::checked(self).size(); },
          "Points indexed (rows of the input).")
      .def_property_readonly(
          "finite_size", [](SearchIndex& self) { return SearchIndex::checked(self).finite_size(); },
          "Indexed points with finite coordinates.")
      .def_property_readonly(
          "last_timings",
          [](SearchIndex& self) { return SearchIndex::checked(self).last_timings(); },
          "Where the time of the last build or search went: a dict of "
          "milliseconds (total_ms, upload_ms, build_ms, search_ms, "
          "download_ms), bytes moved, distance evaluations and passes.")
      .def(
          "__len__", [](SearchIndex& self) { return SearchIndex::checked(self).size(); },
          "Points indexed.")
      .def("__repr__", [](SearchIndex& index) {
        SearchIndex& self = SearchIndex::checked(index);
        return "pcnn.Index(size=" + std::to_string(self.size()) + ", backend=\"" + self.backend() +
               "\")";
      });
}
