#include "bench/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/stats.h"
#include "bench/sweep.h"
#include "cli/exit_codes.h"

namespace cuflash::bench {

namespace {

[[noreturn]] void bad_baseline(const std::string& path, const std::string& why) {
  throw cli::UsageError("--compare " + path + ": " + why);
}

double unit_to_ms(const std::string& unit) {
  if (unit == "ns") return 1e-6;
  if (unit == "us") return 1e-3;
  if (unit == "ms") return 1.0;
  if (unit == "s") return 1e3;
  return 0;  // unknown
}

std::string text_member(const Json& object, const std::string& key) {
  const Json* value = find_member(object, key);
  return value != nullptr && value->is_string() ? value->get<std::string>() : "";
}

double number_member(const Json& object, const std::string& key, double fallback) {
  const Json* value = find_member(object, key);
  return value != nullptr && value->is_number() ? value->get<double>() : fallback;
}

// The row's name without the aggregate suffix ("..._median" -> "...").
std::string row_run_name(const Json& row) {
  std::string name = text_member(row, "run_name");
  if (!name.empty()) return name;
  name = text_member(row, "name");
  const std::string aggregate = "_" + text_member(row, "aggregate_name");
  if (aggregate.size() > 1 && name.size() > aggregate.size() &&
      name.compare(name.size() - aggregate.size(), aggregate.size(), aggregate) == 0) {
    name.resize(name.size() - aggregate.size());
  }
  return name;
}

// Regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz).
double incomplete_beta_fraction(double a, double b, double x) {
  constexpr int kMaxTerms = 300;
  constexpr double kTiny = 1e-300;
  constexpr double kEpsilon = 1e-15;
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  d = 1.0 / (std::abs(d) < kTiny ? kTiny : d);
  double result = d;
  for (int m = 1; m <= kMaxTerms; ++m) {
    for (int step = 0; step < 2; ++step) {
      const double numerator =
          step == 0 ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
                    : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1.0 + numerator * d;
      d = 1.0 / (std::abs(d) < kTiny ? kTiny : d);
      c = 1.0 + numerator / c;
      if (std::abs(c) < kTiny) c = kTiny;
      result *= c * d;
      if (step == 1 && std::abs(c * d - 1.0) < kEpsilon) return result;
    }
  }
  return result;
}

double regularized_incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * incomplete_beta_fraction(a, b, x) / a;
  return 1.0 - front * incomplete_beta_fraction(b, a, 1.0 - x) / b;
}

double noise_of(double stddev, double mean) { return mean > 0 ? stddev / mean : 0; }

// The baseline's row of `pass` of case `p`: its own, else the same case in the other backward
// mode, so that a run with --deterministic compared with a default run shows what the fixed
// order costs, and back. The other mode's name is made from the case, not edited from the text
// (suffixes such as /ranks:N follow /deterministic, problem_options.h).
const BaselineRow* baseline_row(const Baseline& baseline, const std::string& pass,
                                const Problem& p) {
  auto row = baseline.rows.find(run_name(pass, p));
  if (row == baseline.rows.end()) {
    Problem other_mode = p;
    other_mode.deterministic = !p.deterministic;
    row = baseline.rows.find(run_name(pass, other_mode));
  }
  return row == baseline.rows.end() ? nullptr : &row->second;
}

}  // namespace

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::faster: return "faster";
    case Verdict::slower: return "slower";
    case Verdict::within_noise: return "within noise";
    case Verdict::too_few_samples: return "too few samples";
  }
  return "?";
}

// The results file a --compare argument names: the file itself, or a result package's folder
// (`--out-dir` of an earlier run), whose results.json it then means.
std::string baseline_file(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_directory(status) &&
      !std::filesystem::is_regular_file(status)) {
    bad_baseline(path, "not a regular file");  // a named pipe would block the read
  }
  if (!std::filesystem::is_directory(status)) return path;
  const std::string results = (std::filesystem::path(path) / "results.json").string();
  if (!std::filesystem::is_regular_file(results, error)) {
    bad_baseline(path, "a folder without results.json (give a result package or its results.json)");
  }
  return results;
}

