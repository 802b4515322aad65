// `pcnn normals`: load, search, estimate normals, write the cloud with them, report.
#pragma once

#include <string>

#include "knn_command.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace pcnn::app {

struct NormalsCommand : SearchOptions {
  int k = 0;
  double radius = 0;
  int max_nn = 0;
  std::string viewpoint = "0,0,0";  // X,Y,Z in the file's coordinates
  std::string memory;               // --max-device-memory as typed
};

/// Adds the `normals` subcommand and its options (filling `cmd`) to `app`.
CLI::App* add_normals_command(CLI::App& app, NormalsCommand& cmd);

/// Runs it; errors are thrown and mapped to exit codes by main.
int run_normals(const NormalsCommand& cmd);

}  // namespace pcnn::app
