#include "bench/profiler.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "bench/sweep.h"
#include "cli/interrupt.h"

extern char** environ;

namespace cuflash::bench {

namespace fs = std::filesystem;

const std::vector<ProfileMetric> kProfileMetrics{
    {"duration_us", "gpu__time_duration.sum", 1e6, "kernel duration, microseconds"},
    {"sm_throughput_pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1,
     "SM throughput, % of peak (the busiest SM unit)"},
    {"tensor_mma_pct", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
     1, "tensor pipe busy with mma.sync (HMMA), % of peak while the SMs are active"},
    {"tensor_wgmma_pct",
     "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", 1,
     "tensor pipe busy with Hopper's wgmma (GMMA), % of peak while the SMs are active"},
    {"dram_bytes", "dram__bytes.sum", 1, "bytes read and written in device memory (DRAM/HBM)"},
    {"dram_gb_per_s", "dram__bytes.sum.per_second", 1e-9, "DRAM bandwidth, 10^9 bytes/s"},
    {"dram_pct_of_peak", "dram__throughput.avg.pct_of_peak_sustained_elapsed", 1,
     "DRAM throughput, % of peak"},
    {"achieved_occupancy_pct", "sm__warps_active.avg.pct_of_peak_sustained_active", 1,
     "achieved occupancy: active warps, % of the SM's maximum"},
    {"registers_per_thread", "launch__registers_per_thread", 1, "registers per thread"},
    {"shared_static_bytes", "launch__shared_mem_per_block_static", 1,
     "static shared memory per block, bytes"},
    {"shared_dynamic_bytes", "launch__shared_mem_per_block_dynamic", 1,
     "dynamic shared memory per block, bytes"},
    {"local_load_bytes", "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", 1,
     "local-memory loads, bytes (register spills and stack)"},
    {"local_store_bytes", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", 1,
     "local-memory stores, bytes (register spills and stack)"},
};

std::vector<KernelProfile> kernel_profiles(const std::vector<NcuKernel>& kernels,
                                           const std::string& pass) {
  std::vector<KernelProfile> profiles;
  for (const NcuKernel& k : kernels) {
    KernelProfile p{pass, k.name, k.block, k.grid, {}};
    for (const ProfileMetric& m : kProfileMetrics) {
      const auto it = k.metrics.find(m.ncu);
      std::optional<double> value;
      if (it != k.metrics.end()) value = ncu_number(it->second);
      if (value) *value *= m.scale;
      p.metrics.emplace_back(m.key, value);
    }
    profiles.push_back(std::move(p));
  }
  return profiles;
}

// --- Finding ncu ---------------------------------------------------------------------------------

namespace {

bool is_executable_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (is_executable_file(candidate)) return candidate.string();
  }
  return {};
}

// /opt/nvidia/nsight-compute/<version>/ncu, the highest version first (by name: "2025.1.0"
// sorts after "2024.3.2").
std::string in_nsight_compute_folders() {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/opt/nvidia/nsight-compute", ec)) {
    if (is_executable_file(entry.path() / "ncu")) found.push_back(entry.path() / "ncu");
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.back().string();
}

}  // namespace

NcuLocation find_ncu() {
  if (const char* chosen = std::getenv("CUFLASH_NCU"); chosen && *chosen) {
    if (is_executable_file(chosen)) return {chosen, ""};
    return {"", std::string("CUFLASH_NCU=") + chosen + " is not an executable file"};
  }
  for (const std::string& candidate :
       {on_path("ncu"), std::string("/usr/local/cuda/bin/ncu"), in_nsight_compute_folders()}) {
    if (!candidate.empty() && is_executable_file(candidate)) return {candidate, ""};
  }
  return {"", "Nsight Compute (ncu) was not found: set CUFLASH_NCU, or put ncu on PATH "
              "(looked in PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*)"};
}

