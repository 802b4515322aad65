#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "../core/utf8.hpp"

namespace pcnn::app {

namespace {

// "GPU context start-up" with unit "ms" -> "gpu_context_start_up_ms"
std::string json_key(const std::string& label, const std::string& unit) {
  std::string out;
  bool gap = false;
  for (char c : label + (unit.empty() || unit == "x" || unit == "%" ? "" : " " + unit)) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      if (gap && !out.empty()) out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      gap = false;
    } else {
      gap = true;
    }
  }
  return out;
}

std::string number_text(double v) {
  char buf[64];
  if (std::isnan(v)) return "n/a";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return thousands(static_cast<long long>(v));
  if (std::fabs(v) >= 100)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (std::fabs(v) >= 0.01 || v == 0)
    std::snprintf(buf, sizeof buf, "%.3f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string vector_text(const std::vector<double>& v, int decimals) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v[i]);
    out += (i ? ", " : "") + std::string(buf);
  }
  return out + ")";
}

}  // namespace

Report::Row& Report::push(Label key, Row::Kind kind) {
  rows_.emplace_back();
  Row& r = rows_.back();
  r.label = std::move(key.text);
  r.key = std::move(key.key);
  r.kind = kind;
  return r;
}

void Report::add(Label key, double value, const std::string& unit) {
  Row& r = push(std::move(key), Row::number);
  r.num = value;
  r.unit = unit;
}

void Report::add(Label key, const std::string& value) {
  push(std::move(key), Row::text).str = value;
}

void Report::add_bool(Label key, bool value, const std::string& yes, const std::string& no) {
  Row& r = push(std::move(key), Row::boolean);
  r.flag = value;
  r.str = value ? yes : no;
}

void Report::add_vector(Label key, const std::vector<double>& values, int decimals,
                        const std::string& unit) {
  Row& r = push(std::move(key), Row::vector);
  r.nums = values;
  r.decimals = decimals;
  r.unit = unit;
}

void Report::add_note(const std::string& key, const std::string& text) {
  push(key, Row::note).str = text;
}

void Report::add_section(Label key, Report section) {
  push(std::move(key), Row::section).children = std::move(section.rows_);
}

void Report::add_object(Label key, Report object, const std::string& table_text) {
  Row& r = push(std::move(key), Row::object);
  r.children = std::move(object.rows_);
  r.str = table_text;
}

void Report::add_list(Label key, std::vector<std::pair<std::string, Report>> items,
                      const std::vector<std::string>& table_texts) {
  Row& r = push(std::move(key), Row::list);
  for (std::size_t i = 0; i < items.size(); ++i) {
    Row item;
    item.label = items[i].first;
    item.kind = Row::object;
    item.str = i < table_texts.size() ? table_texts[i] : "";
    item.children = std::move(items[i].second.rows_);
    r.children.push_back(std::move(item));
  }
}

void Report::json_only() {
  if (!rows_.empty()) rows_.back().in_table = false;
}

void Report::table_rows(std::FILE* out, const std::vector<Row>& rows, int indent) {
  const std::string pad(indent, ' ');
  for (const Row& r : rows) {
    if (!r.in_table) continue;
    const int width = 28 - indent;
    switch (r.kind) {
      case Row::section:
      case Row::list:
        std::fprintf(out, "%s%s\n", pad.c_str(), r.label.c_str());
        table_rows(out, r.children, indent + 2);
        break;
      case Row::number:
        std::fprintf(out, "%s%-*s %12s %s\n", pad.c_str(), width, r.label.c_str(),
                     number_text(r.num).c_str(), r.unit.c_str());
        break;
      case Row::vector:
        std::fprintf(out, "%s%-*s %s%s%s\n", pad.c_str(), width, r.label.c_str(),
                     vector_text(r.nums, r.decimals).c_str(), r.unit.empty() ? "" : " ",
                     r.unit.c_str());
        break;
      case Row::text:
      case Row::note:
      case Row::boolean:
      case Row::object:
        std::fprintf(out, "%s%-*s %s\n", pad.c_str(), width, r.label.c_str(), r.str.c_str());
        break;
    }
  }
}

void Report::print_table(std::FILE* out, int indent) const { table_rows(out, rows_, indent); }

void Report::json_rows(std::string& out, const std::vector<Row>& rows, bool float_data) {
  out += '{';
  bool first = true;
  for (const Row& r : rows) {
    if (r.kind == Row::note) continue;
    if (!first) out += ", ";
    first = false;
    const std::string key =
        r.key.empty()
            ? json_key(r.label, r.kind == Row::number || r.kind == Row::vector ? r.unit : "")
            : r.key;
    out += json_string(key) + ": ";
    switch (r.kind) {
      case Row::section:
      case Row::object:
        json_rows(out, r.children, float_data);
        break;
      case Row::list:
        out += '[';
        for (std::size_t i = 0; i < r.children.size(); ++i) {
          if (i) out += ", ";
          json_rows(out, r.children[i].children, float_data);
        }
        out += ']';
        break;
      case Row::text:
        out += json_string(r.str);
        break;
      case Row::boolean:
        out += r.flag ? "true" : "false";
        break;
      case Row::vector:
        out += '[';
        for (std::size_t i = 0; i < r.nums.size(); ++i)
          out += (i ? ", " : "") + json_number(r.nums[i], float_data);
        out += ']';
        break;
      case Row::number:  // timings, rates and ratios are measurements
        out += json_number(r.num, float_data || r.unit == "ms" || r.unit == "GB/s" ||
                                      r.unit == "x" || r.unit == "%");
        break;
      case Row::note:
        break;
    }
  }
  out += '}';
}

