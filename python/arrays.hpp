// pcnn Python module — NumPy arrays in and out: point views without copies where the layout
// allows, result arrays the library writes into directly.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "pcnn/points.hpp"

namespace pcnn_python {

namespace py = pybind11;

/// Points as the library reads them, and the array behind them. `array` is the caller's own
/// array when its layout could be viewed (float32 or float64, each row's x, y, z adjacent),
/// otherwise a C-contiguous conversion to float32 or float64 (whichever holds the values
/// exactly); either way it must outlive every use of `view`.
struct Points {
  py::array array;
  pcnn::PointsView view;
  bool copied = false;  ///< whether `array` is a conversion rather than the caller's array
};

/// Views (or converts) an (n, 3) array-like of real numbers as points. `name` names the argument
/// in error messages. Raises ValueError for another shape, TypeError for a non-real dtype.
/// Called with the GIL held.
Points as_points(py::handle obj, const char* name);

/// A new C-contiguous rows × cols array and a view of it for the library to write into.
template <class T>
std::pair<py::array_t<T>, pcnn::MatrixView<T>> new_matrix(std::int64_t rows, std::int64_t cols) {
  py::array_t<T> a({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
  return {a, pcnn::MatrixView<T>{a.mutable_data(), rows, cols}};
}

/// A NumPy array over the memory of `v`, which it takes over (no copy): the array's base is a
/// capsule that frees the vector when NumPy lets go of it.
template <class T>
py::array_t<T> adopt(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto owner = std::make_unique<std::vector<T>>(std::move(v));
  py::capsule base(owner.get(), [](void* p) { delete static_cast<std::vector<T>*>(p); });
  const T* data = owner.release()->data();
  return py::array_t<T>(std::move(shape), data, base);
}

}  // namespace pcnn_python
