#include "coordinate_gather.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "../core/fresh_pages.hpp"

namespace pcnn::io_detail {
namespace {

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One value of type t, converted to double (exactly: 64-bit integers beyond ±2^53 are refused
// before, by CoordinateSink::gather).
double load_as_double(const unsigned char* p, Scalar t) {
  switch (t) {
    case Scalar::i8:
      return load<std::int8_t>(p);
    case Scalar::u8:
      return load<std::uint8_t>(p);
    case Scalar::i16:
      return load<std::int16_t>(p);
    case Scalar::u16:
      return load<std::uint16_t>(p);
    case Scalar::i32:
      return load<std::int32_t>(p);
    case Scalar::u32:
      return load<std::uint32_t>(p);
    case Scalar::i64:
      return static_cast<double>(load<std::int64_t>(p));
    case Scalar::u64:
      return static_cast<double>(load<std::uint64_t>(p));
    case Scalar::f32:
      return load<float>(p);
    default:
      return load<double>(p);
  }
}

template <class T>
bool finite3(const T* p) {
  return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
}

// Whether a 64-bit integer coordinate (other types always are) converts to a double exactly.
bool exact_in_double(const unsigned char* p, Scalar t) {
  if (t == Scalar::i64) {
    const auto v = load<std::int64_t>(p);
    return v >= -kExactInteger && v <= kExactInteger;
  }
  return t != Scalar::u64 || load<std::uint64_t>(p) <= std::uint64_t(kExactInteger);
}

}  // namespace

CoordinateSink::CoordinateSink(const std::string& path, Coordinates& out, const XyzLayout& layout,
                               std::uint64_t points)
    : path_(path), out_(out), layout_(layout) {
  for (int a = 0; a < 3; ++a) out_.type[a] = layout.type[a];
  out_.single.clear();
  out_.wide.clear();
  out_.finite = 0;
  if (out_.is_single()) {
    out_.single.reserve(points * 3);
    detail::prepare_fresh_pages(out_.single.data(), points * 3 * sizeof(float));
    single_stage_.resize(3 * kBlock);
  } else {
    out_.wide.reserve(points * 3);
    detail::prepare_fresh_pages(out_.wide.data(), points * 3 * sizeof(double));
    wide_stage_.resize(3 * kBlock);
  }
}

template <class T>
void CoordinateSink::flush(std::vector<T>& to, const std::vector<T>& stage) {
  for (std::uint64_t i = 0; i < staged_; ++i) out_.finite += finite3(&stage[3 * i]);
  to.insert(to.end(), stage.begin(), stage.begin() + static_cast<std::ptrdiff_t>(3 * staged_));
  staged_ = 0;
}

void CoordinateSink::add(const double v[3]) {
  if (out_.is_single()) {
    float* p = &single_stage_[3 * staged_];
    for (int a = 0; a < 3; ++a) p[a] = static_cast<float>(v[a]);  // already float values
  } else {
    std::memcpy(&wide_stage_[3 * staged_], v, 3 * sizeof(double));
  }
  if (++staged_ == kBlock) finish();
}

// Records whose x, y and z all have type T (float or double), or, for T = void, any types.
template <class T>
void CoordinateSink::gather(const unsigned char* records, std::uint64_t count,
                            std::uint64_t record) {
  using V = std::conditional_t<std::is_void_v<T>, double, T>;
  auto& stage = [this]() -> std::vector<V>& {
    if constexpr (std::is_same_v<V, float>)
      return single_stage_;
    else
      return wide_stage_;
  }();
  const std::uint64_t o0 = layout_.offset[0], o1 = layout_.offset[1], o2 = layout_.offset[2];
  bool wide_integers = false;
  for (Scalar t : layout_.type)
    wide_integers = wide_integers || t == Scalar::i64 || t == Scalar::u64;
  // The first record of this call is point `first` of the cloud.
  const std::uint64_t first =
      (out_.is_single() ? out_.single.size() : out_.wide.size()) / 3 + staged_;
  auto check_integers = [&](const unsigned char* r, std::uint64_t j) {
    for (int a = 0; a < 3; ++a) {
      const unsigned char* v = r + layout_.offset[a];
      const Scalar t = layout_.type[a];
      if (!exact_in_double(v, t))
        reject(path_, "point " + std::to_string(first + j),
               std::string(1, "xyz"[a]) + " = " +
                   (t == Scalar::i64 ? std::to_string(load<std::int64_t>(v))
                                     : std::to_string(load<std::uint64_t>(v))) +
                   " lies beyond ±2^53, where a double cannot hold every integer: the "
                   "coordinates would be rounded, and every distance computed from them inexact");
    }
  };
  for (std::uint64_t i = 0; i < count;) {
    const std::uint64_t m = std::min(count - i, kBlock - staged_);
    V* p = &stage[3 * staged_];
    const unsigned char* r = records + i * record;
    for (std::uint64_t j = 0; j < m; ++j, r += record, p += 3) {
      if constexpr (std::is_void_v<T>) {
        if (wide_integers) check_integers(r, i + j);
        p[0] = load_as_double(r + o0, layout_.type[0]);
        p[1] = load_as_double(r + o1, layout_.type[1]);
        p[2] = load_as_double(r + o2, layout_.type[2]);
      } else {
        p[0] = load<T>(r + o0);
        p[1] = load<T>(r + o1);
        p[2] = load<T>(r + o2);
      }
    }
    staged_ += m;
    i += m;
    if (staged_ == kBlock) finish();
  }
}

void CoordinateSink::add_records(const unsigned char* records, std::uint64_t count,
                                 std::uint64_t record) {
  const bool all_f64 = layout_.type[0] == Scalar::f64 && layout_.type[1] == Scalar::f64 &&
                       layout_.type[2] == Scalar::f64;
  if (out_.is_single())
    gather<float>(records, count, record);
  else if (all_f64)
    gather<double>(records, count, record);
  else
    gather<void>(records, count, record);
}

void CoordinateSink::finish() {
  if (out_.is_single())
    flush(out_.single, single_stage_);
  else
    flush(out_.wide, wide_stage_);
}

void gather_binary(const std::string& path, int fd, std::uint64_t offset, std::uint64_t points,
                   std::uint64_t record, const XyzLayout& layout, Coordinates& out) {
  CoordinateSink sink(path, out, layout, points);
  // Whole records per read, about 256 KiB (a record is at most 16 MiB): a buffer that stays in
  // cache, whose own first touch costs little.
  const std::uint64_t per_chunk = std::max<std::uint64_t>(1, (std::uint64_t(256) << 10) / record);
  const std::uint64_t chunk_points = std::min(points, per_chunk);
  std::unique_ptr<unsigned char[]> buf(new unsigned char[chunk_points * record]);
  for (std::uint64_t done = 0; done < points;) {
    const std::uint64_t m = std::min(chunk_points, points - done);
    const std::uint64_t want = m * record;
    std::uint64_t got = 0;
    while (got < want) {
      const std::uint64_t at = offset + done * record + got;
      const ssize_t k = ::pread(fd, buf.get() + got, want - got, static_cast<off_t>(at));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0)
        reject(path, "byte " + std::to_string(at),
               std::string("cannot read it: ") + std::strerror(errno));
      if (k == 0)
        reject(path, "byte " + std::to_string(at), "the file changed while it was being read");
      got += static_cast<std::uint64_t>(k);
    }
    sink.add_records(buf.get(), m, record);
    done += m;
  }
  sink.finish();
  out.gathered = true;
}

}  // namespace pcnn::io_detail