std::string Report::json() const {
  std::string out;
  json_rows(out, rows_, float_data_);
  return out;
}

void emit(const Report& report, OutputMode mode) {
  if (!mode.quiet) report.print_table(stderr);
  if (mode.json) write_stdout(report.json() + "\n");
}

void write_stdout(const std::string& text) {
  errno = 0;
  const bool ok = std::fwrite(text.data(), 1, text.size(), stdout) == text.size() &&
                  std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (!ok) {
    const int err = errno;
    std::clearerr(stdout);
    throw output_error(std::string("cannot write to standard output: ") +
                           (err ? std::strerror(err) : "write error"),
                       "<stdout>");
  }
}

std::string json_error(const std::string& message, int exit_code, const std::string& file) {
  std::string out = "{\"error\": {\"message\": " + json_string(message) +
                    ", \"exit_code\": " + std::to_string(exit_code);
  if (!file.empty()) out += ", \"file\": " + json_string(file);
  return out + "}}";
}

// Bytes that are not UTF-8 (a file name in another encoding) become U+FFFD: JSON is UTF-8, and a
// strict parser (Python's json) refused the document.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (u >= 0x80) {
      const std::size_t n = detail::utf8_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(s, i, n);
      i += n;
      continue;
    } else {
      out += c;
    }
    ++i;
  }
  return out + '"';
}

std::string json_number(double v, bool measured) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {  // integers as integers
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // A measurement that came from a float (device timings) needs only a float's digits. Data
  // (coordinates, bounds, spacings) read back as the same double: a double that a float holds
  // exactly, such as 0.10000000149011612, is not 0.1.
  if (measured && std::fabs(v) < 3e38 && static_cast<double>(static_cast<float>(v)) == v) {
    for (int digits = 6; digits <= 9; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtof(buf, nullptr) == static_cast<float>(v)) return buf;
    }
  }
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string thousands(long long v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

Report describe_cloud(const Cloud& c) {
  Report r;
  r.add("file", c.path);
  r.add("points", static_cast<double>(c.size()));
  r.add("skipped (not finite)", static_cast<double>(c.size() - c.finite));
  const bool organized = c.height > 1;
  r.add_bool("organized", organized, std::to_string(c.width) + " x " + std::to_string(c.height),
             "no");
  r.add("width", static_cast<double>(c.width));
  r.json_only();
  r.add("height", static_cast<double>(c.height));
  r.json_only();
  r.add("coordinate type", c.coordinate_type);
  r.add_vector("origin", {c.origin[0], c.origin[1], c.origin[2]});
  r.add_bool(Label("coordinates", "float_offsets_exact"), c.exact, "exact (as stored)",
             "float64 as stored (searched in double; float offsets rounded)");
  return r;
}

Report describe_device(const DeviceInfo* cuda) {
  Report d;
  if (!cuda) {
    d.add("backend", "cpu");
    d.add("threads", static_cast<double>(std::max(1u, std::thread::hardware_concurrency())));
    return d;
  }
  d.add("backend", "cuda");
  d.add("name", cuda->name);
  d.add("index", cuda->ordinal);
  d.add_vector("compute capability", {double(cuda->cc_major), double(cuda->cc_minor)}, 0);
  d.add("memory", static_cast<double>(cuda->total_memory), "bytes");
  d.add("multiprocessors", cuda->multiprocessors);
  d.add_bool("integrated", cuda->integrated);
  return d;
}

void add_device(Report& r, const DeviceInfo* dev) {
  r.add_object("device", describe_device(dev),
               dev ? dev->name + " (sm_" + std::to_string(dev->cc_major) +
                         std::to_string(dev->cc_minor) + ")"
                   : "cpu");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---- Progress ----

struct Progress::Ticker {
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

Progress::Progress(std::string label, std::int64_t total, const std::string& unit, bool enabled)
    : label_(std::move(label)),
      unit_(unit),
      total_(total),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {
  if (!enabled_ || total_ >= 0) return;
  ticker_ = std::make_unique<Ticker>();
  ticker_->thread = std::thread([this] {
    std::unique_lock<std::mutex> lock(ticker_->m);
    for (;;) {
      ticker_->cv.wait_for(lock, std::chrono::milliseconds(250), [this] { return ticker_->stop; });
      if (ticker_->stop) return;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (elapsed < 1.0) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %.0f s", elapsed);
      draw(label_ + buf);
    }
  });
}

Progress::~Progress() { finish(); }

bool Progress::wanted(bool quiet) { return !quiet && ::isatty(2) == 1; }

void Progress::draw(const std::string& text) {
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void Progress::update(std::int64_t done) {
  if (!enabled_ || total_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // Only work that has run for a second is worth a line; then at most five redraws a second.
  if (elapsed < 1.0 || std::chrono::duration<double>(now - last_).count() < 0.2) return;
  last_ = now;
  const double rate = done / elapsed;
  const double eta = rate > 0 ? (total_ - done) / rate : 0;
  const char* scale = "";
  double shown = rate;
  if (rate >= 1e6) {
    shown = rate / 1e6;
    scale = " M";
  } else if (rate >= 1e3) {
    shown = rate / 1e3;
    scale = " k";
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %3.0f%%  %.1f%s%s/s  ETA %.0f s",
                100.0 * double(done) / double(total_), shown, scale, unit_.c_str(), eta);
  draw(label_ + buf);
}

void Progress::finish() {
  if (ticker_) {
    {
      std::lock_guard<std::mutex> lock(ticker_->m);
      ticker_->stop = true;
    }
    ticker_->cv.notify_all();
    ticker_->thread.join();
    ticker_.reset();
  }
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace pcnn::app
