// Helpers the benchmark programs share.
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace pcnn::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

inline std::vector<std::string> parse_words(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

inline std::vector<long long> parse_list(const std::string& s) {
  std::vector<long long> out;
  for (const std::string& w : parse_words(s)) out.push_back(std::stoll(w));
  return out;
}

}  // namespace pcnn::bench
