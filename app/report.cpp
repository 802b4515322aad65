#include "report.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace pcnn::app {

Report::Row& Report::push(const std::string& key, Row::Kind kind) {
  rows_.emplace_back();
  rows_.back().key = key;
  rows_.back().kind = kind;
  return rows_.back();
}

void Report::add(const std::string& key, double value, const std::string& unit) {
  Row& r = push(key, Row::number);
  r.num = value;
  r.unit = unit;
}

void Report::add(const std::string& key, const std::string& value) {
  push(key, Row::text).str = value;
}

void Report::add_note(const std::string& key, const std::string& text) {
  push(key, Row::note).str = text;
}

void Report::add_section(const std::string& key, Report section) {
  push(key, Row::section).children = std::move(section.rows_);
}

namespace {

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

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

// "GPU context start-up" with unit "ms" -> "gpu_context_start_up_ms"
std::string json_key(const std::string& label, const std::string& unit) {
  std::string out;
  bool gap = false;
  for (char c : label + (unit.empty() || unit == "x" ? "" : " " + unit)) {
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

}  // namespace

void Report::table_rows(std::FILE* out, const std::vector<Row>& rows, int indent) {
  for (const Row& r : rows) {
    const std::string pad(indent, ' ');
    switch (r.kind) {
      case Row::section:
        std::fprintf(out, "%s%s\n", pad.c_str(), r.key.c_str());
        table_rows(out, r.children, indent + 2);
        break;
      case Row::number:
        std::fprintf(out, "%s%-*s %12s %s\n", pad.c_str(), 28 - indent, r.key.c_str(),
                     number_text(r.num).c_str(), r.unit.c_str());
        break;
      case Row::text:
      case Row::note:
        std::fprintf(out, "%s%-*s %s\n", pad.c_str(), 28 - indent, r.key.c_str(), r.str.c_str());
        break;
    }
  }
}

void Report::print_table(std::FILE* out, int indent) const { table_rows(out, rows_, indent); }

void Report::json_rows(std::string& out, const std::vector<Row>& rows) {
  out += '{';
  bool first = true;
  for (const Row& r : rows) {
    if (r.kind == Row::note) continue;
    if (!first) out += ", ";
    first = false;
    out += '"' + json_key(r.key, r.kind == Row::number ? r.unit : "") + "\": ";
    if (r.kind == Row::section) {
      json_rows(out, r.children);
    } else if (r.kind == Row::text) {
      out += '"' + json_escape(r.str) + '"';
    } else if (!std::isfinite(r.num)) {
      out += "null";
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.10g", r.num);
      out += buf;
    }
  }
  out += '}';
}

std::string Report::json() const {
  std::string out;
  json_rows(out, rows_);
  return out;
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
  r.add("organized", c.height > 1 ? std::to_string(c.width) + " x " + std::to_string(c.height)
                                  : std::string("no"));
  r.add("coordinate type", c.coordinate_type);
  char buf[160];
  std::snprintf(buf, sizeof buf, "(%.6f, %.6f, %.6f)", c.origin[0], c.origin[1], c.origin[2]);
  r.add("origin", buf);
  r.add("coordinates", c.exact ? "exact (as stored)"
                               : "float64 as stored (searched in double; float offsets rounded)");
  return r;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace pcnn::app
