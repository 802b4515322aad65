// The summary `pcnn` prints: a table on stderr, or one JSON object on stdout.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "pcnn/io.hpp"

namespace pcnn::app {

/// An ordered list of (key, value) rows, where a value is a number, a string or a nested report.
/// Printed as an aligned table for people and as JSON for programs, from the same data.
class Report {
 public:
  void add(const std::string& key, double value, const std::string& unit = "");
  void add(const std::string& key, const std::string& value);
  void add_note(const std::string& key, const std::string& text);  // table only
  void add_section(const std::string& key, Report section);

  void print_table(std::FILE* out, int indent = 0) const;
  std::string json() const;

 private:
  struct Row {
    std::string key;
    enum Kind { number, text, note, section } kind = number;
    double num = 0;
    std::string str, unit;
    std::vector<Row> children;
  };
  Row& push(const std::string& key, Row::Kind kind);
  static void table_rows(std::FILE* out, const std::vector<Row>& rows, int indent);
  static void json_rows(std::string& out, const std::vector<Row>& rows);
  std::vector<Row> rows_;
};

/// "1,234,567"
std::string thousands(long long v);

/// The rows every command prints about a loaded cloud.
Report describe_cloud(const Cloud& c);

/// Milliseconds since t0.
double ms_since(std::chrono::steady_clock::time_point t0);

}  // namespace pcnn::app
