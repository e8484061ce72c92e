// `cuflash bench --compare`: the statistical tests, the verdicts on synthetic samples, reading
// baselines (every sample, or aggregates only), the refusals, and the binary's exit code for a
// file that is no baseline.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/compare.h"
#include "bench/formats.h"
#include "bench/session.h"
#include "bench/stats.h"
#include "bench/sweep.h"
#include "cli/exit_codes.h"
#include "spawn_util.h"

namespace fs = std::filesystem;
using namespace cuflash;
using namespace cuflash::bench;
using spawn_test::Outcome;
using spawn_test::run_shell;
using spawn_test::TempDir;

namespace {

// `count` samples around `ms` with relative noise `noise` (normal), from a fixed seed.
std::vector<double> samples_around(double ms, double noise, int count, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> samples;
  for (int i = 0; i < count; ++i) samples.push_back(ms * (1.0 + noise * normal(generator)));
  return samples;
}

BaselineRow row_of(const std::vector<double>& samples) {
  BaselineRow row;
  row.samples_ms = samples;
  const SampleStats s = summarize(samples);
  row.median_ms = s.median;
  row.mean_ms = s.mean;
  row.stddev_ms = s.stddev;
  row.count = s.count;
  return row;
}

// The same row with its aggregates only, as a compact result package holds it.
BaselineRow aggregates_of(const std::vector<double>& samples) {
  BaselineRow row = row_of(samples);
  row.samples_ms.clear();
  return row;
}

Problem small_case() {
  Problem p;
  p.shape = AttentionShape{1, 8, 8, 1024, 1024, 64};
  return p;
}

CaseRecord record_with(const Problem& p, const std::vector<double>& fwd) {
  CaseRecord r;
  r.spec = p;
  PassResult pass;
  pass.pass = "fwd";
  pass.samples_ms = fwd;
  pass.flops = pass_flops(p, "fwd");
  r.passes = {pass};
  return r;
}

// A results document with one pass of `p`: every sample's row plus the median row, or the
// median row alone, on `device` with `kernels`.
std::string baseline_document(const Problem& p, const std::vector<double>& samples,
                              bool with_samples, const std::string& device,
                              const std::string& kernels) {
  // The run's metadata, which the document keeps as context.cuflash_bench.
  const Json context = Json{{"device", {{"name", device}, {"fp16_bf16_kernels", kernels}}}};
  const Json document = benchmark_json({record_with(p, samples)}, RunSettings{}, context,
                                       with_samples ? JsonRows::all : JsonRows::medians);
  return json_lines_text(document);
}

}  // namespace

TEST_CASE("compare: Mann-Whitney U and Welch's t against known values", "[bench][compare]") {
  // Fully separated samples of 5: U = 0, z = (12.5 - 0.5) / sqrt(25 * 11 / 12); two-sided
  // p = erfc(z / sqrt 2) = 0.01219 (the asymptotic test with continuity correction).
  CHECK(mann_whitney_p({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}) == Approx(0.012185).margin(2e-6));
  CHECK(mann_whitney_p({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}) == Approx(0.012185).margin(2e-6));
  CHECK(mann_whitney_p({1, 1, 1}, {1, 1, 1}) == 1.0);  // every value tied
  // Welch with n = 2 and equal variances has 2 degrees of freedom, where the two-sided p of t
  // is 1 - |t| / sqrt(2 + t^2): means 0 and 1, standard deviations 1 give t = -1.
  CHECK(welch_p(0, 1, 2, 1, 1, 2) == Approx(1 - 1 / std::sqrt(3.0)).margin(1e-9));
  // Large samples: t = 5 at about 58 degrees of freedom, far below 0.05; equal means: 1.
  CHECK(welch_p(10, 1, 30, 11.29, 1, 30) < 1e-4);
  CHECK(welch_p(10, 1, 30, 10, 1, 30) == Approx(1.0));
}

