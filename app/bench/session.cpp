#include "bench/session.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "bench/compare.h"
#include "bench/metadata.h"
#include "bench/package.h"
#include "cli/exit_codes.h"

namespace cuflash::bench {

namespace {

// metadata.json's "cases" and "status" as the sweep goes.
void record_progress(Json& metadata, const std::vector<CaseRecord>& records, size_t total,
                     const char* status) {
  int64_t failed = 0;
  for (const CaseRecord& r : records) failed += r.failure ? 1 : 0;
  metadata["cases"] = Json{{"total", static_cast<int64_t>(total)},
                           {"finished", static_cast<int64_t>(records.size())},
                           {"failed", failed},
                           {"not_run", static_cast<int64_t>(total - records.size())}};
  metadata["status"] = status;
}

void log_failure(const CaseRecord& r) {
  if (!r.failure) return;
  spdlog::warn("{} {}: {} ({})", cli::case_label(r.spec), r.failure->pass, r.failure->reason,
               to_string(r.failure->kind));
}

void emit(const std::string& text, const std::string& output) {
  if (output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  } else {
    write_file_atomically(output, text);
  }
}

const char* final_status(const SweepOutcome& outcome) {
  if (outcome.interrupted) return "interrupted";
  return outcome.stopped ? "stopped" : "complete";
}

void log_summary(const SweepOutcome& outcome, size_t total, int rounds,
                 const std::string& out_dir) {
  size_t failed = 0;
  for (const CaseRecord& r : outcome.records) failed += r.failure ? 1 : 0;
  const std::string where = out_dir.empty() ? "" : "; result package in " + out_dir;
  if (outcome.interrupted || outcome.stopped) {
    spdlog::warn("{} of {} cases run, {} failed, {} not run, {} of {} rounds finished{}",
                 outcome.records.size(), total, failed, outcome.not_run,
                 outcome.rounds_finished, rounds, where);
  } else {
    spdlog::info("{} cases, {} failed{}", total, failed, where);
  }
}

}  // namespace

// A sweep can run for an hour: an --output that cannot take the file is refused before it
// starts, not after.
void check_output_writable(const std::string& output) {
  if (output.empty()) return;
  // The file is written to OUTPUT.tmp and renamed over OUTPUT: a folder there would fail at the
  // end, and a link would be replaced rather than written through.
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(output, ec);
  if (std::filesystem::is_directory(status) || std::filesystem::is_symlink(status) ||
      (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))) {
    throw cli::UsageError("--output " + output + ": not a regular file; give a file's path");
  }
  std::filesystem::path folder = std::filesystem::path(output).parent_path();
  if (folder.empty()) folder = ".";
  if (!std::filesystem::is_directory(folder) || access(folder.c_str(), W_OK) != 0) {
    throw cli::RuntimeFailure("--output " + output + ": folder " + folder.string() +
                              " does not exist or is not writable");
  }
}

namespace {

RunIdentity identity_of(const Json& metadata) {
  RunIdentity identity;
  if (const Json* device = find_member(metadata, "device")) {
    if (const Json* name = find_member(*device, "name"); name && name->is_string()) {
      identity.device_name = name->get<std::string>();
    }
    if (const Json* kernels = find_member(*device, "fp16_bf16_kernels");
        kernels && kernels->is_string()) {
      identity.kernels = kernels->get<std::string>();
    }
  }
  return identity;
}

// The results in plan.format, followed by the comparison when there is one.
std::string final_text(const SessionPlan& plan, const std::vector<CaseRecord>& records,
                       const Json& metadata, const std::vector<Comparison>* comparisons) {
  if (comparisons == nullptr) {
    return format_results(plan.format, records, plan.settings, metadata);
  }
  const std::string title = "Comparison with " + plan.compare;
  switch (plan.format) {
    case Format::json: {
      Json document = benchmark_json(records, plan.settings, metadata);
      document["comparisons"] = comparison_json(*comparisons);
      return json_text(document, 2) + "\n";
    }
    case Format::csv:
      return format_results(plan.format, records, plan.settings, metadata) + "\n" +
             format_comparison_csv(*comparisons);
    case Format::markdown:
      return format_results(plan.format, records, plan.settings, metadata) +
             format_comparison(*comparisons, title, true);
    case Format::table:
      return format_results(plan.format, records, plan.settings, metadata) +
             format_comparison(*comparisons, title, false);
  }
  return "";
}

void log_comparison(const std::vector<Comparison>& comparisons) {
  int faster = 0, slower = 0, within = 0, undecided = 0;
  for (const Comparison& c : comparisons) {
    faster += c.verdict == Verdict::faster;
    slower += c.verdict == Verdict::slower;
    within += c.verdict == Verdict::within_noise;
    undecided += c.verdict == Verdict::too_few_samples;
  }
  spdlog::info("against the baseline: {} faster, {} slower, {} within noise{}", faster, slower,
               within, undecided ? fmt::format(", {} with too few samples", undecided) : "");
}

}  // namespace

int run_session(const SessionPlan& plan, const CaseRunner& runner) {
  check_output_writable(plan.output);
  // Read the baseline first: a bad file must not cost a sweep.
  std::optional<Baseline> baseline;
  if (!plan.compare.empty()) baseline = load_baseline(plan.compare);
  const size_t total = plan.cases.size();
  Json metadata = run_metadata(plan.device, plan.protocol);
  if (baseline) {
    check_baseline_serves(*baseline, plan.cases, plan.passes, identity_of(metadata),
                          plan.compare_across);
  }
  record_progress(metadata, {}, total, "running");
  std::optional<ResultPackage> package;
  const auto write_package = [&](const std::vector<CaseRecord>& records) {
    if (plan.profile_metadata) metadata["profile"] = plan.profile_metadata();
    if (package) package->write(records, plan.settings, metadata);
  };
  if (!plan.out_dir.empty()) {
    package.emplace(plan.out_dir, plan.samples ? JsonRows::all : JsonRows::medians);
    write_package({});
  }

  const SweepOutcome outcome = run_sweep(
      plan.cases, runner,
      [&](const std::vector<CaseRecord>& records, size_t index) {
        log_failure(records[index]);
        record_progress(metadata, records, total, "running");
        write_package(records);
      },
      plan.show_progress, plan.rounds);

  record_progress(metadata, outcome.records, total, final_status(outcome));
  metadata["cases"]["rounds"] = plan.rounds;
  metadata["cases"]["rounds_finished"] = outcome.rounds_finished;
  metadata["finished_utc"] = utc_now_iso8601();
  write_package(outcome.records);
  std::optional<std::vector<Comparison>> comparisons;
  if (baseline) {
    comparisons = compare_runs(*baseline, outcome.records);
    if (package) {
      const std::filesystem::path dir(plan.out_dir);
      write_file_atomically((dir / "comparison.json").string(),
                            json_text(Json{{"baseline", plan.compare},
                                           {"alpha", kAlpha},
                                           {"comparisons", comparison_json(*comparisons)}},
                                      2) +
                                "\n");
      write_file_atomically((dir / "comparison.md").string(),
                            format_comparison(*comparisons, "Comparison with " + plan.compare,
                                              true));
    }
  }
  emit(final_text(plan, outcome.records, metadata, comparisons ? &*comparisons : nullptr),
       plan.output);
  log_summary(outcome, total, plan.rounds, plan.out_dir);
  if (comparisons) log_comparison(*comparisons);
  return sweep_exit_code(outcome);
}

}  // namespace cuflash::bench
