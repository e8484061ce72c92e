// `cuflash bench --compare BASELINE`: per case and pass, how the median time moved against an
// earlier run, the noise of both, and a verdict decided by a statistical test on the samples
// rather than by the medians alone (share/docs/bench.md, "Comparing two runs").
//
// The test: with per-sample rows on both sides (a baseline written by `--format json` or by a
// package with --samples), the two-sided Mann-Whitney U test, as Google Benchmark's compare.py
// does; with only the baseline's aggregates (a compact result package), Welch's t-test on the
// means, standard deviations and sample counts. A change is "faster" or "slower" when the test's
// p-value is below kAlpha and the medians differ by at least the larger of the two runs' noise
// and kMinChange; "within noise" otherwise. A run's noise is the larger of its samples' relative
// standard deviation and, for runs taken in rounds (`--rounds`), the spread of its rounds'
// medians. The second condition is there because 30 back-to-back samples make the test see
// shifts far smaller than what separates two runs of the same binary on the same GPU minutes
// apart (clocks, temperature): on an H200, two back-to-back runs of the `seed` sweep differed by
// a significant 1-3% on many cases and by up to 9% on a few long ones; rounds put that drift
// into each run's own noise.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/results.h"

namespace cuflash::bench {

inline constexpr double kAlpha = 0.05;
inline constexpr double kMinChange = 0.01;  // 1%
// Fewer samples than this on either side decide nothing (compare.py asks for 9 or more).
inline constexpr size_t kMinSamples = 5;

// The timings of one pass of one case in the baseline (row names such as
// "fwd/fp16/b:1/h:8/sq:1024/sk:1024/d:64/causal:0").
struct BaselineRow {
  std::vector<double> samples_ms;  // empty when the document holds aggregates only
  double median_ms = 0, mean_ms = 0, stddev_ms = 0;
  size_t count = 0;  // samples behind the aggregates
  double round_spread = 0;  // the row's "round_spread" (stats.h); 0 when absent
};

struct Baseline {
  std::string path;
  std::string device_name;  // "" when the document does not say (plain Google Benchmark JSON)
  std::string kernels;      // fp16_bf16_kernels: "wgmma", "mma.sync" or ""
  std::map<std::string, BaselineRow> rows;
};

// Reads a results.json of a package (compact or with --samples) or any Google Benchmark JSON
// with repetitions. Throws cli::UsageError naming the file when it cannot be read or is not such
// a document.
Baseline load_baseline(const std::string& path);

enum class Verdict { faster, slower, within_noise, too_few_samples };
const char* to_string(Verdict verdict);

struct Comparison {
  std::string name;  // the row name: pass/case
  double baseline_median_ms = 0, median_ms = 0;
  double change = 0;  // median_ms / baseline_median_ms - 1
  double baseline_noise = 0, noise = 0;  // max(relative standard deviation, round spread)
  double p_value = 1;
  std::string test;  // "mann-whitney-u" or "welch-t"
  Verdict verdict = Verdict::within_noise;
};

// Two-sided p-values. mann_whitney_p uses the normal approximation with the tie and continuity
// corrections; welch_p Student's t distribution with Welch-Satterthwaite degrees of freedom.
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);
double welch_p(double mean_a, double stddev_a, size_t n_a, double mean_b, double stddev_b,
               size_t n_b);

// A pass (its samples and their round spread, stats.h) against its baseline row.
Comparison compare_pass(const std::string& name, const BaselineRow& baseline,
                        const std::vector<double>& samples_ms, double round_spread = 0);

// The GPU model and kernel family of this run, for the checks below.
struct RunIdentity {
  std::string device_name;
  std::string kernels;
};

// The checks a run makes of its baseline before it times anything: throws cli::UsageError
// naming the file when the GPU model or the kernel family differ and `across` is false (the
// protocol never combines them), or when the baseline has no row of any of the `passes` ("fwd",
// "bwd") of any of the `cases` (either backward mode matches, as in compare_runs()).
void check_baseline_serves(const Baseline& baseline, const std::vector<Problem>& cases,
                           const std::vector<std::string>& passes, const RunIdentity& identity,
                           bool across);

// Every timed pass of `records` that the baseline has, in order: the row of the same name, or
// where there is none the same case in the other backward mode (default against
// --deterministic, and back). Empty when none has one (the cases that the baseline has failed).
std::vector<Comparison> compare_runs(const Baseline& baseline,
                                     const std::vector<CaseRecord>& records);

// The comparison as an aligned table, markdown, CSV, or JSON (an array of objects).
std::string format_comparison(const std::vector<Comparison>& comparisons, const std::string& title,
                              bool markdown);
std::string format_comparison_csv(const std::vector<Comparison>& comparisons);
Json comparison_json(const std::vector<Comparison>& comparisons);

}  // namespace cuflash::bench
