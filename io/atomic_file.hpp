// Writing a file so that a failure leaves nothing behind: write a temporary, then rename.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "pcnn/io.hpp"

namespace pcnn::io_detail {

/// Calls write(tmp_path) and renames the result to `path`. `write` returns an error message,
/// empty on success (it may also throw). Throws pcnn::output_error naming `path` on failure.
template <class F>
void write_atomically(const std::string& path, F&& write) {
  const std::string tmp = path + ".pcnn-tmp";
  std::string err;
  try {
    err = write(tmp);
  } catch (const std::exception& e) {
    err = e.what();
  }
  std::error_code ec;
  if (err.empty()) {
    std::filesystem::rename(tmp, path, ec);
    if (!ec) return;
    err = ec.message();
  }
  std::remove(tmp.c_str());
  throw output_error("cannot write '" + path + "': " + err);
}

}  // namespace pcnn::io_detail
