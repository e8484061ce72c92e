#include "bench/package.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bench/profile_report.h"
#include "cli/exit_codes.h"

namespace cuflash::bench {

namespace fs = std::filesystem;

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    throw cli::RuntimeFailure(path + ": cannot write: " + std::strerror(errno));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    throw cli::RuntimeFailure(path + ": cannot write (disk full?)");
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    throw cli::RuntimeFailure(path + ": cannot write: " + ec.message());
  }
}

void require_new_package_folder(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "metadata.json", ec)) {
    throw cli::UsageError("--out-dir " + dir +
                          ": already holds a result package; choose a new "
                          "folder");
  }
  if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec)) {
    throw cli::UsageError("--out-dir " + dir +
                          ": the folder exists and is not empty; a result "
                          "package goes into a new or empty folder");
  }
}

ResultPackage::ResultPackage(std::string dir, JsonRows rows)
    : dir_(std::move(dir)), rows_(rows) {
  require_new_package_folder(dir_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw cli::RuntimeFailure("--out-dir " + dir_ + ": cannot create the folder" +
                              (ec ? ": " + ec.message() : std::string()));
  }
}

namespace {

// A metadata value as text: strings as they are, anything else as JSON ("null", "false").
std::string text_of(const Json* value) {
  if (value == nullptr) return "unknown";
  return value->is_string() ? value->get<std::string>() : json_text(*value);
}

std::string text_at(const Json& object, const char* section, const char* key) {
  const Json* s = find_member(object, section);
  return text_of(s ? find_member(*s, key) : nullptr);
}

std::string text_at(const Json& object, const char* key) {
  return text_of(find_member(object, key));
}

// results.md: what ran where, then the table, then the failures.
std::string markdown_report(const std::vector<CaseRecord>& records, const RunSettings& settings,
                            const Json& metadata) {
  std::string command;
  if (const Json* argv = find_member(metadata, "command_line")) {
    for (const Json& arg : *argv) command += (command.empty() ? "" : " ") + text_of(&arg);
  }
  std::string out = "# cuflash bench: " + text_at(metadata, "protocol", "sweep") + "\n\n";
  out += "- GPU: " + text_at(metadata, "device", "name") + " (" +
         text_at(metadata, "device", "uuid") + ")\n";
  out += "- cuflash " + text_at(metadata, "cuflash", "version") + ", commit " +
         text_at(metadata, "cuflash", "git_commit") + " (dirty: " +
         text_at(metadata, "cuflash", "git_dirty") + "), " +
         text_at(metadata, "cuflash", "build_type") + "\n";
  out += "- CUDA driver " + text_at(metadata, "cuda", "driver_version") + ", runtime " +
         text_at(metadata, "cuda", "runtime_version") + "\n";
  out += "- command: `" + command + "`\n";
  out += "- started " + text_at(metadata, "started_utc") + ", status " +
         text_at(metadata, "status") + "\n\n";
  out += format_markdown(records, settings);
  const Json* profile = find_member(metadata, "profile");
  out += profile_markdown(records, profile ? *profile : Json());
  return out;
}

bool flag_at(const Json& metadata, const char* key) {
  const Json* protocol = find_member(metadata, "protocol");
  const Json* value = protocol ? find_member(*protocol, key) : nullptr;
  return value && value->is_boolean() && value->get<bool>();
}

std::string profile_item(const std::vector<CaseRecord>& records, const Json& metadata) {
  const Json* profile = find_member(metadata, "profile");
  if (profile == nullptr) {
    return "absent: not requested (`cuflash bench --profile` collects Nsight Compute figures)";
  }
  size_t profiled = 0;
  for (const CaseRecord& r : records) profiled += r.profile && !r.profile->kernels.empty();
  std::string where = "`results.json` (`profiles`: per case and kernel) and `results.md` "
                      "(section Profile), " + std::to_string(profiled) + " of " +
                      std::to_string(records.size()) + " cases; raw reports in `" +
                      text_at(*profile, "reports_dir") + "` beside this folder, each case's "
                      "command to write them again in `profiles[].commands`";
  const Json* reason = find_member(*profile, "unavailable_reason");
  if (reason && reason->is_string()) where += "; **not available**: " + reason->get<std::string>();
  return where;
}

// README.md: each item a published number needs (the benchmark protocol's section 7) and where
// this package holds it, or why it does not.
std::string package_readme(const std::vector<CaseRecord>& records, const Json& metadata) {
  size_t failed = 0;
  for (const CaseRecord& r : records) failed += r.failure ? 1 : 0;
  const Json* protocol = find_member(metadata, "protocol");
  const Json* cases = protocol ? find_member(*protocol, "cases") : nullptr;
  const Json* baseline = protocol ? find_member(*protocol, "compare") : nullptr;
  const std::string n_cases = cases && cases->is_array() ? std::to_string(cases->size()) : "?";
  const std::vector<std::pair<std::string, std::string>> items{
      {"GPU, its memory", "`metadata.json`: `device` (name, uuid, memory_bytes, clocks, ...)"},
      {"driver, CUDA", "`metadata.json`: `cuda` (driver_version, runtime_version)"},
      {"commit, build flags",
       "`metadata.json`: `cuflash` (version, git_commit, git_dirty, build_type, "
       "cuda_architectures, cxx_flags, cuda_flags)"},
      {"the input matrix", "`metadata.json`: `protocol.cases` (" + n_cases +
                               " case names) and the rest of `protocol` (seed, warm-up, samples)"},
      {"raw machine-readable results",
       flag_at(metadata, "samples")
           ? "`results.json`: every sample's row and the aggregates (Google Benchmark JSON)"
           : "`results.json`: the median row of each pass with every statistic (Google "
             "Benchmark JSON); the samples themselves were not kept (`--samples` keeps them)"},
      {"complete stdout log",
       "absent: `cuflash bench` does not keep its own output; `results.md` holds the table it "
       "printed, and `share/scripts/bench_h200.sh` keeps both streams in `logs/` beside the "
       "packages"},
      {"the comparison's command, version and input contract",
       "absent: the comparison is a package of its own, written by `share/tools/sdpa_bench.py` "
       "(its `metadata.json`: command line, torch, CUDA and cuDNN versions) on the same cases "
       "under the same names"},
      {"profiler output", profile_item(records, metadata)},
      {"failed shapes, out-of-memory cases",
       "`failures.json` (" + std::to_string(failed) + " failed cases, each with its pass, kind "
       "and reason)"},
      {"numerical errors",
       flag_at(metadata, "verify")
           ? "each row's `verify` in `results.json`; failures of kind `verification_failed` in "
             "`failures.json`"
           : "absent: not checked in this run (`--verify` checks each case against the CPU "
             "reference first)"},
      {"changes below the noise",
       baseline && baseline->is_string()
           ? "`comparison.md` and `comparison.json` (against " + baseline->get<std::string>() +
                 "); each pass's `noise` in `results.json`"
           : "absent: no baseline given (`--compare BASELINE`); each pass's `noise` is in "
             "`results.json`"}};
  std::string out = "# cuflash bench result package\n\n";
  out += "Status: " + text_at(metadata, "status") + "; GPU: " +
         text_at(metadata, "device", "name") +
         " (results of other GPUs belong in other packages). What a published number needs, "
         "and where it is:\n\n| item | where |\n| --- | --- |\n";
  for (const auto& [item, where] : items) out += "| " + item + " | " + where + " |\n";
  out += "\nshare/docs/bench.md (in the cuflash sources) describes every file and field.\n";
  return out;
}

}  // namespace

void ResultPackage::write(const std::vector<CaseRecord>& records, const RunSettings& settings,
                          const Json& metadata) const {
  Json failures = Json::array();
  for (const CaseRecord& r : records) {
    if (r.failure) failures.push_back(failure_json(r));
  }
  const fs::path dir(dir_);
  write_file_atomically((dir / "results.json").string(),
                        json_lines_text(benchmark_json(records, settings, metadata, rows_)));
  write_file_atomically((dir / "results.md").string(),
                        markdown_report(records, settings, metadata));
  write_file_atomically((dir / "failures.json").string(), json_text(failures, 2) + "\n");
  write_file_atomically((dir / "README.md").string(), package_readme(records, metadata));
  write_file_atomically((dir / "metadata.json").string(), json_text(metadata, 2) + "\n");
}

}  // namespace cuflash::bench
