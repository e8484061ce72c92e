// `cuflash bench`: kernel-only timings of forward and backward over a sweep of cases, in four
// output formats and, with --out-dir, as an auditable result package. The parts live in
// app/bench/: timing (CUDA events, graphs), sweep (named sweep files, case names), formats
// (table, markdown, CSV, Google-Benchmark JSON), package (the result folder), gpu_runner (one
// case on the GPU), sweep_runner (the loop, progress, Ctrl-C) and session (one whole run).
// share/docs/bench.md documents the protocol and every field.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "bench/compare.h"
#include "bench/formats.h"
#include "bench/gpu_runner.h"
#include "bench/package.h"
#include "bench/profile_target.h"
#include "bench/profiler.h"
#include "bench/session.h"
#include "bench/sweep.h"
#include "bench/verify_before_timing.h"
#include "cli/backends.h"
#include "cli/exit_codes.h"
#include "commands/commands.h"
#include "cuflash/attention.h"

namespace cuflash::cli {

namespace {

using namespace cuflash::bench;

struct BenchOptions {
  ProblemOptions problem;
  std::string sweep;   // name or path; replaces the shape options
  std::string filter;  // regular expression on case names
  bool list = false;
  int warmup = 10;
  int iters = 30;
  int rounds = 1;
  std::string pass = "all";
  bool no_graph = false;  // default: CUDA graphs (timing.h)
  bool cold = false;
  bool verify = false;
  std::string peak_tflops;
  std::string peak_gbps;
  std::string format;  // empty: the global --format
  std::string output;
  std::string out_dir;
  bool samples = false;  // results.json of the package keeps every sample
  std::string compare;   // baseline results document
  bool compare_across = false;
  bool profile = false;  // Nsight Compute per case (bench/profiler.h)
};

// The cases to run and where they came from.
struct Selection {
  std::vector<Problem> cases;
  std::string sweep = "command line";  // the --sweep value, or "command line"
  std::string sweep_file;              // the file read, if any
  // With options that set a key of every sweep line: their names, and each case's name as the
  // sweep wrote it (before them).
  std::string overrides;
  std::vector<std::string> labels_as_written;
};

// The options of `o` that set a key of every sweep line, by name: only those can make two lines'
// cases one (--gpus has no key of its own).
std::string sweep_overrides(const BenchOptions& o) {
  std::string names;
  for (const auto& [given, name] : {std::pair{o.problem.deterministic, "--deterministic"},
                                    std::pair{o.problem.ranks != 0, "--ranks"}}) {
    if (given) names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}

// A case named twice would be timed twice under one name: results.json would hold both rows,
// and a comparison would pool their samples. (A mask given as causal and causal-top-left with
// equal lengths is one mask, named causal:1.)
void refuse_repeated_cases(const Selection& s) {
  std::map<std::string, size_t> first_case;  // by name, the index of its first case
  for (size_t i = 0; i < s.cases.size(); ++i) {
    const Problem& c = s.cases[i];
    const auto [first, added] = first_case.emplace(case_label(c), i);
    if (added) continue;
    const bool by_overrides = !s.labels_as_written.empty() &&
                              s.labels_as_written[first->second] != s.labels_as_written[i];
    throw UsageError(
        "case " + case_label(c) + " comes twice from " +
        (s.sweep_file.empty() ? std::string("the options' lists") : "--sweep " + s.sweep_file) +
        (by_overrides ? " with " + s.overrides : "") +
        (s.cases[first->second].mask != c.mask
             ? " (causal and causal-top-left with equal lengths are one mask)"
             : ""));
  }
}

// Runs `check` on case `c`; a refusal of a sweep file's case names the file and the case, since
// the option it names was set by the file's line rather than typed.
template <typename Check>
void check_sweep_case(const Selection& s, const Problem& c, Check&& check) {
  try {
    check();
  } catch (const UsageError& e) {
    if (s.sweep_file.empty()) throw;
    throw UsageError(s.sweep_file + ": case " + case_label(c) + ": " + e.what());
  }
}

Selection select_cases(const BenchOptions& o) {
  refuse_input_files(o.problem, "bench");
  Selection s;
  if (o.sweep.empty()) {
    s.cases = expand_cases(o.problem);
  } else {
    if (o.problem.splits != std::vector<int64_t>{0}) {
      throw UsageError("--splits: with --sweep, give the key splits in the sweep (splits=N)");
    }
    if (o.problem.page_size != std::vector<int64_t>{0}) {
      throw UsageError("--page-size: with --sweep, give the page size in the sweep (page_size=N)");
    }
    if (!o.problem.cache_seqlens.empty()) {
      throw UsageError("--cache-seqlens: not with --sweep (the lengths are one per batch entry "
                       "of one case)");
    }
    if (!o.problem.seqlens.empty()) {
      throw UsageError("--seqlens: with --sweep, give the lengths in the sweep "
                       "(seqlens=L0+L1+..., layout thd)");
    }
    const ProblemOptions& given = o.problem;
    if (!given.window.empty() || !given.softcap.empty() || given.alibi ||
        !given.alibi_slopes_file.empty()) {
      throw UsageError("--window, --softcap, --alibi and --alibi-slopes do not combine with "
                       "--sweep: its lines set them (keys window, softcap, alibi)");
    }
    s.sweep = o.sweep;
    s.sweep_file = resolve_sweep(o.sweep, sweep_search_dirs());
    s.cases = load_sweep(s.sweep_file);
    s.overrides = sweep_overrides(o);
    if (!s.overrides.empty()) {
      for (const Problem& c : s.cases) s.labels_as_written.push_back(case_label(c));
    }
    for (Problem& c : s.cases) {
      c.scale = o.problem.scale.value_or(0.0);
      c.deterministic = c.deterministic || o.problem.deterministic;
      if (o.problem.ranks != 0 || o.problem.gpus != 0) {
        // At most kMaxRanks (the validators); a sweep's own ranks stay, so that --gpus refuses
        // them.
        if (o.problem.ranks != 0) c.ranks = static_cast<int>(o.problem.ranks);
        c.gpus = static_cast<int>(o.problem.gpus);
        // --ranks / --gpus against the line's paging, lengths, splits
        check_sweep_case(s, c, [&] { check_case_size(c); });
      }
    }
  }
  if (o.pass != "fwd") {
    for (const Problem& c : s.cases) {
      // (a sweep file's page_size or cache lengths)
      check_sweep_case(s, c,
                       [&] { require_forward_only(c, "--pass " + o.pass + " (add --pass fwd)"); });
    }
  }
  refuse_repeated_cases(s);
  if (!o.filter.empty()) {
    const size_t before = s.cases.size();
    s.cases = filter_cases(s.cases, o.filter);
    if (s.cases.empty()) {
      throw UsageError("--filter '" + o.filter + "' matches none of the " +
                       std::to_string(before) + " cases (see --list)");
    }
  }
  return s;
}

CaseSettings case_settings(const BenchOptions& o) {
  CaseSettings s;
  s.timing = TimingOptions{o.warmup, o.iters, !o.no_graph, o.cold};
  s.forward = o.pass != "bwd";
  s.backward = o.pass != "fwd";
  s.verify = o.verify;
  s.rounds = o.rounds;
  s.seed = o.problem.seed;
  return s;
}

Json protocol_json(const BenchOptions& o, const Selection& s, const RunSettings& settings) {
  std::vector<std::string> names;
  for (const Problem& c : s.cases) names.push_back(case_label(c));
  return Json{{"backend", settings.backend},
              {"sweep", s.sweep},
              {"sweep_file", s.sweep_file.empty() ? Json() : Json(s.sweep_file)},
              {"filter", o.filter.empty() ? Json() : Json(o.filter)},
              {"pass", o.pass},
              {"warmup", o.warmup},
              {"iters", o.iters},
              {"rounds", o.rounds},
              {"graph", !o.no_graph},
              {"cold", o.cold},
              {"target_sample_ms", kTargetSampleMs},
              {"max_calls_per_sample", kMaxCallsPerSample},
              {"verify", o.verify},
              {"verify_max_work", kVerifyMaxWork},
              {"seed", static_cast<int64_t>(o.problem.seed)},
              {"peak_tflops", settings.peak_tflops.empty() ? Json() : Json(settings.peak_tflops)},
              {"peak_gbps", settings.peak_gbps ? Json(*settings.peak_gbps) : Json()},
              {"samples", o.samples},
              {"compare", o.compare.empty() ? Json() : Json(o.compare)},
              {"profile", o.profile},
              {"deterministic", o.problem.deterministic},
              {"cases", names}};
}

ProfilerSettings profiler_settings(const BenchOptions& o, const CaseSettings& settings) {
  ProfilerSettings p;
  p.ncu = find_ncu();
  p.reports_dir = reports_dir_for(o.out_dir);
  std::error_code ec;
  p.self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (p.self.empty()) p.ncu = NcuLocation{"", "the path of this binary is unknown (/proc/self/exe)"};
  p.forward = settings.forward;
  p.backward = settings.backward;
  return p;
}

// The profiled child rebuilds each case from its sweep line (sweep_line()), which cannot carry
// per-sequence key lengths, slopes read from a file or the GPUs of a ring (it would profile
// the one-GPU call under the ring's name).
void require_profilable(const BenchOptions& o, const std::vector<Problem>& cases) {
  if (!o.profile) return;
  for (const Problem& c : cases) {
    const bool file_slopes =
        !c.alibi_slopes.empty() && c.alibi_slopes != alibi_default_slopes(c.shape.heads);
    const char* option = file_slopes                ? "--alibi-slopes"
                         : !c.cache_seqlens.empty() ? "--cache-seqlens"
                         : c.gpus != 0              ? "--gpus"
                                                    : nullptr;
    if (option != nullptr) {
      throw UsageError(std::string("--profile: the profiled child cannot rebuild a case with ") +
                       option + "; drop one of the two");
    }
  }
}

int bench_command(const BenchOptions& o, const GlobalOptions& global) {
  // A round's median needs a few samples, or one outlier becomes the rounds' spread.
  if (o.rounds > 1 && o.rounds * kMinSamplesPerRound > o.iters) {
    throw UsageError("--rounds " + std::to_string(o.rounds) + ": every round takes at least " +
                     std::to_string(kMinSamplesPerRound) + " of the --iters " +
                     std::to_string(o.iters) + " samples; give at most " +
                     std::to_string(std::max(1, o.iters / kMinSamplesPerRound)) + " rounds");
  }
  const Selection selection = select_cases(o);
  require_profilable(o, selection.cases);
  SessionPlan plan;
  plan.format = parse_format(o.format.empty() ? global.format : o.format);
  if (!o.peak_tflops.empty()) plan.settings.peak_tflops = parse_peak_tflops(o.peak_tflops);
  if (!o.peak_gbps.empty()) plan.settings.peak_gbps = parse_peak_gbps(o.peak_gbps);
  check_output_writable(o.output);
  if (o.list) {  // names alone, or with --format json one {"case": NAME} object a line
    std::string text;
    for (const Problem& c : selection.cases) {
      text += (plan.format == Format::json ? Record().add("case", case_label(c)).to_json()
                                           : case_label(c)) +
              "\n";
    }
    if (o.output.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      write_file_atomically(o.output, text);
    }
    return kExitOk;
  }
  // A baseline that cannot serve and a package folder that is not new are usage errors, found
  // before the GPU is asked for (run_session() checks them again where they are used).
  if (!o.compare.empty()) load_baseline(o.compare);
  if (!o.out_dir.empty()) require_new_package_folder(o.out_dir);
  if (device_count() == 0) {
    for (const Problem& c : selection.cases) {  // as verify: exit 2 first
      if (selection.sweep_file.empty()) {
        require_gpu_support(c);
      } else {
        require_gpu_support(c, selection.sweep_file + ": case " + case_label(c) + ": d");
      }
    }
    throw RuntimeFailure("bench times the CUDA kernels and needs a CUDA GPU; none was found");
  }
  plan.cases = selection.cases;
  plan.protocol = protocol_json(o, selection, plan.settings);
  plan.output = o.output;
  plan.out_dir = o.out_dir;
  plan.samples = o.samples;
  plan.compare = o.compare;
  plan.compare_across = o.compare_across;
  plan.show_progress = !global.quiet;
  plan.rounds = o.rounds;
  const CaseSettings settings = case_settings(o);
  plan.passes.clear();
  if (settings.forward) plan.passes.push_back("fwd");
  if (settings.backward) plan.passes.push_back("bwd");
  GpuCaseRunner runner(settings);
  if (!o.profile) {
    return run_session(plan, [&](const Problem& c, size_t i, int round) {
      return runner(c, i, round);
    });
  }
  Profiler profiler(profiler_settings(o, settings));
  if (!profiler.unavailable().empty()) {
    spdlog::warn("--profile: {}; the timings are taken without it", profiler.unavailable());
  }
  plan.profile_metadata = [&profiler] { return profiler.metadata(); };
  return run_session(plan, [&](const Problem& c, size_t i, int round) {
    CaseRecord record = runner(c, i, round);  // its buffers are freed before the child starts
    if (round > 0) return record;             // one profile per case
    const bool usable = profiler.unavailable().empty();
    profiler.profile(record, settings.seed + i);
    if (usable && !profiler.unavailable().empty()) {
      spdlog::warn("--profile: {}; the remaining cases are timed without it",
                   profiler.unavailable());
    }
    return record;
  });
}

void add_bench_options(CLI::App& cmd, BenchOptions& o) {
  add_problem_options(cmd, o.problem, /*allow_lists=*/true, /*reads_input_files=*/false);
  CLI::Option* sweep =
      cmd.add_option("--sweep", o.sweep,
                     "Cases from a sweep file: a name in share/sweeps (seed, fa, decode, "
                     "headdims, varlen, variants) or a path")
          ->check(non_empty_value("SWEEP"));
  for (const char* shape : {"--batch", "--heads", "--heads-kv", "--seq", "--seq-k", "--head-dim",
                            "--dtype", "--mask", "--causal", "--layout"}) {
    sweep->excludes(cmd.get_option(shape));
  }
  cmd.add_option("--filter", o.filter,
                 "Only cases whose name matches this regular expression (e.g. 'bf16/.*d:128')");
  cmd.add_flag("--list", o.list,
               "Print the names of the selected cases and exit (no GPU needed); with --format "
               "json, one {\"case\": NAME} object a line");
  cmd.add_option("--warmup", o.warmup, "Untimed calls before sampling")
      ->check(CLI::Range(0, 1000000))->capture_default_str();
  cmd.add_option("--iters", o.iters, "Timed samples")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd.add_option("--rounds", o.rounds,
                 "Visit every case this many times, each visit taking its share of the --iters "
                 "samples after its own warm-up: the samples then span the whole run and their "
                 "noise includes the GPU's drift between minutes (clocks, temperature). Use 3 or "
                 "more for runs meant for --compare")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  cmd.add_option("--pass", o.pass, "fwd, bwd or all")
      ->check(CLI::IsMember({"fwd", "bwd", "all"}))->capture_default_str();
  cmd.add_flag("--no-graph", o.no_graph,
               "Time one direct call per sample (host launch overhead included). By default a "
               "sample replays N calls captured in a CUDA graph: launch overhead does not count");
  cmd.add_flag("--cold", o.cold,
               "Flush L2 (write 2x its size) before every sample; one call per sample");
  // (An empty value would read as "not given": refused instead.)
  cmd.add_option("--peak-gbps", o.peak_gbps,
                 "Peak memory bandwidth in GB/s (10^9 bytes/s) to report a % of, e.g. 4800")
      ->check(non_empty_value("NUMBER"));
  cmd.add_option("--peak-tflops", o.peak_tflops,
                 "Peak to report a % of: one number, or per dtype 'fp16=989,bf16=989,fp32=67'")
      ->check(non_empty_value("NUMBER"));
  cmd.add_flag("--verify", o.verify,
               "Check each case against the CPU reference first (skipped above 2^33 "
               "multiply-adds per product)");
  cmd.add_option("--format", o.format, "table (default), markdown, csv or json")
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));
  cmd.add_option("--output", o.output, "Write the results to this file instead of stdout")
      ->check(non_empty_value("FILE"));
  CLI::Option* out_dir =
      cmd.add_option("--out-dir", o.out_dir,
                     "Write a result package here (a new or empty folder): metadata.json, "
                     "results.json (one row per pass with its statistics), results.md, "
                     "failures.json")
          ->check(non_empty_value("DIR"));
  cmd.add_flag("--samples", o.samples,
               "With --out-dir: results.json also holds every sample (one row per sample and six "
               "aggregate rows per pass, as --format json writes them)")
      ->needs(out_dir);
  CLI::Option* compare = cmd.add_option(
      "--compare", o.compare,
      "Compare with an earlier run: a result package (its folder or its results.json), or Google "
      "Benchmark JSON with repetitions. Per case: the change of the median, the noise of both "
      "runs and a verdict (faster / slower / within noise) from a Mann-Whitney U test on the "
      "samples (Welch's t test when the baseline holds aggregates only), p < 0.05");
  compare->check(non_empty_value("BASELINE"));
  cmd.add_flag("--compare-across", o.compare_across,
               "With --compare: compare with a baseline of another GPU model or kernel family "
               "(refused otherwise)")
      ->needs(compare);
  cmd.add_flag("--profile", o.profile,
               "With --out-dir: profile each case with Nsight Compute (ncu; found through "
               "CUFLASH_NCU, PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute): per kernel "
               "its duration, SM and tensor-pipe use, DRAM traffic, occupancy, registers, shared "
               "memory and local-memory spills, in results.json and results.md; the raw reports "
               "go to OUT-DIR-ncu/ beside the package. Without ncu or its counters the package "
               "says why and the timings still come")
      ->needs(out_dir);
}

struct ProfileTargetOptions {
  std::string case_line;  // a sweep line (bench/sweep.h) naming every key
  std::string pass = "fwd";
  uint64_t seed = 0;
  double scale = 0.0;
};

int profile_target_command(const ProfileTargetOptions& o) {
  const std::vector<Problem> cases = parse_sweep(o.case_line, "--case");
  if (cases.size() != 1) throw UsageError("--case must name exactly one case");
  Problem c = cases.front();
  c.scale = o.scale;
  run_profile_target(c, o.pass, o.seed);
  return kExitOk;
}

}  // namespace