TEST_CASE("compare: verdicts on synthetic samples", "[bench][compare]") {
  const std::vector<double> before = samples_around(1.0, 0.01, 30, 1);
  for (const bool aggregates_only : {false, true}) {
    INFO("baseline with " << (aggregates_only ? "aggregates only" : "every sample"));
    const BaselineRow baseline = aggregates_only ? aggregates_of(before) : row_of(before);
    const std::string test = aggregates_only ? "welch-t" : "mann-whitney-u";

    const Comparison same = compare_pass("fwd/x", baseline, samples_around(1.0, 0.01, 30, 2));
    CHECK(same.verdict == Verdict::within_noise);
    CHECK(same.test == test);

    // 0.2% faster with 1% noise: a real shift, but below what 30 samples can tell.
    const Comparison slight = compare_pass("fwd/x", baseline, samples_around(0.998, 0.01, 30, 3));
    CHECK(slight.verdict == Verdict::within_noise);
    CHECK(slight.change < 0);

    // 0.5% faster with 0.05% noise: significant for the test, but smaller than kMinChange.
    const std::vector<double> quiet = samples_around(1.0, 0.0005, 30, 10);
    const BaselineRow quiet_baseline = aggregates_only ? aggregates_of(quiet) : row_of(quiet);
    const Comparison small =
        compare_pass("fwd/x", quiet_baseline, samples_around(0.995, 0.0005, 30, 11));
    CHECK(small.p_value < kAlpha);
    CHECK(small.verdict == Verdict::within_noise);

    const Comparison faster = compare_pass("fwd/x", baseline, samples_around(0.9, 0.01, 30, 4));
    CHECK(faster.verdict == Verdict::faster);
    CHECK(faster.p_value < 1e-6);
    CHECK(faster.change == Approx(-0.1).margin(0.01));

    const Comparison slower = compare_pass("fwd/x", baseline, samples_around(1.05, 0.01, 30, 5));
    CHECK(slower.verdict == Verdict::slower);
    CHECK(slower.noise == Approx(0.01).margin(0.005));
    CHECK(slower.baseline_noise == Approx(0.01).margin(0.005));
  }
  // Runs taken in rounds: a 4% shift with 1% noise inside each round is within noise when the
  // rounds of either run landed 5% apart (the drift between runs that the rounds measured).
  BaselineRow drifting = row_of(before);
  drifting.round_spread = 0.05;
  const std::vector<double> shifted = samples_around(1.04, 0.01, 30, 12);
  CHECK(compare_pass("fwd/x", drifting, shifted).verdict == Verdict::within_noise);
  CHECK(compare_pass("fwd/x", drifting, shifted).baseline_noise == 0.05);
  CHECK(compare_pass("fwd/x", row_of(before), shifted, 0.05).verdict == Verdict::within_noise);
  CHECK(compare_pass("fwd/x", row_of(before), shifted, 0.05).noise == 0.05);
  CHECK(compare_pass("fwd/x", row_of(before), shifted, 0.02).verdict == Verdict::slower);
  CHECK(compare_pass("fwd/x", drifting, samples_around(1.1, 0.01, 30, 13)).verdict ==
        Verdict::slower);

  const Comparison few = compare_pass("fwd/x", row_of({1, 1.01, 0.99}), {2, 2.01, 1.99});
  CHECK(few.verdict == Verdict::too_few_samples);
}

