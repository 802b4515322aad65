// The summary `pcnn` prints: a table on stderr for people, one typed JSON object on stdout for
// programs (--json), both from the same rows; the JSON error object; progress on stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pcnn/device.hpp"
#include "pcnn/io.hpp"

namespace pcnn::app {

/// A row's name: the table's label and the JSON key. The key defaults to the label in
/// snake_case with the unit appended ("load" in "ms" -> "load_ms").
struct Label {
  Label(const char* t) : text(t) {}             // NOLINT: implicit on purpose
  Label(std::string t) : text(std::move(t)) {}  // NOLINT
  Label(std::string t, std::string k) : text(std::move(t)), key(std::move(k)) {}
  std::string text, key;
};

/// An ordered list of rows: numbers, strings, booleans, number vectors, nested objects and lists
/// of objects. Printed as an aligned table for people and as JSON (numbers as numbers, vectors as
/// arrays, booleans as booleans, non-finite numbers as null) for programs.
class Report {
 public:
  /// The data are float32 (a cloud stored so): in JSON, numbers a float holds exactly are
  /// printed as the float's shortest text (0.1, not 0.10000000149011612), as for timings.
  void set_float_data(bool yes) { float_data_ = yes; }
  void add(Label key, double value, const std::string& unit = "");
  void add(Label key, const std::string& value);
  void add(Label key, const char* value) { add(std::move(key), std::string(value)); }
  /// A boolean: the table shows `yes` / `no` (or the texts given).
  void add_bool(Label key, bool value, const std::string& yes = "yes",
                const std::string& no = "no");
  /// Numbers as a JSON array; the table shows "(a, b, c)" with `decimals` digits.
  void add_vector(Label key, const std::vector<double>& values, int decimals = 6,
                  const std::string& unit = "");
  /// Table only (a line of explanation).
  void add_note(const std::string& key, const std::string& text);
  /// A nested object: the table shows its rows indented under `key`.
  void add_section(Label key, Report section);
  /// A nested object the table shows as one line, `table_text`.
  void add_object(Label key, Report object, const std::string& table_text);
  /// A JSON array of objects; the table shows each as a line "name  table_text" under `key`.
  void add_list(Label key, std::vector<std::pair<std::string, Report>> items,
                const std::vector<std::string>& table_texts);
  /// The row added last appears in the JSON object only.
  void json_only();

  void print_table(std::FILE* out, int indent = 0) const;
  std::string json() const;

 private:
  struct Row {
    std::string label, key, unit;
    enum Kind { number, text, boolean, vector, note, section, object, list } kind = number;
    double num = 0;
    bool flag = false;
    int decimals = 6;
    std::string str;  // text; boolean: the table's text; object: the table line
    std::vector<double> nums;
    std::vector<Row> children;  // section, object; list: one object per item
    bool in_table = true;
  };
  Row& push(Label key, Row::Kind kind);
  static void table_rows(std::FILE* out, const std::vector<Row>& rows, int indent);
  static void json_rows(std::string& out, const std::vector<Row>& rows, bool float_data);
  std::vector<Row> rows_;
  bool float_data_ = false;
};

/// How a command writes its summary: the table on stderr unless --quiet, the JSON object on
/// stdout with --json.
struct OutputMode {
  bool json = false;
  bool quiet = false;
};
void emit(const Report& report, OutputMode mode);
/// Writes `text` to stdout and flushes it. @throws pcnn::output_error when it cannot (stdout
/// closed, read-only, a full disk): a report lost is a failed command, not exit 0.
void write_stdout(const std::string& text);

/// With --json, an error as one JSON object on stdout:
/// {"error": {"message": ..., "exit_code": ..., "file": ...}} ("file" only when one is known).
std::string json_error(const std::string& message, int exit_code, const std::string& file);

/// A JSON string literal (quoted, escaped).
std::string json_string(const std::string& s);
/// A JSON number (shortest text that reads back as the same double), or null when not finite;
/// `measured` (a timing or a rate, perhaps from a float, or data of a float32 cloud): the
/// shortest that reads back as the same float where a float holds it.
std::string json_number(double v, bool measured = false);

/// "1,234,567"
std::string thousands(long long v);

/// The rows every command prints about a loaded cloud.
Report describe_cloud(const Cloud& c);

/// The `device` object: the CUDA device (name, index, compute capability, memory...) or the CPU.
Report describe_device(const DeviceInfo* cuda);
/// Adds the `device` row for the CUDA device `dev`, or for the CPU when `dev` is null.
void add_device(Report& r, const DeviceInfo* dev);

/// Milliseconds since t0.
double ms_since(std::chrono::steady_clock::time_point t0);

/// Progress of long work on stderr, shown only when stderr is a terminal, not --quiet, and once
/// the work has run for a second; redrawn in place at most five times a second and cleared when
/// done. With a known total (rows, points): "label  42%  1.2 M rows/s  ETA 3 s", driven by the
/// app between chunks (the library never prints). With total < 0 (one library call that cannot
/// report its progress: loading, a filter): "label  12 s", from a thread of its own.
class Progress {
 public:
  Progress(std::string label, std::int64_t total, const std::string& unit, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(std::int64_t done);
  /// Stops and clears the line (also done by the destructor).
  void finish();

  /// Whether progress may be shown at all: stderr is a terminal and not --quiet.
  static bool wanted(bool quiet);

 private:
  struct Ticker;
  void draw(const std::string& text);
  std::string label_, unit_;
  std::int64_t total_;
  bool enabled_, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  std::unique_ptr<Ticker> ticker_;
};

}  // namespace pcnn::app