void setup_profile_target(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<ProfileTargetOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile-target", "Run one case once for Nsight Compute (bench --profile's child process)");
  cmd->group("");  // hidden: only bench --profile runs it, under ncu
  cmd->add_option("--case", options->case_line, "The case as a sweep line")->required();
  cmd->add_option("--pass", options->pass, "fwd or bwd")->check(CLI::IsMember({"fwd", "bwd"}));
  cmd->add_option("--seed", options->seed, "Seed of the inputs");
  cmd->add_option("--scale", options->scale, "Softmax scale (0: 1/sqrt(head_dim))");
  cmd->callback([options, &result] { result.exit_code = profile_target_command(*options); });
}

void setup_bench(CLI::App& app, const GlobalOptions& global, CommandResult& result) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the CUDA kernels (CUDA events, median)");
  cmd->footer(
      "Kernel-only time with CUDA events: --warmup calls, then --iters samples; median, min, max, "
      "noise (relative stdev). TFLOP/s count 4*B*H*D per visible (query, key) pair forward, 2.5x "
      "that backward. share/docs/bench.md describes the protocol, the sweep files and the "
      "result package.\n"
      "JSON: --format json writes Google Benchmark's layout, a row per sample and six aggregate "
      "rows per pass; a package's results.json holds the median row of each pass alone, which "
      "carries every statistic, unless --samples is given.\n"
      "Examples:\n"
      "  cuflash bench -s 1024,4096 -d 64,128 --dtype fp16,bf16 --causal\n"
      "  cuflash bench --sweep seed --out-dir results/seed-h200\n"
      "  cuflash bench --sweep seed --filter 'd:128' --out-dir results/prof --profile\n" +
      std::string(kBenchExitCodeHelp));
  add_bench_options(*cmd, *options);
  cmd->callback(
      [options, &global, &result] { result.exit_code = bench_command(*options, global); });
}

}  // namespace cuflash::cli