TEST_CASE("compare: baselines from files, matching by case, refusals", "[bench][compare]") {
  TempDir tmp;
  const Problem p = small_case();
  const std::vector<double> before = samples_around(1.0, 0.01, 30, 6);
  const std::vector<CaseRecord> now = {record_with(p, samples_around(0.8, 0.01, 30, 7))};
  const RunIdentity h200{"NVIDIA H200", "wgmma"};

  for (const bool with_samples : {true, false}) {
    const fs::path file = tmp.path / (with_samples ? "full.json" : "compact.json");
    std::ofstream(file) << baseline_document(p, before, with_samples, "NVIDIA H200", "wgmma");
    const Baseline baseline = load_baseline(file.string());
    REQUIRE(baseline.rows.size() == 1);
    CHECK(baseline.device_name == "NVIDIA H200");
    CHECK(baseline.rows.begin()->second.samples_ms.size() == (with_samples ? 30u : 0u));
    CHECK(baseline.rows.begin()->second.count == 30);
    const std::vector<Comparison> c = compare_runs(baseline, now);
    REQUIRE(c.size() == 1);
    CHECK(c[0].name == run_name("fwd", p));
    CHECK(c[0].verdict == Verdict::faster);
    CHECK(c[0].test == (with_samples ? "mann-whitney-u" : "welch-t"));
  }

  // A baseline taken in rounds carries its round spread to the comparison.
  CaseRecord rounds = record_with(p, before);
  rounds.passes[0].samples_ms[0] = 1.5;  // round 1's median moves up, its spread with it
  rounds.passes[0].samples_ms[1] = 1.5;
  rounds.passes[0].round_samples = {3, 27};
  const double spread = round_spread(rounds.passes[0].samples_ms, {3, 27});
  CHECK(spread > 0.4);
  const fs::path in_rounds = tmp.path / "rounds.json";
  std::ofstream(in_rounds) << json_lines_text(
      benchmark_json({rounds}, RunSettings{},
                     Json{{"device", {{"name", "NVIDIA H200"}, {"fp16_bf16_kernels", "wgmma"}}}},
                     JsonRows::medians));
  const Baseline with_spread = load_baseline(in_rounds.string());
  CHECK(with_spread.rows.begin()->second.round_spread == Approx(spread));
  const std::vector<Comparison> drifted = compare_runs(with_spread, now);
  REQUIRE(drifted.size() == 1);
  CHECK(drifted[0].baseline_noise == Approx(spread));
  CHECK(drifted[0].verdict == Verdict::within_noise);  // 20% faster, but the rounds moved 40%+

  const fs::path other_gpu = tmp.path / "a100.json";
  std::ofstream(other_gpu) << baseline_document(p, before, true, "NVIDIA A100", "mma.sync");
  const Baseline a100 = load_baseline(other_gpu.string());
  const std::vector<std::string> fwd = {"fwd"};
  CHECK_THROWS_WITH(check_baseline_serves(a100, {p}, fwd, h200, false),
                    Catch::Contains(other_gpu.string()) && Catch::Contains("NVIDIA A100"));
  CHECK_NOTHROW(check_baseline_serves(a100, {p}, fwd, h200, true));  // asked for explicitly
  CHECK(compare_runs(a100, now).size() == 1);
  const fs::path other_kernels = tmp.path / "portable.json";
  std::ofstream(other_kernels) << baseline_document(p, before, true, "NVIDIA H200", "mma.sync");
  CHECK_THROWS_WITH(
      check_baseline_serves(load_baseline(other_kernels.string()), {p}, fwd, h200, false),
      Catch::Contains("mma.sync"));

  Problem other = p;
  other.dtype = DType::bf16;  // a case the baseline does not have
  CHECK_THROWS_WITH(check_baseline_serves(a100, {other}, fwd, h200, true),
                    Catch::Contains("has none of this run's passes"));
  CHECK_THROWS_AS(check_baseline_serves(a100, {p}, {"bwd"}, h200, true), cli::UsageError);
  CHECK(compare_runs(a100, {record_with(other, before)}).empty());

  const fs::path not_json = tmp.path / "notes.txt";
  std::ofstream(not_json) << "median 1.0 ms\n";
  CHECK_THROWS_WITH(load_baseline(not_json.string()),
                    Catch::Contains(not_json.string()) && Catch::Contains("not a JSON"));
  const fs::path no_rows = tmp.path / "metadata.json";
  std::ofstream(no_rows) << R"({"status": "complete"})";
  CHECK_THROWS_WITH(load_baseline(no_rows.string()), Catch::Contains("not a results document"));
  CHECK_THROWS_WITH(load_baseline((tmp.path / "missing.json").string()),
                    Catch::Contains("cannot be read"));
  // A named pipe with no writer: refused at once, not read (which would wait for a writer).
  const std::string pipe = (tmp.path / "pipe.json").string();
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_baseline(pipe), Catch::Contains("not a regular file"));
}

