#include "bench/ncu_csv.h"

#include <cmath>
#include <cstdlib>

namespace cuflash::bench {

namespace {

// Reads one record starting at `at`; leaves `at` after its line end.
std::vector<std::string> read_record(const std::string& text, size_t& at) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (; at < text.size(); ++at) {
    const char c = text[at];
    if (quoted) {
      if (c != '"') {
        fields.back() += c;
      } else if (at + 1 < text.size() && text[at + 1] == '"') {
        fields.back() += '"';
        ++at;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      ++at;
      break;
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

void skip_line(const std::string& text, size_t& at) {
  const size_t end = text.find('\n', at);
  at = end == std::string::npos ? text.size() : end + 1;
}

int column_of(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string cell(const std::vector<std::string>& row, int column) {
  return column >= 0 && static_cast<size_t>(column) < row.size() ? row[column] : std::string();
}

// The columns every layout has, which name the launch rather than a metric.
struct LaunchColumns {
  int id, name, block, grid;
  explicit LaunchColumns(const std::vector<std::string>& header)
      : id(column_of(header, "ID")),
        name(column_of(header, "Kernel Name")),
        block(column_of(header, "Block Size")),
        grid(column_of(header, "Grid Size")) {}

  NcuKernel kernel(const std::vector<std::string>& row) const {
    return NcuKernel{cell(row, id), cell(row, name), cell(row, block), cell(row, grid), {}};
  }
};

// ncu's fixed columns before the metrics in the wide layout; never metrics themselves.
bool is_launch_column(const std::string& name) {
  for (const char* fixed : {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name",
                            "Context", "Stream", "Block Size", "Grid Size", "Device", "CC",
                            "Section Name", "Function Name", "Demangled Name"}) {
    if (name == fixed) return true;
  }
  return false;
}

std::vector<NcuKernel> wide_kernels(const std::vector<std::vector<std::string>>& rows,
                                    size_t header_at) {
  const std::vector<std::string>& header = rows[header_at];
  const LaunchColumns launch(header);
  std::vector<std::string> units(header.size());
  size_t first = header_at + 1;
  // The units row names no launch: its ID cell is empty.
  if (first < rows.size() && cell(rows[first], launch.id).empty()) units = rows[first++];
  units.resize(header.size());
  std::vector<NcuKernel> kernels;
  for (size_t r = first; r < rows.size(); ++r) {
    NcuKernel k = launch.kernel(rows[r]);
    for (size_t c = 0; c < header.size(); ++c) {
      if (!is_launch_column(header[c])) {
        k.metrics[header[c]] = NcuValue{cell(rows[r], static_cast<int>(c)), units[c]};
      }
    }
    kernels.push_back(std::move(k));
  }
  return kernels;
}

std::vector<NcuKernel> long_kernels(const std::vector<std::vector<std::string>>& rows,
                                    size_t header_at) {
  const std::vector<std::string>& header = rows[header_at];
  const LaunchColumns launch(header);
  const int metric = column_of(header, "Metric Name");
  const int unit = column_of(header, "Metric Unit");
  const int value = column_of(header, "Metric Value");
  std::vector<NcuKernel> kernels;
  for (size_t r = header_at + 1; r < rows.size(); ++r) {
    const std::string id = cell(rows[r], launch.id);
    if (kernels.empty() || kernels.back().id != id) kernels.push_back(launch.kernel(rows[r]));
    kernels.back().metrics[cell(rows[r], metric)] =
        NcuValue{cell(rows[r], value), cell(rows[r], unit)};
  }
  return kernels;
}

// The factor of a unit prefix ("n", "u", "m", "", "K", "M", "G", "T", "Ki", ...); -1 unknown.
double prefix_factor(const std::string& prefix) {
  static const std::map<std::string, double> factors{
      {"", 1.0},       {"n", 1e-9},          {"u", 1e-6},          {"m", 1e-3},
      {"K", 1e3},      {"M", 1e6},           {"G", 1e9},           {"T", 1e12},
      {"Ki", 1024.0},  {"Mi", 1048576.0},    {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  const auto it = factors.find(prefix);
  return it == factors.end() ? -1.0 : it->second;
}

// The factor that brings one unit to its base (second, byte): ncu writes time as "ns", "us",
// "ms", "s" or "nsecond", "usecond", ..., sizes as "byte", "Kbyte", "KB", "MiB"...; 1 for units
// without a scale (%, cycle, register/thread).
double unit_factor(const std::string& unit) {
  static const std::map<std::string, double> times{
      {"s", 1.0},     {"ms", 1e-3},       {"us", 1e-6},       {"ns", 1e-9},
      {"second", 1.0}, {"msecond", 1e-3}, {"usecond", 1e-6}, {"nsecond", 1e-9}};
  if (const auto time = times.find(unit); time != times.end()) return time->second;
  for (const char* base : {"byte", "B"}) {
    const std::string b(base);
    if (unit.size() >= b.size() && unit.compare(unit.size() - b.size(), b.size(), b) == 0) {
      const double f = prefix_factor(unit.substr(0, unit.size() - b.size()));
      return f > 0 ? f : 1.0;
    }
  }
  return 1.0;
}

}  // namespace

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  size_t at = 0;
  while (at < text.size()) {
    if (text.compare(at, 2, "==") == 0 || text[at] == '\n' || text[at] == '\r') {
      skip_line(text, at);
      continue;
    }
    rows.push_back(read_record(text, at));
  }
  return rows;
}

std::vector<NcuKernel> parse_ncu_kernels(const std::string& text) {
  const std::vector<std::vector<std::string>> rows = parse_csv(text);
  for (size_t r = 0; r < rows.size(); ++r) {
    if (column_of(rows[r], "Kernel Name") < 0) continue;
    const bool long_layout =
        column_of(rows[r], "Metric Name") >= 0 && column_of(rows[r], "Metric Value") >= 0;
    return long_layout ? long_kernels(rows, r) : wide_kernels(rows, r);
  }
  return {};
}

std::optional<double> ncu_number(const NcuValue& value) {
  std::string digits;
  for (const char c : value.text) {
    if (c != ',' && c != ' ') digits += c;
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || !std::isfinite(number)) {
    return std::nullopt;  // "n/a", text
  }
  const size_t slash = value.unit.find('/');
  if (slash == std::string::npos) return number * unit_factor(value.unit);
  return number * unit_factor(value.unit.substr(0, slash)) /
         unit_factor(value.unit.substr(slash + 1));
}

}  // namespace cuflash::bench
