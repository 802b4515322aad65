// pcnn Python module — NumPy arrays in and out.
#include "arrays.hpp"

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
  // two that holds their values exactly (float64 for 32- and 64-bit integers: exact up to 2^53;
  // long double is rounded to float64).
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
    p.array = py::array_t<double, py::array::c_style | py::array::forcecast>(a);
    p.view = view_of<double>(p.array);
    p.copied = true;
  }
  return p;
}

}  // namespace pcnn_python
