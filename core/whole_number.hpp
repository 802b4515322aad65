// Reading one number from an option's text, all of it: std::stof alone stops at the first
// character it cannot read ("0.5x" is 0.5, "-0.53,1" is -0.53).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace pcnn::detail {

/// `text` as a float when the whole of it is one number (std::stof's grammar), else nothing.
inline std::optional<float> whole_float(const std::string& text) {
  std::size_t used = 0;
  float v = 0;
  try {
    v = std::stof(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return v;
}

}  // namespace pcnn::detail
