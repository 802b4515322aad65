#include "coordinate_gather.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../core/cpus.hpp"
#include "../core/fresh_pages.hpp"
#include "../core/parallel_blocks.hpp"

namespace pcnn::io_detail {
namespace {

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One value of type t, converted to double (exactly: 64-bit integers beyond ±2^53 are refused
// before, by gather_records).
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

// x, y and z of `count` records of `record` bytes (point `first` of the cloud first) into `out`,
// 3 values a point in V (float when every axis is float32, else double), whose records all have
// type T (float or double) or, for T = void, any types. Returns how many points are finite.
template <class T, class V>
std::int64_t gather_records(const std::string& path, const XyzLayout& layout,
                            const unsigned char* records, std::uint64_t count, std::uint64_t record,
                            std::uint64_t first, V* out) {
  const std::uint64_t o0 = layout.offset[0], o1 = layout.offset[1], o2 = layout.offset[2];
  bool wide_integers = false;
  for (Scalar t : layout.type)
    wide_integers = wide_integers || t == Scalar::i64 || t == Scalar::u64;
  auto check_integers = [&](const unsigned char* r, std::uint64_t j) {
    for (int a = 0; a < 3; ++a) {
      const unsigned char* v = r + layout.offset[a];
      const Scalar t = layout.type[a];
      if (!exact_in_double(v, t))
        reject(path, "point " + std::to_string(first + j),
               std::string(1, "xyz"[a]) + " = " +
                   (t == Scalar::i64 ? std::to_string(load<std::int64_t>(v))
                                     : std::to_string(load<std::uint64_t>(v))) +
                   " lies beyond ±2^53, where a double cannot hold every integer: the "
                   "coordinates would be rounded, and every distance computed from them inexact");
    }
  };
  std::int64_t finite = 0;
  const unsigned char* r = records;
  for (std::uint64_t j = 0; j < count; ++j, r += record, out += 3) {
    if constexpr (std::is_void_v<T>) {
      if (wide_integers) check_integers(r, j);
      out[0] = load_as_double(r + o0, layout.type[0]);
      out[1] = load_as_double(r + o1, layout.type[1]);
      out[2] = load_as_double(r + o2, layout.type[2]);
    } else {
      out[0] = load<T>(r + o0);
      out[1] = load<T>(r + o1);
      out[2] = load<T>(r + o2);
    }
    finite += finite3(out);
  }
  return finite;
}

// Bytes [at, at + n) of fd into dst.
void pread_all(const std::string& path, int fd, std::uint64_t at, std::uint64_t n,
               unsigned char* dst) {
  for (std::uint64_t got = 0; got < n;) {
    const ssize_t k = ::pread(fd, dst + got, n - got, static_cast<off_t>(at + got));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      reject(path, "byte " + std::to_string(at + got),
             std::string("cannot read it: ") + std::strerror(errno));
    if (k == 0)
      reject(path, "byte " + std::to_string(at + got), "the file changed while it was being read");
    got += static_cast<std::uint64_t>(k);
  }
}

// Where the records come from: a file (read with pread at `offset`) or memory.
struct RecordSource {
  int fd = -1;
  std::uint64_t offset = 0;
  const unsigned char* memory = nullptr;
};

// Gathers records [b, e) into `out` (point b at out + 3 b); returns the finite ones. From a file,
// a chunk of about 256 KiB at a time (whole records; a record is at most 16 MiB).
template <class T, class V>
std::int64_t gather_range(const std::string& path, const RecordSource& src, std::uint64_t record,
                          const XyzLayout& layout, std::uint64_t b, std::uint64_t e, V* out) {
  if (src.memory)
    return gather_records<T>(path, layout, src.memory + b * record, e - b, record, b, out + 3 * b);
  const std::uint64_t per_chunk = std::max<std::uint64_t>(1, (std::uint64_t(256) << 10) / record);
  std::vector<unsigned char> buf(std::min(per_chunk, e - b) * record);
  std::int64_t finite = 0;
  for (std::uint64_t done = b; done < e;) {
    const std::uint64_t m = std::min(per_chunk, e - done);
    pread_all(path, src.fd, src.offset + done * record, m * record, buf.data());
    finite += gather_records<T>(path, layout, buf.data(), m, record, done, out + 3 * done);
    done += m;
  }
  return finite;
}

void gather(const std::string& path, const RecordSource& src, std::uint64_t points,
            std::uint64_t record, const XyzLayout& layout, Coordinates& out) {
  const int threads = detail::usable_cpus();
  size_for(out, layout, points, threads);
  const bool all_f64 = layout.type[0] == Scalar::f64 && layout.type[1] == Scalar::f64 &&
                       layout.type[2] == Scalar::f64;
  const std::int64_t block = records_per_block(record);
  std::atomic<std::int64_t> finite{0};
  auto run = [&](auto* type_tag, auto& to) {
    using T = std::remove_pointer_t<decltype(type_tag)>;
    auto* dst = to.data();
    detail::parallel_blocks(
        threads, static_cast<std::int64_t>(points), block, [&](std::int64_t b, std::int64_t e) {
          finite += gather_range<T>(path, src, record, layout, static_cast<std::uint64_t>(b),
                                    static_cast<std::uint64_t>(e), dst);
        });
  };
  if (out.is_single())
    run(static_cast<float*>(nullptr), out.single);
  else if (all_f64)
    run(static_cast<double*>(nullptr), out.wide);
  else
    run(static_cast<void*>(nullptr), out.wide);
  out.finite = finite;
  out.gathered = true;
}

}  // namespace

void size_for(Coordinates& out, const XyzLayout& layout, std::uint64_t points, int threads) {
  for (int a = 0; a < 3; ++a) out.type[a] = layout.type[a];
  out.single.clear();
  out.wide.clear();
  out.finite = 0;
  if (out.is_single())
    detail::resize_fresh_parallel(out.single, points * 3, threads);
  else
    detail::resize_fresh_parallel(out.wide, points * 3, threads);
}

bool put(Coordinates& out, std::uint64_t i, const double v[3]) {
  if (out.is_single()) {
    float* p = &out.single[3 * i];
    for (int a = 0; a < 3; ++a) p[a] = static_cast<float>(v[a]);  // already float values
    return finite3(p);
  }
  std::memcpy(&out.wide[3 * i], v, 3 * sizeof(double));
  return finite3(v);
}

void gather_binary(const std::string& path, int fd, std::uint64_t offset, std::uint64_t points,
                   std::uint64_t record, const XyzLayout& layout, Coordinates& out) {
  gather(path, RecordSource{fd, offset, nullptr}, points, record, layout, out);
}

void gather_records(const std::string& path, const unsigned char* records, std::uint64_t points,
                    std::uint64_t record, const XyzLayout& layout, Coordinates& out) {
  gather(path, RecordSource{-1, 0, records}, points, record, layout, out);
}

void read_bytes(const std::string& path, int fd, std::uint64_t offset, std::uint64_t bytes,
                unsigned char* dst, int threads) {
  constexpr std::int64_t kBlock = std::int64_t(4) << 20;
  detail::parallel_blocks(threads, static_cast<std::int64_t>(bytes), kBlock,
                          [&](std::int64_t b, std::int64_t e) {
                            pread_all(path, fd, offset + static_cast<std::uint64_t>(b),
                                      static_cast<std::uint64_t>(e - b), dst + b);
                          });
}

}  // namespace pcnn::io_detail
