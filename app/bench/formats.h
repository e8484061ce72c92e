// The outputs of `cuflash bench`: an aligned table (default), markdown, CSV, and JSON in Google
// Benchmark's schema (`context` + `benchmarks[]`) with our own fields added. The schema is
// described in share/docs/bench.md.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"

namespace cuflash::bench {

enum class Format { table, markdown, csv, json };

// "table", "markdown", "csv", "json"; throws cli::UsageError naming --format otherwise.
Format parse_format(const std::string& text);

std::string format_table(const std::vector<CaseRecord>& records, const RunSettings& settings);
std::string format_markdown(const std::vector<CaseRecord>& records, const RunSettings& settings);
std::string format_csv(const std::vector<CaseRecord>& records, const RunSettings& settings);

// The rows of each timed pass in the JSON document.
enum class JsonRows {
  // Google Benchmark's own layout: one iteration row per sample, then the six aggregate rows
  // (mean, median, stddev, cv, min, max). `--format json`, and result packages with --samples.
  all,
  // The median aggregate row alone; it carries every statistic (median_ms, mean_ms, stddev_ms,
  // min_ms, max_ms, noise) and the case's fields. Result packages by default.
  medians,
};

// The Google-Benchmark-style document. `context` holds the run's metadata; the standard context
// keys (date, host_name, executable, num_cpus, library_build_type, json_schema_version) are
// taken from it or filled in.
Json benchmark_json(const std::vector<CaseRecord>& records, const RunSettings& settings,
                    const Json& context, JsonRows rows = JsonRows::all);

// JSON text of `value`: on one line (indent < 0) or indented by `indent` spaces per level, with
// no final newline. Every JSON document `cuflash bench` writes is printed here: non-finite
// numbers become null, and invalid UTF-8 (in a command line, say) becomes U+FFFD, not an error.
std::string json_text(const Json& value, int indent = -1);

// `document` (an object) with each top-level member on a line of its own and an array member
// one element a line, ending in a newline: results.json, one line per benchmark row.
std::string json_lines_text(const Json& document);

std::string format_results(Format format, const std::vector<CaseRecord>& records,
                           const RunSettings& settings, const Json& context);

}  // namespace cuflash::bench
