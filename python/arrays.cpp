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

// Whether the library can read `a` in place: float32 in native byte order, aligned, x, y and z of
// each point adjacent, and points a whole number of floats apart (at least 3: rows never overlap).
// That covers C-contiguous (n, 3) arrays and column slices of wider ones (arr[:, :3]).
bool viewable(const py::array& a) {
  if (!py::isinstance<py::array_t<float>>(a)) return false;
  const py::ssize_t n = a.shape(0);
  if (n == 0) return true;
  const auto addr = reinterpret_cast<std::uintptr_t>(a.data());
  if (addr % alignof(float) != 0 || a.strides(1) != sizeof(float)) return false;
  if (n == 1) return true;
  const py::ssize_t row = a.strides(0);
  return row % static_cast<py::ssize_t>(sizeof(float)) == 0 &&
         row >= 3 * static_cast<py::ssize_t>(sizeof(float));
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
  Points p;
  if (viewable(a)) {
    p.array = a;
  } else {
    // float64 (and integers) are rounded to float32 here: the library is exact for the float32
    // coordinates it is given, not for the values before rounding.
    p.array = py::array_t<float, py::array::c_style | py::array::forcecast>(a);
    p.copied = true;
  }
  const std::int64_t n = p.array.shape(0);
  const std::int64_t stride =
      n > 1 ? static_cast<std::int64_t>(p.array.strides(0) / sizeof(float)) : 3;
  p.view = pcnn::host_points(static_cast<const float*>(p.array.data()), n, stride);
  return p;
}

}  // namespace pcnn_python