// A --deterministic run against a default baseline (and back) compares the same cases in the
// two backward modes; where the baseline has the run's own rows, those are taken.
TEST_CASE("compare: a deterministic run against a default baseline, and back", "[bench][compare]") {
  TempDir tmp;
  const Problem plain = small_case();
  Problem deterministic = plain;
  deterministic.deterministic = true;
  REQUIRE(run_name("fwd", deterministic) == run_name("fwd", plain) + "/deterministic");
  const fs::path plain_file = tmp.path / "default.json";
  std::ofstream(plain_file) << baseline_document(plain, samples_around(1.0, 0.01, 30, 20), true,
                                                 "NVIDIA H200", "wgmma");
  const fs::path deterministic_file = tmp.path / "deterministic.json";
  std::ofstream(deterministic_file) << baseline_document(
      deterministic, samples_around(1.2, 0.01, 30, 21), true, "NVIDIA H200", "wgmma");

  const std::vector<Comparison> slower =
      compare_runs(load_baseline(plain_file.string()),
                   {record_with(deterministic, samples_around(1.2, 0.01, 30, 22))});
  REQUIRE(slower.size() == 1);
  CHECK(slower[0].name == run_name("fwd", deterministic));
  CHECK(slower[0].baseline_median_ms == Approx(1.0).margin(0.01));
  CHECK(slower[0].verdict == Verdict::slower);

  const std::vector<Comparison> faster =
      compare_runs(load_baseline(deterministic_file.string()),
                   {record_with(plain, samples_around(1.0, 0.01, 30, 23))});
  REQUIRE(faster.size() == 1);
  CHECK(faster[0].name == run_name("fwd", plain));
  CHECK(faster[0].verdict == Verdict::faster);

  // Suffixes after /deterministic (context parallelism's /ranks:N): still the same case.
  Problem ranked = plain;
  ranked.ranks = 2;
  Problem ranked_deterministic = ranked;
  ranked_deterministic.deterministic = true;
  const fs::path ranked_file = tmp.path / "ranked.json";
  std::ofstream(ranked_file) << baseline_document(ranked, samples_around(1.0, 0.01, 30, 27), true,
                                                  "NVIDIA H200", "wgmma");
  const Baseline ranked_baseline = load_baseline(ranked_file.string());
  CHECK_NOTHROW(check_baseline_serves(ranked_baseline, {ranked_deterministic}, {"fwd"},
                                      RunIdentity{"NVIDIA H200", "wgmma"}, false));
  CHECK(compare_runs(ranked_baseline,
                     {record_with(ranked_deterministic, samples_around(1.2, 0.01, 30, 28))})
            .size() == 1);

  // A baseline with both modes: each pass meets its own.
  const fs::path both_file = tmp.path / "both.json";
  std::ofstream(both_file) << json_lines_text(benchmark_json(
      {record_with(plain, samples_around(1.0, 0.01, 30, 24)),
       record_with(deterministic, samples_around(1.2, 0.01, 30, 25))},
      RunSettings{}, Json{{"device", {{"name", "NVIDIA H200"}, {"fp16_bf16_kernels", "wgmma"}}}},
      JsonRows::all));
  const std::vector<Comparison> own =
      compare_runs(load_baseline(both_file.string()),
                   {record_with(deterministic, samples_around(1.2, 0.01, 30, 26))});
  REQUIRE(own.size() == 1);
  CHECK(own[0].baseline_median_ms == Approx(1.2).margin(0.01));
  CHECK(own[0].verdict == Verdict::within_noise);
}