Baseline load_baseline(const std::string& argument) {
  const std::string path = baseline_file(argument);
  std::ifstream file(path);
  if (!file) bad_baseline(path, "cannot be read");
  Json document;
  try {
    document = Json::parse(file);
  } catch (const Json::exception&) {
    bad_baseline(path, "not a JSON document");
  }
  const Json* benchmarks = find_member(document, "benchmarks");
  if (benchmarks == nullptr || !benchmarks->is_array()) {
    bad_baseline(path, "not a results document (no \"benchmarks\" array)");
  }
  Baseline baseline;
  baseline.path = path;
  if (const Json* context = find_member(document, "context")) {
    if (const Json* run = find_member(*context, "cuflash_bench")) {
      if (const Json* device = find_member(*run, "device")) {
        baseline.device_name = text_member(*device, "name");
        baseline.kernels = text_member(*device, "fp16_bf16_kernels");
      }
    }
  }
  std::map<std::string, double> means, stddevs;  // from separate aggregate rows
  for (const Json& row : *benchmarks) {
    if (!row.is_object()) continue;
    const double to_ms = unit_to_ms(text_member(row, "time_unit"));
    const double real_time = number_member(row, "real_time", NAN);
    const std::string name = row_run_name(row);
    if (name.empty() || to_ms == 0 || std::isnan(real_time)) continue;
    const std::string aggregate = text_member(row, "aggregate_name");
    BaselineRow& entry = baseline.rows[name];
    if (text_member(row, "run_type") == "iteration" || (aggregate.empty() && !row.contains("run_type"))) {
      entry.samples_ms.push_back(real_time * to_ms);
    } else if (aggregate == "median") {
      entry.median_ms = number_member(row, "median_ms", real_time * to_ms);
      entry.count = static_cast<size_t>(number_member(row, "repetitions", 0));
      entry.round_spread = number_member(row, "round_spread", 0);
      if (row.contains("mean_ms")) means[name] = number_member(row, "mean_ms", 0);
      if (row.contains("stddev_ms")) stddevs[name] = number_member(row, "stddev_ms", 0);
    } else if (aggregate == "mean") {
      means.emplace(name, real_time * to_ms);
    } else if (aggregate == "stddev") {
      stddevs.emplace(name, real_time * to_ms);
    }
  }
  for (auto& [name, row] : baseline.rows) {
    if (!row.samples_ms.empty()) {
      const SampleStats s = summarize(row.samples_ms);
      row.median_ms = s.median;
      row.mean_ms = s.mean;
      row.stddev_ms = s.stddev;
      row.count = s.count;
    } else {
      row.mean_ms = means.count(name) ? means[name] : row.median_ms;
      row.stddev_ms = stddevs.count(name) ? stddevs[name] : 0;
    }
  }
  for (auto it = baseline.rows.begin(); it != baseline.rows.end();) {
    it = it->second.median_ms > 0 ? std::next(it) : baseline.rows.erase(it);
  }
  if (baseline.rows.empty()) bad_baseline(path, "holds no timed rows");
  return baseline;
}

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n_a = a.size();
  const size_t n_b = b.size();
  if (n_a == 0 || n_b == 0) return 1;
  std::vector<std::pair<double, int>> all;  // value, side (0: a)
  for (double x : a) all.emplace_back(x, 0);
  for (double x : b) all.emplace_back(x, 1);
  std::sort(all.begin(), all.end());
  const double n = static_cast<double>(all.size());
  double rank_sum_a = 0;
  double tie_term = 0;  // sum of t^3 - t over groups of ties
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (all[k].second == 0) rank_sum_a += average_rank;
    }
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  const double u = rank_sum_a - double(n_a) * double(n_a + 1) / 2;
  const double mean = double(n_a) * double(n_b) / 2;
  const double variance =
      double(n_a) * double(n_b) / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (variance <= 0) return 1;  // every value equal
  const double z = std::max(0.0, std::abs(u - mean) - 0.5) / std::sqrt(variance);
  return std::min(1.0, std::erfc(z / std::sqrt(2.0)));
}

double welch_p(double mean_a, double stddev_a, size_t n_a, double mean_b, double stddev_b,
               size_t n_b) {
  if (n_a < 2 || n_b < 2) return 1;
  const double va = stddev_a * stddev_a / double(n_a);
  const double vb = stddev_b * stddev_b / double(n_b);
  if (va + vb <= 0) return mean_a == mean_b ? 1 : 0;
  const double t = (mean_a - mean_b) / std::sqrt(va + vb);
  const double df = (va + vb) * (va + vb) /
                    (va * va / double(n_a - 1) + vb * vb / double(n_b - 1));
  return std::min(1.0, regularized_incomplete_beta(df / 2, 0.5, df / (df + t * t)));
}

Comparison compare_pass(const std::string& name, const BaselineRow& baseline,
                        const std::vector<double>& samples_ms, double round_spread) {
  const SampleStats now = summarize(samples_ms);
  Comparison c;
  c.name = name;
  c.baseline_median_ms = baseline.median_ms;
  c.median_ms = now.median;
  c.change = now.median / baseline.median_ms - 1;
  c.baseline_noise =
      std::max(noise_of(baseline.stddev_ms, baseline.mean_ms), baseline.round_spread);
  c.noise = std::max(now.noise, round_spread);
  if (!baseline.samples_ms.empty()) {
    c.test = "mann-whitney-u";
    c.p_value = mann_whitney_p(baseline.samples_ms, samples_ms);
  } else {
    c.test = "welch-t";
    c.p_value = welch_p(baseline.mean_ms, baseline.stddev_ms, baseline.count, now.mean,
                        now.stddev, now.count);
  }
  if (baseline.count < kMinSamples || now.count < kMinSamples) {
    c.verdict = Verdict::too_few_samples;
  } else if (c.p_value < kAlpha &&
             std::abs(c.change) >= std::max({kMinChange, c.baseline_noise, c.noise})) {
    c.verdict = now.median < baseline.median_ms ? Verdict::faster : Verdict::slower;
  } else {
    c.verdict = Verdict::within_noise;
  }
  return c;
}

