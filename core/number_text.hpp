// A double in an error message: the shortest text that reads back as the same value, where
// std::to_string prints six decimals ("-0.000000" for -1e-300, "0.050000" for 0.05).
#pragma once

#include <charconv>
#include <string>

namespace pcnn::detail {

inline std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace pcnn::detail
