#include "bench/formats.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "bench/profile_report.h"
#include "cli/exit_codes.h"

namespace cuflash::bench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string printf_text(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

bool any_peak(const std::vector<CaseRecord>& records, const RunSettings& settings) {
  return std::any_of(records.begin(), records.end(), [&](const CaseRecord& r) {
    return percent_of_peak(settings, r.spec.dtype, 1.0).has_value();
  });
}

std::string ok_status(const CaseRecord& record) {
  if (record.verify == "pass") return "ok, verified";
  if (record.verify == "skipped") return "ok, not verified (too large for the CPU reference)";
  return "ok";
}

std::string failure_status(const Failure& f) {
  return std::string("FAILED ") + f.pass + " (" + to_string(f.kind) + "): " + f.reason;
}

// One line of the human-readable outputs (table, markdown).
using Cells = std::vector<std::string>;

// The optional columns of the human-readable outputs.
struct Columns {
  bool peak = false;       // % of --peak-tflops
  bool peak_gbps = false;  // % of --peak-gbps
  bool gpus = false;       // some case ran over several GPUs (--gpus): per GPU, communication
};

Columns columns_of(const std::vector<CaseRecord>& records, const RunSettings& settings) {
  Columns c;
  c.peak = any_peak(records, settings);
  c.peak_gbps = settings.peak_gbps.has_value();
  c.gpus = std::any_of(records.begin(), records.end(),
                       [](const CaseRecord& r) { return r.spec.gpus > 0; });
  return c;
}

Cells header_cells(const Columns& columns) {
  Cells h{"pass", "case", "median_ms", "min_ms", "max_ms", "noise", "TFLOP/s"};
  if (columns.peak) h.push_back("%peak");
  if (columns.gpus) {
    for (const char* c : {"TFLOP/s_per_GPU", "comm_ms", "comm_exposed_ms"}) h.push_back(c);
  }
  h.push_back("GB/s");
  if (columns.peak_gbps) h.push_back("%peak_GB/s");
  for (const char* c : {"alloc_MiB", "memgetinfo_MiB", "timing", "status"}) h.push_back(c);
  return h;
}

Cells pass_cells(const CaseRecord& record, const PassResult& p, const RunSettings& settings,
                 const Columns& columns) {
  const SampleStats s = summarize(p.samples_ms);
  const double tf = tflops(p.flops, s.median);
  Cells c{p.pass, cli::case_label(record.spec), printf_text("%.4g", s.median),
          printf_text("%.4g", s.min), printf_text("%.4g", s.max),
          printf_text("%.1f%%", 100 * s.noise), printf_text("%.1f", tf)};
  if (columns.peak) {
    const auto pct = percent_of_peak(settings, record.spec.dtype, tf);
    c.push_back(pct ? printf_text("%.1f", *pct) : "-");
  }
  if (columns.gpus) {
    const int gpus = record.spec.gpus;
    c.push_back(gpus > 0 ? printf_text("%.1f", tf / gpus) : "-");
    c.push_back(p.communication ? printf_text("%.4g", p.communication->transfer_ms) : "-");
    c.push_back(p.communication ? printf_text("%.4g", p.communication->exposed_ms) : "-");
  }
  const double gbps = gb_per_second(p.bytes, s.median);
  c.push_back(printf_text("%.1f", gbps));
  if (columns.peak_gbps) c.push_back(printf_text("%.1f", *percent_of_peak_gbps(settings, gbps)));
  c.push_back(printf_text("%.1f", double(p.memory.alloc_bytes) / kMiB));
  c.push_back(p.memory.memgetinfo_bytes < 0
                  ? "-"
                  : printf_text("%.1f", double(p.memory.memgetinfo_bytes) / kMiB));
  c.push_back(p.timing.method + " x" + std::to_string(p.timing.calls_per_sample) +
              (p.timing.cold ? " cold" : ""));
  c.push_back(ok_status(record));
  return c;
}

Cells failure_cells(const CaseRecord& record, size_t columns) {
  Cells c(columns, "-");
  c[0] = record.failure->pass;
  c[1] = cli::case_label(record.spec);
  c.back() = failure_status(*record.failure);
  return c;
}

std::vector<Cells> human_rows(const std::vector<CaseRecord>& records, const RunSettings& settings) {
  const Columns columns = columns_of(records, settings);
  std::vector<Cells> rows{header_cells(columns)};
  for (const CaseRecord& r : records) {
    for (const PassResult& p : r.passes) rows.push_back(pass_cells(r, p, settings, columns));
    if (r.failure) rows.push_back(failure_cells(r, rows.front().size()));
  }
  return rows;
}

bool is_numeric_column(const std::string& header) {
  return header != "pass" && header != "case" && header != "timing" && header != "status";
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// Decimal text that reads back as the same double, as short as 15 to 17 digits allow
// ("0.1", "1e-05", "42"): the CSV's numbers.
std::string shortest_double(double value) {
  char buffer[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string number_or_empty(std::optional<double> value) {
  return value ? shortest_double(*value) : std::string();
}

}  // namespace

Format parse_format(const std::string& text) {
  if (text == "table") return Format::table;
  if (text == "markdown") return Format::markdown;
  if (text == "csv") return Format::csv;
  if (text == "json") return Format::json;
  throw cli::UsageError("--format: unknown value '" + text +
                        "' (expected table, markdown, csv or json)");
}

std::string format_table(const std::vector<CaseRecord>& records, const RunSettings& settings) {
  const std::vector<Cells> rows = human_rows(records, settings);
  std::vector<size_t> width(rows.front().size(), 0);
  for (const Cells& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const Cells& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool right = is_numeric_column(rows.front()[c]);
      line += (c ? "  " : "") + (right ? pad + row[c] : row[c] + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string format_markdown(const std::vector<CaseRecord>& records, const RunSettings& settings) {
  const std::vector<Cells> rows = human_rows(records, settings);
  const auto line = [](const Cells& cells) {
    std::string text = "|";
    for (const std::string& cell : cells) text += " " + cell + " |";
    return text + "\n";
  };
  std::string out = line(rows.front());
  Cells rule;
  for (const std::string& h : rows.front()) rule.push_back(is_numeric_column(h) ? "---:" : "---");
  out += line(rule);
  for (size_t i = 1; i < rows.size(); ++i) {
    Cells escaped = rows[i];
    for (std::string& cell : escaped) {
      for (size_t at = cell.find('|'); at != std::string::npos; at = cell.find('|', at + 2)) {
        cell.replace(at, 1, "\\|");
      }
    }
    out += line(escaped);
  }
  return out;
}

namespace {

const std::vector<std::string> kCsvColumns{
    "name", "pass", "backend", "dtype", "batch", "heads", "heads_kv", "seq_q", "seq_k",
    "head_dim", "mask", "layout", "status", "error", "median_ms", "mean_ms", "min_ms", "max_ms",
    "stddev_ms", "noise", "tflops", "pct_of_peak", "bytes", "gbps", "pct_of_peak_gbps",
    "alloc_bytes", "workspace_bytes",
    "memgetinfo_bytes", "samples", "calls_per_sample", "timing", "cold", "verify"};

// The first twelve CSV columns: which benchmark the row is (name to layout).
std::vector<std::string> case_columns(const CaseRecord& r, const std::string& pass,
                                      const RunSettings& settings) {
  const AttentionShape& p = r.spec.shape;
  return {run_name(pass, r.spec), pass, settings.backend, std::string(to_string(r.spec.dtype)),
          std::to_string(p.batch), std::to_string(p.heads), std::to_string(p.heads_kv),
          std::to_string(p.seq_q), std::to_string(p.seq_k), std::to_string(p.head_dim),
          std::string(to_string(r.spec.mask)), std::string(to_string(r.spec.layout))};
}

std::vector<std::string> csv_pass_row(const CaseRecord& r, const PassResult& p,
                                      const RunSettings& settings) {
  const SampleStats s = summarize(p.samples_ms);
  const double tf = tflops(p.flops, s.median);
  const double gbps = gb_per_second(p.bytes, s.median);
  std::vector<std::string> row = case_columns(r, p.pass, settings);
  const std::vector<std::string> rest{
      "ok", "", shortest_double(s.median), shortest_double(s.mean), shortest_double(s.min),
      shortest_double(s.max), shortest_double(s.stddev), shortest_double(s.noise),
      shortest_double(tf), number_or_empty(percent_of_peak(settings, r.spec.dtype, tf)),
      shortest_double(p.bytes), shortest_double(gbps),
      number_or_empty(percent_of_peak_gbps(settings, gbps)), std::to_string(p.memory.alloc_bytes), std::to_string(p.memory.workspace_bytes),
      p.memory.memgetinfo_bytes < 0 ? "" : std::to_string(p.memory.memgetinfo_bytes),
      std::to_string(s.count), std::to_string(p.timing.calls_per_sample), p.timing.method,
      p.timing.cold ? "1" : "0", r.verify};
  row.insert(row.end(), rest.begin(), rest.end());
  return row;
}

std::vector<std::string> csv_failure_row(const CaseRecord& r, const RunSettings& settings) {
  std::vector<std::string> row = case_columns(r, r.failure->pass, settings);
  row.push_back("failed");
  row.push_back(std::string(to_string(r.failure->kind)) + ": " + r.failure->reason);
  row.resize(kCsvColumns.size());
  row.back() = r.verify;
  return row;
}

void append_csv_row(std::string& out, const std::vector<std::string>& row) {
  for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + csv_field(row[i]);
  out += "\n";
}

}  // namespace

std::string format_csv(const std::vector<CaseRecord>& records, const RunSettings& settings) {
  std::string out;
  append_csv_row(out, kCsvColumns);
  for (const CaseRecord& r : records) {
    for (const PassResult& p : r.passes) append_csv_row(out, csv_pass_row(r, p, settings));
    if (r.failure) append_csv_row(out, csv_failure_row(r, settings));
  }
  return out;
}

namespace {

// Fields every row of one benchmark shares, as Google Benchmark writes them.
Json row_base(const std::string& name, const std::string& run, int64_t family, int64_t samples,
              const RunSettings& settings) {
  return Json{{"name", name},
              {"family_index", family},
              {"per_family_instance_index", 0},
              {"run_name", run},
              {"run_type", "iteration"},
              {"repetitions", samples},
              {"threads", 1},
              {"backend", settings.backend}};
}

// real_time and cpu_time: GPU time per call in microseconds (cpu_time repeats it; compare.py
// needs both, and prints whole numbers of the unit, so milliseconds would show as 0).
void set_times(Json& row, int64_t iterations, double ms) {
  const double us = 1e3 * ms;
  row["iterations"] = iterations;
  row["real_time"] = us;
  row["cpu_time"] = us;
  row["time_unit"] = "us";
}

// Aggregates are times, except cv (a fraction, as Google Benchmark writes it).
void set_aggregate(Json& row, const char* aggregate, int64_t samples, double value) {
  const bool is_cv = std::string(aggregate) == "cv";
  row["run_type"] = "aggregate";
  row["aggregate_name"] = aggregate;
  row["aggregate_unit"] = is_cv ? "percentage" : "time";
  if (is_cv) {
    row["iterations"] = samples;
    row["real_time"] = value;
    row["cpu_time"] = value;
    row["time_unit"] = "us";
  } else {
    set_times(row, samples, value);
  }
}

// [[begin, end], ...]: when each round's samples ran (results.h, TimeSpan).
Json sample_spans_json(const std::vector<TimeSpan>& spans) {
  Json list = Json::array();
  for (const TimeSpan& span : spans) list.push_back(Json::array({span.begin_s, span.end_s}));
  return list;
}

// Our fields, on the median row: what the case is and what the pass measured besides time.
void add_case_fields(Json& row, const CaseRecord& r, const PassResult& p,
                     const RunSettings& settings, const SampleStats& s) {
  const AttentionShape& c = r.spec.shape;
  const double tf = tflops(p.flops, s.median);
  const auto pct = percent_of_peak(settings, r.spec.dtype, tf);
  const double gbps = gb_per_second(p.bytes, s.median);
  const auto pct_gbps = percent_of_peak_gbps(settings, gbps);
  row.update(Json{
      {"pass", p.pass},
      {"dtype", std::string(to_string(r.spec.dtype))},
      {"batch", c.batch},
      {"heads", c.heads},
      {"heads_kv", c.heads_kv},
      {"seq_q", c.seq_q},
      {"seq_k", c.seq_k},
      {"head_dim", c.head_dim},
      {"mask", std::string(to_string(r.spec.mask))},
      {"window",
       r.spec.window.bounded() ? Json::array({r.spec.window.left, r.spec.window.right}) : Json()},
      {"softcap", r.spec.softcap},
      {"alibi", !r.spec.alibi_slopes.empty()},
      {"layout", std::string(to_string(r.spec.layout))},
      {"deterministic", r.spec.deterministic},  // the backward's dQ order (--deterministic)
      {"flops", p.flops},
      {"tflops", tf},
      {"pct_of_peak", pct ? Json(*pct) : Json()},
      {"bytes", p.bytes},
      {"gbps", gbps},
      {"pct_of_peak_gbps", pct_gbps ? Json(*pct_gbps) : Json()},
      {"noise", s.noise},
      {"median_ms", s.median},
      {"mean_ms", s.mean},
      {"stddev_ms", s.stddev},
      {"min_ms", s.min},
      {"max_ms", s.max},
      {"rounds", static_cast<int64_t>(std::max<size_t>(p.round_samples.size(), 1))},
      {"round_spread", round_spread(p.samples_ms, p.round_samples)},
      {"sample_spans", sample_spans_json(p.sample_spans)},
      {"alloc_bytes", p.memory.alloc_bytes},
      {"workspace_bytes", p.memory.workspace_bytes},
      {"memgetinfo_bytes",
       p.memory.memgetinfo_bytes < 0 ? Json() : Json(p.memory.memgetinfo_bytes)},
      {"calls_per_sample", p.timing.calls_per_sample},
      {"warmup", p.timing.warmup},
      {"timing", p.timing.method},
      {"cold", p.timing.cold},
      {"verify", r.verify},
      {"kernels", p.kernels}});
  if (r.spec.gpus > 0) {  // over several GPUs: per GPU, and what the transfers cost
    row["gpus"] = r.spec.gpus;
    row["tflops_per_gpu"] = tf / r.spec.gpus;
    row["comm_ms"] = p.communication ? Json(p.communication->transfer_ms) : Json();
    row["comm_exposed_ms"] = p.communication ? Json(p.communication->exposed_ms) : Json();
  }
}

void add_pass_rows(Json& benchmarks, const CaseRecord& r, const PassResult& p, int64_t family,
                   const RunSettings& settings, JsonRows rows) {
  const std::string run = run_name(p.pass, r.spec);
  const SampleStats s = summarize(p.samples_ms);
  const auto n = static_cast<int64_t>(s.count);
  if (rows == JsonRows::medians) {
    Json row = row_base(run + "_median", run, family, n, settings);
    set_aggregate(row, "median", n, s.median);
    add_case_fields(row, r, p, settings, s);
    benchmarks.push_back(std::move(row));
    return;
  }
  for (size_t i = 0; i < p.samples_ms.size(); ++i) {
    Json row = row_base(run, run, family, n, settings);
    row["repetition_index"] = static_cast<int64_t>(i);
    set_times(row, p.timing.calls_per_sample, p.samples_ms[i]);
    benchmarks.push_back(std::move(row));
  }
  const std::pair<const char*, double> aggregates[] = {
      {"mean", s.mean}, {"median", s.median}, {"stddev", s.stddev},
      {"cv", s.noise},  {"min", s.min},       {"max", s.max}};
  for (const auto& [aggregate, value] : aggregates) {
    Json row = row_base(run + "_" + aggregate, run, family, n, settings);
    set_aggregate(row, aggregate, n, value);
    if (std::string(aggregate) == "median") add_case_fields(row, r, p, settings, s);
    benchmarks.push_back(std::move(row));
  }
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

Json context_json(const Json& metadata) {
  const auto text = [&](const char* key, const char* fallback) -> Json {
    const Json* v = find_member(metadata, key);
    return v ? *v : Json(fallback);
  };
  const Json* build = find_member(metadata, "cuflash");
  const Json* build_type = build ? find_member(*build, "build_type") : nullptr;
  const Json* cpus = find_member(metadata, "num_cpus");
  return Json{
      {"date", text("started_utc", "")},
      {"host_name", text("host_name", "")},
      {"executable", text("executable", "")},
      {"num_cpus", cpus ? *cpus : Json(int64_t(std::thread::hardware_concurrency()))},
      {"library_build_type", build_type && build_type->is_string()
                                 ? lower(build_type->get<std::string>())
                                 : std::string("unknown")},
      {"json_schema_version", 1},
      {"cuflash_bench", metadata}};
}

}  // namespace

Json benchmark_json(const std::vector<CaseRecord>& records, const RunSettings& settings,
                    const Json& metadata, JsonRows rows) {
  Json benchmarks = Json::array();
  Json failures = Json::array();
  int64_t family = 0;
  for (const CaseRecord& r : records) {
    for (const PassResult& p : r.passes) add_pass_rows(benchmarks, r, p, family++, settings, rows);
    if (r.failure) failures.push_back(failure_json(r));
  }
  Json doc = Json::object();  // member by member: an initializer list would copy the rows
  doc["context"] = context_json(metadata);
  doc["benchmarks"] = std::move(benchmarks);
  doc["failures"] = std::move(failures);
  Json profiles = profiles_json(records);
  if (!profiles.empty()) doc["profiles"] = std::move(profiles);  // only with --profile
  return doc;
}

std::string json_text(const Json& value, int indent) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string json_lines_text(const Json& document) {
  if (!document.is_object() || document.empty()) return json_text(document) + "\n";
  std::string out = "{";
  for (auto member = document.begin(); member != document.end(); ++member) {
    out += (member == document.begin() ? "\n" : ",\n") + json_text(Json(member.key())) + ":";
    const Json& value = member.value();
    if (!value.is_array() || value.empty()) {
      out += json_text(value);
      continue;
    }
    out += "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ",\n" : "\n") + json_text(value[i]);
    out += "\n]";
  }
  return out + "\n}\n";
}

std::string format_results(Format format, const std::vector<CaseRecord>& records,
                           const RunSettings& settings, const Json& context) {
  switch (format) {
    case Format::table: return format_table(records, settings);
    case Format::markdown: return format_markdown(records, settings);
    case Format::csv: return format_csv(records, settings);
    case Format::json: return json_text(benchmark_json(records, settings, context), 2) + "\n";
  }
  return {};
}

}  // namespace cuflash::bench