void check_baseline_serves(const Baseline& baseline, const std::vector<Problem>& cases,
                           const std::vector<std::string>& passes, const RunIdentity& identity,
                           bool across) {
  if (!across) {
    if (!baseline.device_name.empty() && !identity.device_name.empty() &&
        baseline.device_name != identity.device_name) {
      bad_baseline(baseline.path, "was measured on " + baseline.device_name + ", this run on " +
                                      identity.device_name +
                                      " (--compare-across compares them anyway)");
    }
    if (!baseline.kernels.empty() && !identity.kernels.empty() &&
        baseline.kernels != identity.kernels) {
      bad_baseline(baseline.path, "ran the " + baseline.kernels + " kernels, this run the " +
                                      identity.kernels +
                                      " kernels (--compare-across compares them anyway)");
    }
  }
  if (cases.empty() || passes.empty()) return;
  for (const Problem& p : cases) {
    for (const std::string& pass : passes) {
      if (baseline_row(baseline, pass, p) != nullptr) return;
    }
  }
  std::string why = "has none of this run's passes (it times " + run_name(passes[0], cases[0]);
  if (!baseline.rows.empty()) why += "; the baseline holds " + baseline.rows.begin()->first;
  bad_baseline(baseline.path, why + ", for example)");
}

std::vector<Comparison> compare_runs(const Baseline& baseline,
                                     const std::vector<CaseRecord>& records) {
  std::vector<Comparison> comparisons;
  for (const CaseRecord& record : records) {
    for (const PassResult& pass : record.passes) {
      if (pass.samples_ms.empty()) continue;
      const std::string name = run_name(pass.pass, record.spec);
      const BaselineRow* row = baseline_row(baseline, pass.pass, record.spec);
      if (row == nullptr) continue;
      comparisons.push_back(compare_pass(name, *row, pass.samples_ms,
                                         round_spread(pass.samples_ms, pass.round_samples)));
    }
  }
  return comparisons;
}

namespace {

std::string format_number(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::vector<std::string> cells(const Comparison& c) {
  return {c.name,
          format_number("%.4f", c.baseline_median_ms),
          format_number("%.4f", c.median_ms),
          format_number("%+.1f%%", 100 * c.change),
          format_number("%.1f%%", 100 * c.baseline_noise),
          format_number("%.1f%%", 100 * c.noise),
          format_number("%.3g", c.p_value),
          to_string(c.verdict)};
}

const std::vector<std::string> kHeader = {"case",       "baseline ms", "ms",
                                          "change",     "noise before", "noise now",
                                          "p",          "verdict"};

}  // namespace

std::string format_comparison(const std::vector<Comparison>& comparisons, const std::string& title,
                              bool markdown) {
  std::vector<std::vector<std::string>> rows{kHeader};
  for (const Comparison& c : comparisons) rows.push_back(cells(c));
  std::ostringstream out;
  out << (markdown ? "\n## " : "\n") << title << "\n\n";
  if (markdown) {
    for (size_t r = 0; r < rows.size(); ++r) {
      out << "|";
      for (const std::string& cell : rows[r]) out << " " << cell << " |";
      out << "\n";
      if (r == 0) {
        out << "|";
        for (size_t i = 0; i < kHeader.size(); ++i) out << " --- |";
        out << "\n";
      }
    }
    return out.str();
  }
  std::vector<size_t> widths(kHeader.size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out << row[i] << (i + 1 < row.size() ? std::string(widths[i] - row[i].size() + 2, ' ') : "");
    }
    out << "\n";
  }
  return out.str();
}

std::string format_comparison_csv(const std::vector<Comparison>& comparisons) {
  std::ostringstream out;
  out << "case,baseline_median_ms,median_ms,change,baseline_noise,noise,p_value,test,verdict\n";
  for (const Comparison& c : comparisons) {
    out << c.name << "," << c.baseline_median_ms << "," << c.median_ms << "," << c.change << ","
        << c.baseline_noise << "," << c.noise << "," << c.p_value << "," << c.test << ","
        << to_string(c.verdict) << "\n";
  }
  return out.str();
}

Json comparison_json(const std::vector<Comparison>& comparisons) {
  Json rows = Json::array();
  for (const Comparison& c : comparisons) {
    rows.push_back(Json{{"name", c.name},
                        {"baseline_median_ms", c.baseline_median_ms},
                        {"median_ms", c.median_ms},
                        {"change", c.change},
                        {"baseline_noise", c.baseline_noise},
                        {"noise", c.noise},
                        {"p_value", c.p_value},
                        {"test", c.test},
                        {"verdict", to_string(c.verdict)}});
  }
  return rows;
}

}  // namespace cuflash::bench
