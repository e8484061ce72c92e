// Results on stdout: an aligned table for people, or JSON for scripts (one object per result,
// one per line, stable keys). Logs and progress never go to stdout.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace cuflash::cli {

enum class OutputFormat { table, json };

// A flat record with typed fields, kept in insertion order.
class Record {
 public:
  Record& add(const std::string& key, const std::string& value);
  Record& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  Record& add(const std::string& key, double value, int precision = 6);
  Record& add(const std::string& key, int64_t value);
  Record& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  Record& add(const std::string& key, bool value);
  // A shape: "[1,8,17,8]" in the table, an array of integers in JSON.
  Record& add(const std::string& key, const std::vector<int64_t>& values);

  // One-line JSON object; non-finite numbers become null.
  std::string to_json() const;
  const std::vector<std::pair<std::string, std::string>>& cells() const { return text_; }

 private:
  std::vector<std::pair<std::string, std::string>> text_;  // key -> table text
  std::vector<std::string> json_;                          // key -> JSON value
};

// Prints records: as a table with the keys of the first record as the header, or as JSON lines.
void print_records(const std::vector<Record>& records, OutputFormat format, std::FILE* out = stdout);

std::string json_escape(const std::string& text);
std::string format_shape(const std::vector<int64_t>& shape);

// A progress line on stderr ("case 3/40, 12 s elapsed, ETA 2 min"), redrawn in place only when
// stderr is a terminal and quiet mode is off; silent otherwise.
class Progress {
 public:
  Progress(size_t total, bool enabled);
  void step(size_t done, const std::string& label);
  void finish();

 private:
  size_t total_;
  bool enabled_;
  double start_;
};

}  // namespace cuflash::cli