std::string reports_dir_for(const std::string& out_dir) {
  fs::path dir = fs::path(out_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "results/seed/" -> "results/seed"
  return dir.string() + "-ncu";
}

std::string file_safe(const std::string& case_name) {
  std::string name = case_name;
  for (char& c : name) {
    if (c == '/') c = '_';
    if (c == ':') c = '-';
  }
  return name;
}

std::string shell_command(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& arg : argv) {
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789_-./:=,+@%") == std::string::npos;
    std::string quoted = "'";
    for (const char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += (text.empty() ? "" : " ") + (plain ? arg : quoted + "'");
  }
  return text;
}

// --- Child processes -----------------------------------------------------------------------------

namespace {

struct ProcessResult {
  int exit_code = -1;  // -1 when it did not exit normally
  int signal = 0;      // the signal that ended it, if one did
  std::string spawn_error;
};

// Runs argv[0] (a path) with stdout to `out_path` and stderr to `err_path` (the same file when
// equal), and waits for it.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& out_path,
                          const std::string& err_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err_path == out_path) {
    posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  // The profiler gets SIGPIPE's default action back (cuflash ignores it, main.cpp).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t default_signals;
  sigemptyset(&default_signals);
  sigaddset(&default_signals, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &default_signals);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, args[0], &files, &attributes, args.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&files);
  ProcessResult result;
  if (error != 0) {
    result.spawn_error = std::strerror(error);
    return result;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The most telling line of ncu's log: its last "==ERROR==" line, else its last line.
std::string telling_line(const std::string& log) {
  std::istringstream lines(log);
  std::string line, last, error;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    last = line;
    if (line.rfind("==ERROR==", 0) == 0) error = line;
  }
  return error.empty() ? last : error;
}

constexpr const char* kCounterPermission = "ERR_NVGPUCTRPERM";

// What went wrong with one ncu run, in one line.
std::string failure_reason(const ProcessResult& run, const std::string& log,
                           const std::string& log_path) {
  if (!run.spawn_error.empty()) return "ncu could not be started: " + run.spawn_error;
  if (log.find(kCounterPermission) != std::string::npos) {
    return std::string("ncu may not read the GPU's performance counters (") +
           kCounterPermission +
           "): profiling needs root, or the driver loaded with "
           "NVreg_RestrictProfilingToAdminUsers=0";
  }
  const std::string how = run.signal ? "ncu was ended by signal " + std::to_string(run.signal)
                                     : "ncu exited with code " + std::to_string(run.exit_code);
  const std::string line = telling_line(log);
  return how + (line.empty() ? "" : ": " + line) + " (log: " + log_path + ")";
}

}  // namespace

// --- The profiler --------------------------------------------------------------------------------

Profiler::Profiler(ProfilerSettings settings) : settings_(std::move(settings)) {
  for (const ProfileMetric& m : kProfileMetrics) metrics_.push_back(m.ncu);
  if (settings_.ncu.path.empty()) {
    unavailable_ = settings_.ncu.error;
    return;
  }
  query_ncu();
}

namespace {

// The names a `ncu --query-metrics` listing offers: the first word of each line that looks like
// a metric ("unit__counter").
std::set<std::string> offered_metrics(const std::string& listing) {
  std::set<std::string> names;
  std::istringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first.find("__") != std::string::npos && first.find_first_of("\"=") == std::string::npos) {
      names.insert(first);
    }
  }
  return names;
}

// A metric's base name, the part a listing shows: "dram__bytes.sum.per_second" -> "dram__bytes".
std::string base_name(const std::string& metric) { return metric.substr(0, metric.find('.')); }

}  // namespace

void Profiler::query_ncu() {
  std::error_code ec;
  const fs::path scratch = fs::temp_directory_path(ec) /
                           ("cuflash-ncu-query-" + std::to_string(getpid()) + ".txt");
  const std::string out = scratch.string();
  if (run_process({settings_.ncu.path, "--version"}, out, out).exit_code == 0) {
    version_ = telling_line(read_text(out));
  }
  // Asking for a metric the GPU does not have can fail the whole run: ask only for those offered.
  // Launch figures are kept either way (every GPU has them; some listings leave them out); when
  // the listing fails, every metric is asked for.
  const ProcessResult query = run_process({settings_.ncu.path, "--query-metrics"}, out, out);
  const std::set<std::string> offered = offered_metrics(read_text(out));
  fs::remove(scratch, ec);
  if (query.exit_code != 0 || offered.size() < 10) return;
  std::vector<std::string> kept;
  for (const std::string& m : metrics_) {
    const bool keep = offered.count(base_name(m)) > 0 || m.rfind("launch__", 0) == 0;
    (keep ? kept : not_offered_).push_back(m);
  }
  metrics_ = kept;
}

std::vector<std::string> Profiler::collect_command(const Problem& c, const std::string& pass,
                                                   uint64_t seed,
                                                   const std::string& report) const {
  std::string metrics;
  for (const std::string& m : metrics_) metrics += (metrics.empty() ? "" : ",") + m;
  std::vector<std::string> argv{settings_.ncu.path, "--target-processes", "all",
                                "--replay-mode", "kernel", "--profile-from-start", "off",
                                "--metrics", metrics, "--export", report, "--force-overwrite",
                                settings_.self, "profile-target", "--case", sweep_line(c),
                                "--pass", pass, "--seed", std::to_string(seed)};
  if (c.scale != 0.0) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.17g", c.scale);
    argv.insert(argv.end(), {"--scale", scale});
  }
  return argv;
}

