// pcnn Python module — NumPy arrays in and out.
#include "arrays.hpp"

#include <cmath>
#include <cstdint>
#include <string>

namespace pcnn_python {

namespace {

std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// Whether the library can read `a` in place as coordinates of type T (float or double): T in
// native byte order, aligned, x, y and z of each point adjacent, and points a whole number of
// coordinates apart (at least 3: rows never overlap). That covers C-contiguous (n, 3) arrays and
// column slices of wider ones (arr[:, :3]).
template <class T>
bool viewable(const py::array& a) {
  if (!py::isinstance<py::array_t<T>>(a)) return false;
  const py::ssize_t n = a.shape(0);
  if (n == 0) return true;
  const auto addr = reinterpret_cast<std::uintptr_t>(a.data());
  if (addr % alignof(T) != 0 || a.strides(1) != sizeof(T)) return false;
  if (n == 1) return true;
  const py::ssize_t row = a.strides(0);
  return row % static_cast<py::ssize_t>(sizeof(T)) == 0 &&
         row >= 3 * static_cast<py::ssize_t>(sizeof(T));
}

// Whether float32 holds every value of `a`'s dtype exactly (float16, and integers of at most 16
// bits); otherwise a copy is made in float64.
bool float32_holds(const py::array& a) {
  const char kind = a.dtype().kind();
  return kind == 'f' ? a.itemsize() <= 4 : a.itemsize() <= 2;
}

// Whether float64 holds `x` exactly (NaN and infinities included).
bool float64_holds(std::int64_t x) {
  const double d = static_cast<double>(x);
  return d >= -0x1p63 && d < 0x1p63 && static_cast<std::int64_t>(d) == x;
}
bool float64_holds(std::uint64_t x) {
  const double d = static_cast<double>(x);
  return d < 0x1p64 && static_cast<std::uint64_t>(d) == x;
}
bool float64_holds(long double x) {
  return std::isnan(x) || static_cast<long double>(static_cast<double>(x)) == x;
}

// Refuses `a` (converted to float64) where float64 does not hold one of its values exactly: a
// 64-bit integer beyond 2^53 that float64 rounds, a long double of more precision or range. A
// search of rounded coordinates would answer for other points than the caller's.
template <class T>
void check_float64_holds(const py::array& a, const char* name) {
  const auto c = py::array_t<T, py::array::c_style | py::array::forcecast>(a);
  const T* v = c.data();
  for (py::ssize_t i = 0; i < c.size(); ++i)
    if (!float64_holds(v[i]))
      throw py::value_error(std::string(name) + ": row " + std::to_string(i / 3) +
                            " holds a value that float64 cannot hold exactly (dtype " +
                            std::string(py::str(a.dtype())) +
                            "); convert the array to float64 yourself to choose the rounding");
}

template <class T>
pcnn::PointsView view_of(const py::array& a) {
  const std::int64_t n = a.shape(0);
  const std::int64_t stride = n > 1 ? static_cast<std::int64_t>(a.strides(0) / sizeof(T)) : 3;
  return pcnn::host_points(static_cast<const T*>(a.data()), n, stride);
}

}  // namespace

Points as_points(py::handle obj, const char* name) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(std::string(name) + " must be an array of shape (n, 3)");
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(std::string(name) + " must hold real numbers, got dtype " +
                         std::string(py::str(a.dtype())));
  if (a.ndim() != 2 || a.shape(1) != 3)
    throw py::value_error(std::string(name) + " must be an array of shape (n, 3), got shape " +
                          shape_of(a));
  // float32 and float64 are read as they are; other dtypes are converted to the smaller of the
  // two that holds their values exactly (float64 for 32- and 64-bit integers), and refused where
  // neither does (64-bit integers beyond 2^53 that float64 rounds, long double's extra bits).
  Points p;
  if (viewable<float>(a)) {
    p.array = a;
    p.view = view_of<float>(a);
  } else if (viewable<double>(a)) {
    p.array = a;
    p.view = view_of<double>(a);
  } else if (float32_holds(a)) {
    p.array = py::array_t<float, py::array::c_style | py::array::forcecast>(a);
    p.view = view_of<float>(p.array);
    p.copied = true;
  } else {
    if (kind == 'i' && a.itemsize() == 8) check_float64_holds<std::int64_t>(a, name);
    if (kind == 'u' && a.itemsize() == 8) check_float64_holds<std::uint64_t>(a, name);
    if (kind == 'f' && a.itemsize() > 8) check_float64_holds<long double>(a, name);
    p.array = py::array_t<double, py::array::c_style | py::array::forcecast>(a);
    p.view = view_of<double>(p.array);
    p.copied = true;
  }
  return p;
}

}  // namespace pcnn_python