TEST_CASE("compare: the table, markdown, CSV and JSON forms", "[bench][compare]") {
  const BaselineRow baseline = row_of(samples_around(1.0, 0.01, 30, 8));
  const std::vector<Comparison> c = {
      compare_pass("fwd/fp16/b:1", baseline, samples_around(0.9, 0.01, 30, 9))};
  CHECK(format_comparison(c, "Comparison with base.json", false).find("faster") !=
        std::string::npos);
  CHECK(format_comparison(c, "Comparison with base.json", true).find("| --- |") !=
        std::string::npos);
  CHECK(format_comparison_csv(c).find("fwd/fp16/b:1,") != std::string::npos);
  const Json j = comparison_json(c);
  REQUIRE(j.size() == 1);
  CHECK(j[0]["verdict"] == "faster");
  CHECK(j[0]["test"] == "mann-whitney-u");
}

TEST_CASE("bench --compare with a file that is no baseline: exit 2 naming it, before the GPU",
          "[bench][compare]") {
  TempDir tmp;
  const fs::path bad = tmp.path / "bad.json";
  std::ofstream(bad) << "{}";
  const Outcome o = run_shell(std::string(CUFLASH_BINARY) + " bench -s 64 -d 64 --compare " +
                                  bad.string(),
                              tmp);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find(bad.string()) != std::string::npos);
}

TEST_CASE("bench --compare with a folder: a package's results.json, or exit 2 naming the folder",
          "[bench][compare]") {
  TempDir tmp;
  const fs::path empty = tmp.path / "not-a-package";
  fs::create_directory(empty);
  const Outcome refused = run_shell(
      std::string(CUFLASH_BINARY) + " bench -s 64 -d 64 --compare " + empty.string(), tmp);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find(empty.string()) != std::string::npos);
  CHECK(refused.err.find("results.json") != std::string::npos);

  // A package folder is read through its results.json: its error names that file.
  const fs::path package = tmp.path / "package";
  fs::create_directory(package);
  std::ofstream(package / "results.json") << "{}";
  const Outcome read = run_shell(
      std::string(CUFLASH_BINARY) + " bench -s 64 -d 64 --compare " + package.string(), tmp);
  CHECK(read.exit_code == 2);
  CHECK(read.err.find((package / "results.json").string()) != std::string::npos);
  CHECK(read.err.find("not a results document") != std::string::npos);
}

TEST_CASE("bench session with --compare: the comparison in the output and in the package",
          "[bench][compare]") {
  TempDir tmp;
  // Every case's samples from its index alone: the second run repeats the first exactly.
  auto runner = [](const Problem& p, size_t index, int) {
    return record_with(p, samples_around(0.1 * double(index + 1), 0.01, 30, unsigned(index)));
  };
  SessionPlan first;
  first.cases = parse_sweep("sq=64,128", "t");
  first.out_dir = (tmp.path / "first").string();
  first.samples = true;
  first.output = (tmp.path / "first.txt").string();
  first.show_progress = false;
  REQUIRE(run_session(first, runner) == 0);

  SessionPlan second = first;
  second.out_dir = (tmp.path / "second").string();
  second.samples = false;
  second.output = (tmp.path / "second.json").string();
  second.format = Format::json;
  second.compare = (tmp.path / "first").string();  // the package's folder: its results.json
  REQUIRE(run_session(second, runner) == 0);

  const Json output = Json::parse(spawn_test::slurp(second.output));
  REQUIRE(output.contains("comparisons"));
  REQUIRE(output["comparisons"].size() == 2);  // the forward pass of both cases
  for (const Json& c : output["comparisons"]) {
    CHECK(c["verdict"] == "within noise");
    CHECK(c["test"] == "mann-whitney-u");
    CHECK(c["change"] == 0.0);
  }
  const Json package = Json::parse(spawn_test::slurp(tmp.path / "second" / "comparison.json"));
  CHECK(package["comparisons"] == output["comparisons"]);
  CHECK(spawn_test::slurp(tmp.path / "second" / "comparison.md").find("within noise") !=
        std::string::npos);
}