void Profiler::profile_pass(const Problem& c, const std::string& pass, uint64_t seed,
                            CaseProfile& profile) {
  const std::string stem =
      (fs::path(settings_.reports_dir) / (file_safe(cli::case_label(c)) + "-" + pass)).string();
  const std::string report = stem + ".ncu-rep", log = stem + ".log", csv = stem + ".csv";
  std::error_code ec;
  fs::remove(report, ec);  // an earlier run's report must not pass for this one's
  const std::vector<std::string> command = collect_command(c, pass, seed, report);
  profile.commands.push_back(shell_command(command));
  const ProcessResult run = run_process(command, log, log);
  const std::string log_text = read_text(log);
  if (log_text.find(kCounterPermission) != std::string::npos) {
    unavailable_ = failure_reason(run, log_text, log);
  }
  if (run.exit_code != 0 || !fs::exists(report)) {
    throw std::runtime_error(run.exit_code == 0 && unavailable_.empty()
                                 ? "ncu wrote no report: " + telling_line(log_text) +
                                       " (log: " + log + ")"
                                 : failure_reason(run, log_text, log));
  }
  profile.reports.push_back(report);
  const ProcessResult read = run_process({settings_.ncu.path, "--import", report, "--csv",
                                          "--page", "raw", "--print-units", "base"},
                                         csv, log + ".import");
  const std::vector<KernelProfile> kernels =
      kernel_profiles(parse_ncu_kernels(read_text(csv)), pass);
  if (read.exit_code != 0 || kernels.empty()) {
    throw std::runtime_error(
        read.exit_code != 0
            ? "reading the report back failed: " + failure_reason(read, read_text(log + ".import"),
                                                                  log + ".import")
            : "ncu profiled no kernel: " + telling_line(log_text) + " (log: " + log + ")");
  }
  profile.kernels.insert(profile.kernels.end(), kernels.begin(), kernels.end());
}

void Profiler::profile(CaseRecord& record, uint64_t seed) {
  CaseProfile profile;
  if (!unavailable_.empty() || record.failure || cli::interrupt_requested()) {
    profile.status = "not_run";
    profile.reason = !unavailable_.empty() ? unavailable_
                     : record.failure      ? "the case failed (" + record.failure->pass + ")"
                                           : "interrupted";
    record.profile = std::move(profile);
    return;
  }
  std::error_code ec;
  fs::create_directories(settings_.reports_dir, ec);
  std::vector<std::string> reasons;
  for (const char* pass : {"fwd", "bwd"}) {
    if ((pass == std::string("fwd") ? !settings_.forward : !settings_.backward)) continue;
    try {
      profile_pass(record.spec, pass, seed, profile);
    } catch (const std::exception& e) {
      reasons.push_back(std::string(pass) + ": " + e.what());
      spdlog::warn("--profile {} {}: {}", cli::case_label(record.spec), pass, e.what());
    }
    if (!unavailable_.empty()) break;  // refused counters: no pass will do better
  }
  if (!reasons.empty()) {
    profile.reason = reasons.front() + (reasons.size() > 1 ? "; " + reasons.back() : "");
    if (profile.kernels.empty()) profile.status = "failed";
  }
  record.profile = std::move(profile);
}

Json Profiler::metadata() const {
  Json metrics = Json::object();
  for (const ProfileMetric& m : kProfileMetrics) {
    metrics[m.key] = Json{{"ncu", m.ncu}, {"meaning", m.meaning}};
  }
  return Json{
      {"ncu", settings_.ncu.path.empty() ? Json() : Json(settings_.ncu.path)},
      {"ncu_version", version_.empty() ? Json() : Json(version_)},
      {"available", unavailable_.empty()},
      {"unavailable_reason", unavailable_.empty() ? Json() : Json(unavailable_)},
      {"reports_dir", settings_.reports_dir},
      {"collect", "ncu --target-processes all --replay-mode kernel --profile-from-start off "
                  "--metrics METRICS --export REPORT --force-overwrite CUFLASH profile-target "
                  "--case CASE --pass PASS --seed SEED (each case's exact command is in "
                  "results.json, profiles[].commands)"},
      {"read_back", "ncu --import REPORT --csv --page raw --print-units base"},
      {"metrics", metrics},
      {"metrics_not_offered", not_offered_}};
}

}  // namespace cuflash::bench
