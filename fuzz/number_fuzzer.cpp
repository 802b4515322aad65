// libFuzzer target, differential: every ascii literal pcnn's number grammar accepts must be read
// as the same value by PCL's ascii readers — the .pcd reader both ways it converts (an
// istringstream for a file's first value, atof for every later one, since its stream stays at
// end-of-file) and the .ply reader (boost::lexical_cast to its parse type, then a cast).
// Input: one byte choosing the field type, then the literal. A difference is a crash.
#include <pcl/PCLPointCloud2.h>
#include <pcl/io/file_io.h>
#include <pcl/io/ply/ply.h>

#include <boost/lexical_cast.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <locale>
#include <sstream>
#include <string>

#include "../io/number_grammar.hpp"

namespace {

using pcnn::io_detail::Number;
using pcnn::io_detail::Scalar;

[[noreturn]] void differ(const char* reader, const std::string& token, double ours, double pcl) {
  std::fprintf(stderr, "'%s': pcnn reads %.17g, PCL's %s reader %.17g\n", token.c_str(), ours,
               reader, pcl);
  std::abort();
}

template <class T>
bool same(T a, double ours) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(ours)) return std::isnan(a);
    const T o = static_cast<T>(ours);
    return std::memcmp(&a, &o, sizeof(T)) == 0;  // also tells -0 from 0
  } else {
    return static_cast<double>(a) == ours;
  }
}

template <class T>
T pcd_value(const std::string& token, bool first) {
  pcl::PCLPointCloud2 c;
  c.fields.resize(1);
  c.point_step = sizeof(T);
  c.data.assign(sizeof(T), 0);
  std::istringstream is;
  is.imbue(std::locale::classic());
  if (!first) {  // as after the file's first value: the stream is at its end
    is.str("1");
    int v;
    is >> v;
  }
  pcl::copyStringValue<T>(token, c, 0, 0, 0, is);
  T out;
  std::memcpy(&out, c.data.data(), sizeof(T));
  return out;
}

template <class T>
void check_pcd(const std::string& token, const Number& v) {
  const double ours = std::is_floating_point_v<T> ? v.f : static_cast<double>(v.i);
  const T a = pcd_value<T>(token, true), b = pcd_value<T>(token, false);
  if (!same(a, ours)) differ("pcd (first value)", token, ours, static_cast<double>(a));
  if (!same(b, ours)) differ("pcd (later values)", token, ours, static_cast<double>(b));
}

template <class T>
void check_ply(const std::string& token, const Number& v) {
  using parse_type = typename pcl::io::ply::type_traits<T>::parse_type;
  T value;
  try {
    value = static_cast<T>(boost::lexical_cast<parse_type>(token));
  } catch (const boost::bad_lexical_cast&) {
    differ("ply (rejected)", token, v.f, 0);
  }
  const double ours = std::is_floating_point_v<T> ? v.f : static_cast<double>(v.i);
  if (!same(value, ours)) differ("ply", token, ours, static_cast<double>(value));
}

// Runs check<T>() with the C++ type of `type`.
template <class F>
void with_type(Scalar type, F&& check) {
  switch (type) {
    case Scalar::i8:
      return check(std::int8_t{});
    case Scalar::u8:
      return check(std::uint8_t{});
    case Scalar::i16:
      return check(std::int16_t{});
    case Scalar::u16:
      return check(std::uint16_t{});
    case Scalar::i32:
      return check(std::int32_t{});
    case Scalar::u32:
      return check(std::uint32_t{});
    case Scalar::i64:
      return check(std::int64_t{});
    case Scalar::u64:
      return check(std::uint64_t{});
    case Scalar::f32:
      return check(float{});
    case Scalar::f64:
      return check(double{});
  }
}

}  // namespace

// A literal accepted for a reader must be read by it as the value the grammar gives.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 || size > 1 + pcnn::io_detail::kMaxNumberLength) return 0;
  const auto type = static_cast<Scalar>(data[0] % 10);
  const std::string token(reinterpret_cast<const char*>(data + 1), size - 1);
  using pcnn::io_detail::Dialect;
  Number v;
  if (pcnn::io_detail::check_number(token, type, Dialect::pcd, &v).empty())
    with_type(type, [&](auto t) { check_pcd<decltype(t)>(token, v); });
  // PLY has no 64-bit integer types.
  if (type != Scalar::i64 && type != Scalar::u64 &&
      pcnn::io_detail::check_number(token, type, Dialect::ply, &v).empty())
    with_type(type, [&](auto t) {
      if constexpr (sizeof(t) < 8 || std::is_floating_point_v<decltype(t)>)
        check_ply<decltype(t)>(token, v);
    });
  return 0;
}
