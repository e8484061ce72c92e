// Host-side tests of `cuflash bench --profile`: reading ncu's CSV, finding ncu, the profiler
// driven through stand-in ncu scripts (one that works, one refused the counters, none at all),
// the profile's place in results.json, results.md and the package README, and the command
// line. No GPU and no real ncu are needed.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench/ncu_csv.h"
#include "bench/package.h"
#include "bench/profile_report.h"
#include "bench/profiler.h"
#include "bench/session.h"
#include "bench/sweep.h"
#include "cuflash/context_parallel/ring.h"
#include "spawn_util.h"

namespace fs = std::filesystem;
using namespace cuflash;
using namespace cuflash::bench;
using spawn_test::contains;
using spawn_test::Outcome;
using spawn_test::run_shell;
using spawn_test::slurp;
using spawn_test::TempDir;

namespace {

// ncu's wide layout: log lines, a header, a units row, kernels whose names hold commas and
// quotes, thousands separators, n/a, and no column for the wgmma metric.
const std::string kWideCsv =
    "==PROF== Connected to process 4242 (cuflash)\r\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
    "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"gpu__time_duration.sum\","
    "\"dram__bytes.sum\",\"dram__bytes.sum.per_second\","
    "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"launch__registers_per_thread\","
    "\"launch__shared_mem_per_block_static\",\"launch__shared_mem_per_block_dynamic\","
    "\"l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum\","
    "\"l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum\"\r\n"
    "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"nsecond\",\"byte\",\"byte/second\",\"%\","
    "\"register/thread\",\"byte/block\",\"byte/block\",\"byte\",\"byte\"\r\n"
    "\"0\",\"4242\",\"cuflash\",\"h\",\"void fwd_kernel<Tile<64, 128>, \"\"x\"\">(Params)\",\"1\","
    "\"7\",\"(128, 1, 1)\",\"(16, 8, 1)\",\"0\",\"9.0\",\"12,500\",\"1,048,576\","
    "\"2.5e+12\",\"61.25\",\"168\",\"0\",\"98,304\",\"0\",\"0\"\r\n"
    "==WARNING== something ncu says between rows\r\n"
    "\"1\",\"4242\",\"cuflash\",\"h\",\"void convert_dq(float const*, half*)\",\"1\",\"7\","
    "\"(256, 1, 1)\",\"(64, 1, 1)\",\"0\",\"9.0\",\"2,000\",\"n/a\",\"\",\"12\",\"40\",\"1,024\","
    "\"0\",\"128\",\"64\"\r\n";

std::optional<double> metric(const KernelProfile& k, const std::string& key) {
  for (const auto& [name, value] : k.metrics) {
    if (name == key) return value;
  }
  FAIL("no key " << key);
  return std::nullopt;
}

// A stand-in for ncu: a shell script that logs its arguments to calls.txt, answers --version,
// --query-metrics (metrics.txt) and --import (raw.csv), and writes the --export file.
fs::path write_fake_ncu(const TempDir& tmp, const std::string& collect_body) {
  const fs::path script = tmp.path / "ncu";
  std::ofstream(script) << "#!/bin/sh\n"
                           "here=$(dirname \"$0\")\n"
                           "echo \"$*\" >> \"$here/calls.txt\"\n"
                           "case \"$1\" in\n"
                           "  --version) echo 'NVIDIA (R) Nsight Compute Command Line Profiler';"
                           " echo 'Version 2099.1.0.0 (build 1)'; exit 0;;\n"
                           "  --query-metrics) cat \"$here/metrics.txt\"; exit 0;;\n"
                           "  --import) cat \"$here/raw.csv\"; exit 0;;\n"
                           "esac\n" +
                               collect_body;
  fs::permissions(script, fs::perms::owner_all);
  std::ofstream(tmp.path / "raw.csv") << kWideCsv;
  // Every metric of the table but the wgmma one, plus padding so the listing looks real.
  std::ofstream listing(tmp.path / "metrics.txt");
  listing << "Device GH100\nMetric Name   Metric Description\n";
  for (const ProfileMetric& m : kProfileMetrics) {
    const std::string name = m.ncu;
    const std::string base = name.substr(0, name.find('.'));
    if (!contains(base, "gmma")) listing << base << "   Counter   something\n";
  }
  for (int i = 0; i < 10; ++i) listing << "smsp__filler_" << i << "   Counter   filler\n";
  return script;
}

const char* kCollectWorks =
    "while [ $# -gt 0 ]; do\n"
    "  if [ \"$1\" = --export ]; then echo report > \"$2\"; fi\n"
    "  shift\n"
    "done\n"
    "echo '==PROF== Disconnected from process 4242'\n";

const char* kCollectRefused =
    "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0.'\n"
    "exit 1\n";

ProfilerSettings settings_with(const fs::path& ncu, const TempDir& tmp) {
  ProfilerSettings s;
  s.ncu = NcuLocation{ncu.string(), ""};
  s.reports_dir = (tmp.path / "pkg-ncu").string();
  s.self = "/path/to/cuflash";
  return s;
}

CaseRecord timed_case(const std::string& line) {
  CaseRecord r;
  r.spec = parse_sweep(line, "t").front();
  return r;
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> before;
  ScopedEnv(const char* n, const std::string& value) : name(n) {
    if (const char* old = std::getenv(n)) before = old;
    setenv(n, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (before) {
      setenv(name.c_str(), before->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
};

}  // namespace

// --- ncu's CSV -----------------------------------------------------------------------------------

TEST_CASE("ncu csv: quoted fields, doubled quotes, CRLF, log lines", "[bench][profile]") {
  const auto rows = parse_csv("==PROF== hello\n\"a,b\",\"say \"\"hi\"\"\",plain\r\n\n"
                              "\"line\nbreak\",,\"\"\n");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == std::vector<std::string>{"a,b", "say \"hi\"", "plain"});
  CHECK(rows[1] == std::vector<std::string>{"line\nbreak", "", ""});
  CHECK(parse_csv("").empty());
  CHECK(parse_csv("==ERROR== only a log\n").empty());
}

TEST_CASE("ncu csv: the wide layout, with units, separators and n/a", "[bench][profile]") {
  const std::vector<NcuKernel> kernels = parse_ncu_kernels(kWideCsv);
  REQUIRE(kernels.size() == 2);
  CHECK(kernels[0].id == "0");
  CHECK(kernels[0].name == "void fwd_kernel<Tile<64, 128>, \"x\">(Params)");
  CHECK(kernels[0].block == "(128, 1, 1)");
  CHECK(kernels[0].grid == "(16, 8, 1)");
  CHECK(kernels[0].metrics.at("dram__bytes.sum").text == "1,048,576");
  CHECK(kernels[0].metrics.at("gpu__time_duration.sum").unit == "nsecond");
  CHECK(kernels[0].metrics.count("Process ID") == 0);  // launch columns are not metrics
  CHECK(kernels[1].name == "void convert_dq(float const*, half*)");

  const std::vector<KernelProfile> p = kernel_profiles(kernels, "bwd");
  REQUIRE(p.size() == 2);
  CHECK(p[0].pass == "bwd");
  CHECK(p[0].metrics.size() == kProfileMetrics.size());
  CHECK(*metric(p[0], "duration_us") == Approx(12.5));
  CHECK(*metric(p[0], "dram_bytes") == 1048576.0);
  CHECK(*metric(p[0], "dram_gb_per_s") == Approx(2500.0));
  CHECK(*metric(p[0], "sm_throughput_pct") == Approx(61.25));
  CHECK(*metric(p[0], "registers_per_thread") == 168.0);
  CHECK(*metric(p[0], "shared_dynamic_bytes") == 98304.0);
  CHECK_FALSE(metric(p[0], "tensor_wgmma_pct").has_value());  // no such column: n/a
  CHECK_FALSE(metric(p[1], "dram_bytes").has_value());        // "n/a"
  CHECK_FALSE(metric(p[1], "dram_gb_per_s").has_value());     // empty
  CHECK(*metric(p[1], "local_store_bytes") == 64.0);
}

TEST_CASE("ncu csv: the long layout, one row per metric", "[bench][profile]") {
  const std::string text =
      "\"ID\",\"Process ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"Section Name\","
      "\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
      "\"0\",\"1\",\"k<1, 2>\",\"(1, 1, 1)\",\"(2, 1, 1)\",\"s\",\"gpu__time_duration.sum\","
      "\"usecond\",\"3.5\"\n"
      "\"0\",\"1\",\"k<1, 2>\",\"(1, 1, 1)\",\"(2, 1, 1)\",\"s\",\"dram__bytes.sum\",\"Mbyte\","
      "\"1.5\"\n"
      "\"1\",\"1\",\"other\",\"(1, 1, 1)\",\"(2, 1, 1)\",\"s\",\"gpu__time_duration.sum\","
      "\"msecond\",\"1,200\"\n";
  const std::vector<NcuKernel> kernels = parse_ncu_kernels(text);
  REQUIRE(kernels.size() == 2);
  CHECK(kernels[0].name == "k<1, 2>");
  const std::vector<KernelProfile> p = kernel_profiles(kernels, "fwd");
  CHECK(*metric(p[0], "duration_us") == Approx(3.5));
  CHECK(*metric(p[0], "dram_bytes") == Approx(1.5e6));
  CHECK(*metric(p[1], "duration_us") == Approx(1.2e6));
  CHECK_FALSE(metric(p[1], "dram_bytes").has_value());
  CHECK(parse_ncu_kernels("no,header,here\n1,2,3\n").empty());
}

TEST_CASE("ncu csv: numbers and units", "[bench][profile]") {
  CHECK(*ncu_number({"1,048,576", "byte"}) == 1048576.0);
  CHECK(*ncu_number({"5.5", "usecond"}) == Approx(5.5e-6));
  CHECK(*ncu_number({"2.1", "Tbyte/second"}) == Approx(2.1e12));
  CHECK(*ncu_number({"64", "Kibyte"}) == 65536.0);
  CHECK(*ncu_number({"3", "byte/usecond"}) == Approx(3e6));
  // As Nsight Compute 2025.3 writes them with --print-units base.
  CHECK(*ncu_number({"20,576", "ns"}) == Approx(20576e-9));
  CHECK(*ncu_number({"154,799,377,916.02", "byte/s"}) == Approx(154.79937791602e9));
  CHECK(*ncu_number({"84,040", "byte/block"}) == Approx(84040));
  CHECK(*ncu_number({"168", "register/thread"}) == Approx(168));
  CHECK(*ncu_number({"2", "us"}) == Approx(2e-6));
  CHECK(*ncu_number({"1", "MB"}) == Approx(1e6));
  CHECK(*ncu_number({"87.5", "%"}) == 87.5);
  CHECK(*ncu_number({"40", "register/thread"}) == 40.0);
  CHECK_FALSE(ncu_number({"n/a", "byte"}));
  CHECK_FALSE(ncu_number({"", "byte"}));
  CHECK_FALSE(ncu_number({"nan", ""}));
  CHECK_FALSE(ncu_number({"12abc", ""}));
}

// --- Finding ncu, names, commands ----------------------------------------------------------------

TEST_CASE("profile: ncu from CUFLASH_NCU, which must then be usable", "[bench][profile]") {
  TempDir tmp;
  {
    const ScopedEnv env("CUFLASH_NCU", (tmp.path / "nosuch-ncu").string());
    const NcuLocation none = find_ncu();
    CHECK(none.path.empty());
    CHECK(contains(none.error, "CUFLASH_NCU"));
    CHECK(contains(none.error, "nosuch-ncu"));
  }
  const fs::path fake = write_fake_ncu(tmp, kCollectWorks);
  const ScopedEnv env("CUFLASH_NCU", fake.string());
  CHECK(find_ncu().path == fake.string());
}

TEST_CASE("profile: report folder, file names, shell quoting, sweep lines", "[bench][profile]") {
  CHECK(reports_dir_for("results/seed") == "results/seed-ncu");
  CHECK(reports_dir_for("results/seed/") == "results/seed-ncu");
  CHECK(file_safe("fp16/b:1/h:8/sq:64/sk:64/d:64/causal:1") == "fp16_b-1_h-8_sq-64_sk-64_d-64_causal-1");
  CHECK(shell_command({"/bin/ncu", "--case", "b=1 h=8", "it's", "a,b"}) ==
        "/bin/ncu --case 'b=1 h=8' 'it'\\''s' a,b");
  for (const char* line : {"b=2 h=8 hkv=2 sq=100 sk=300 d=32 dtype=bf16 mask=causal-top-left "
                           "layout=bshd",
                           "sq=64 mask=causal", "sq=1 sk=4096 dtype=bf16 splits=3 page_size=16",
                           "sq=300 mask=causal window=64:0 softcap=30.5 alibi=1 deterministic=1",
                           "sq=100 sk=200 window=-1:17 h=6 alibi=1", "softcap=0.1",
                           "h=4 hkv=2 mask=causal seqlens=5+1+12 window=3:-1",
                           "seqlens=5+9 seqlens_k=7+1 layout=thd deterministic=1"}) {
    const Problem c = parse_sweep(line, "t").front();
    const std::vector<Problem> back = parse_sweep(sweep_line(c), "t");
    REQUIRE(back.size() == 1);
    CHECK(cli::case_label(back.front()) == cli::case_label(c));
    CHECK(back.front().softcap == c.softcap);
    CHECK(back.front().alibi_slopes == c.alibi_slopes);
    CHECK(back.front().deterministic == c.deterministic);
    CHECK(back.front().seqlens_q == c.seqlens_q);
    CHECK(back.front().seqlens_k == c.seqlens_k);
  }
  CHECK(short_kernel_name("void ns::fwd<Tile<64>>(Params)") == "ns::fwd");
  CHECK(short_kernel_name("plain") == "plain");
}

// --- The profiler, through stand-in ncu scripts --------------------------------------------------

TEST_CASE("profile: a working ncu gives each pass's kernels and the commands", "[bench][profile]") {
  TempDir tmp;
  const fs::path ncu = write_fake_ncu(tmp, kCollectWorks);
  Profiler profiler(settings_with(ncu, tmp));
  CHECK(profiler.unavailable().empty());
  CaseRecord r = timed_case("sq=64 d=64 dtype=bf16 mask=causal");
  r.spec.scale = 0.5;
  profiler.profile(r, 7);
  REQUIRE(r.profile);
  INFO(r.profile->reason);
  CHECK(r.profile->status == "ok");
  CHECK(r.profile->reason.empty());
  REQUIRE(r.profile->kernels.size() == 4);  // the fixture's two kernels, for fwd and for bwd
  CHECK(r.profile->kernels[0].pass == "fwd");
  CHECK(r.profile->kernels[3].pass == "bwd");
  REQUIRE(r.profile->reports.size() == 2);
  CHECK(r.profile->reports[0] ==
        (tmp.path / "pkg-ncu" / "bf16_b-1_h-8_sq-64_sk-64_d-64_causal-1-fwd.ncu-rep").string());
  CHECK(fs::exists(r.profile->reports[1]));
  REQUIRE(r.profile->commands.size() == 2);
  const std::string& command = r.profile->commands[1];
  for (const char* part : {"--profile-from-start off", "--replay-mode kernel",
                           "--target-processes all", "/path/to/cuflash profile-target",
                           "--case 'b=1 h=8 hkv=8 sq=64 sk=64 d=64 dtype=bf16 mask=causal "
                           "layout=bhsd'",
                           "--pass bwd", "--seed 7", "--scale 0.5", "gpu__time_duration.sum"}) {
    INFO(part);
    CHECK(contains(command, part));
  }
  CHECK_FALSE(contains(command, "gmma"));  // not offered by this "ncu": not asked for
  const Json meta = profiler.metadata();
  CHECK(meta["available"] == true);
  CHECK(meta["ncu_version"] == "Version 2099.1.0.0 (build 1)");
  CHECK(meta["metrics_not_offered"] ==
        Json::array({"sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"}));
  CHECK(meta["metrics"].size() == kProfileMetrics.size());
  CHECK(contains(slurp(tmp.path / "calls.txt"), "--import"));
}

TEST_CASE("profile: a failed case and the passes not timed are not profiled", "[bench][profile]") {
  TempDir tmp;
  ProfilerSettings s = settings_with(write_fake_ncu(tmp, kCollectWorks), tmp);
  s.backward = false;
  Profiler profiler(s);
  CaseRecord failed = timed_case("sq=64");
  failed.failure = Failure{"bwd", FailureKind::out_of_memory, "oom", false};
  profiler.profile(failed, 0);
  CHECK(failed.profile->status == "not_run");
  CHECK(contains(failed.profile->reason, "the case failed (bwd)"));
  CaseRecord forward_only = timed_case("sq=64");
  profiler.profile(forward_only, 1);
  CHECK(forward_only.profile->reports.size() == 1);
  CHECK(forward_only.profile->kernels.size() == 2);
}

TEST_CASE("profile: counters refused (ERR_NVGPUCTRPERM): said once, not tried again",
          "[bench][profile]") {
  TempDir tmp;
  Profiler profiler(settings_with(write_fake_ncu(tmp, kCollectRefused), tmp));
  CaseRecord first = timed_case("sq=64");
  profiler.profile(first, 0);
  REQUIRE(first.profile);
  CHECK(first.profile->status == "failed");
  CHECK(contains(first.profile->reason, "ERR_NVGPUCTRPERM"));
  CHECK(first.profile->kernels.empty());
  CHECK(first.profile->commands.size() == 1);  // the backward pass was not tried
  CHECK(contains(profiler.unavailable(), "ERR_NVGPUCTRPERM"));
  const std::string calls_before = slurp(tmp.path / "calls.txt");
  CaseRecord second = timed_case("sq=128");
  profiler.profile(second, 1);
  CHECK(second.profile->status == "not_run");
  CHECK(contains(second.profile->reason, "ERR_NVGPUCTRPERM"));
  CHECK(slurp(tmp.path / "calls.txt") == calls_before);  // ncu was not run again
  CHECK(profiler.metadata()["available"] == false);
}

TEST_CASE("profile: ncu failing otherwise, or writing nothing, is reported", "[bench][profile]") {
  TempDir tmp;
  Profiler crashing(settings_with(
      write_fake_ncu(tmp, "echo '==ERROR== The application returned an error code (3).'\nexit 3\n"),
      tmp));
  CaseRecord r = timed_case("sq=64");
  crashing.profile(r, 0);
  CHECK(r.profile->status == "failed");
  CHECK(contains(r.profile->reason, "ncu exited with code 3"));
  CHECK(contains(r.profile->reason, "returned an error code (3)"));
  CHECK(contains(r.profile->reason, ".log"));
  CHECK(crashing.unavailable().empty());  // the next case is tried again

  TempDir other;
  Profiler silent(settings_with(write_fake_ncu(other, "echo 'nothing to do'\n"), other));
  CaseRecord s = timed_case("sq=64");
  silent.profile(s, 0);
  CHECK(s.profile->status == "failed");
  CHECK(contains(s.profile->reason, "ncu wrote no report"));
}

TEST_CASE("profile: without ncu every case says why, the timings stay", "[bench][profile]") {
  TempDir tmp;
  ProfilerSettings s;
  s.ncu = NcuLocation{"", "Nsight Compute (ncu) was not found"};
  s.reports_dir = (tmp.path / "pkg-ncu").string();
  Profiler profiler(s);
  CHECK(profiler.unavailable() == "Nsight Compute (ncu) was not found");
  CaseRecord r = timed_case("sq=64");
  profiler.profile(r, 0);
  CHECK(r.profile->status == "not_run");
  CHECK(r.profile->reason == "Nsight Compute (ncu) was not found");
  CHECK_FALSE(fs::exists(tmp.path / "pkg-ncu"));
  const Json meta = profiler.metadata();
  CHECK(meta["ncu"].is_null());
  CHECK(meta["unavailable_reason"] == "Nsight Compute (ncu) was not found");
}

// --- Rendering -----------------------------------------------------------------------------------

namespace {

CaseRecord profiled_record() {
  CaseRecord r = timed_case("sq=64 dtype=fp16");
  PassResult p;
  p.pass = "fwd";
  p.samples_ms = {0.01, 0.011, 0.012};
  r.passes.push_back(p);
  CaseProfile profile;
  profile.kernels = kernel_profiles(parse_ncu_kernels(kWideCsv), "fwd");
  profile.reports = {"pkg-ncu/x-fwd.ncu-rep"};
  profile.commands = {"ncu --export pkg-ncu/x-fwd.ncu-rep cuflash profile-target"};
  r.profile = profile;
  return r;
}

CaseRecord unprofiled_record() {
  CaseRecord r = timed_case("sq=128 dtype=fp16");
  r.profile = CaseProfile{"not_run", "ERR_NVGPUCTRPERM: no counters", {}, {}, {}};
  return r;
}

}  // namespace

TEST_CASE("profile: results.json's profiles and results.md's section", "[bench][profile]") {
  const std::vector<CaseRecord> records{profiled_record(), unprofiled_record()};
  const Json doc = benchmark_json(records, RunSettings{}, Json::object(), JsonRows::medians);
  REQUIRE(doc.contains("profiles"));
  const Json& profiles = doc["profiles"];
  REQUIRE(profiles.size() == 2);
  CHECK(profiles[0]["name"] == "fp16/b:1/h:8/sq:64/sk:64/d:64/causal:0");
  CHECK(profiles[0]["status"] == "ok");
  CHECK(profiles[0]["reason"].is_null());
  CHECK(profiles[0]["reports"] == Json::array({"pkg-ncu/x-fwd.ncu-rep"}));
  const Json& k = profiles[0]["kernels"][0];
  CHECK(k["pass"] == "fwd");
  CHECK(k["duration_us"].get<double>() == Approx(12.5));
  CHECK(k["tensor_wgmma_pct"].is_null());
  CHECK(k["shared_bytes_per_block"] == 98304.0);
  CHECK(k["local_bytes"] == 0.0);
  CHECK(profiles[0]["kernels"][1]["local_bytes"] == 192.0);
  CHECK(profiles[1]["status"] == "not_run");
  CHECK(profiles[1]["kernels"].empty());
  CHECK_FALSE(benchmark_json({}, RunSettings{}, Json::object()).contains("profiles"));

  const Json meta{{"ncu", "/opt/ncu"}, {"ncu_version", "Version 1"},
                  {"reports_dir", "out/pkg-ncu"},
                  {"read_back", "ncu --import REPORT --csv --page raw --print-units base"},
                  {"metrics_not_offered", Json::array({"sm__x.sum"})}};
  const std::string md = profile_markdown(records, meta);
  CHECK(contains(md, "## Profile (Nsight Compute)"));
  CHECK(contains(md, "`out/pkg-ncu`"));
  CHECK(contains(md, "`sm__x.sum`"));
  CHECK(contains(md, "| fwd | fp16/b:1/h:8/sq:64/sk:64/d:64/causal:0 | fwd_kernel | (16, 8, 1) |"));
  CHECK(contains(md, "| 12.5 | 61.2 | n/a / n/a | 1.0 | 2500 | n/a | n/a | 168 | 96.0 | 0 |"));
  CHECK(contains(md, "not_run: ERR_NVGPUCTRPERM: no counters"));
  CHECK(profile_markdown({}, Json()).empty());  // no --profile: no section
}

TEST_CASE("profile: the package's README names every item a publication needs",
          "[bench][profile]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "pkg";
  ResultPackage package(dir.string());
  Json metadata{{"status", "complete"},
                {"device", {{"name", "NVIDIA H200"}}},
                {"protocol", {{"cases", Json::array({"a", "b"})}, {"verify", false}}}};
  CaseRecord plain = profiled_record();
  plain.profile.reset();
  package.write({plain}, RunSettings{}, metadata);
  std::string readme = slurp(dir / "README.md");
  for (const char* item : {"GPU, its memory", "driver, CUDA", "commit, build flags",
                           "the input matrix", "raw machine-readable results",
                           "complete stdout log", "the comparison's command", "profiler output",
                           "failed shapes, out-of-memory cases", "numerical errors",
                           "changes below the noise"}) {
    INFO(item);
    CHECK(contains(readme, "| " + std::string(item)));
  }
  CHECK(contains(readme, "NVIDIA H200"));
  CHECK(contains(readme, "2 case names"));
  CHECK(contains(readme, "absent: not requested"));
  CHECK(contains(readme, "absent: not checked"));
  CHECK_FALSE(contains(slurp(dir / "results.md"), "## Profile"));

  metadata["profile"] = Json{{"reports_dir", "x-ncu"}, {"unavailable_reason", "no ncu"}};
  metadata["protocol"]["compare"] = "old/results.json";
  package.write({profiled_record(), unprofiled_record()}, RunSettings{}, metadata);
  readme = slurp(dir / "README.md");
  CHECK(contains(readme, "1 of 2 cases; raw reports in `x-ncu`"));
  CHECK(contains(readme, "**not available**: no ncu"));
  CHECK(contains(readme, "against old/results.json"));
  const std::string md = slurp(dir / "results.md");
  CHECK(contains(md, "## Profile (Nsight Compute)"));
  CHECK(contains(md, "**not profiled**: no ncu"));
  CHECK(Json::parse(slurp(dir / "results.json"))["profiles"].size() == 2);
}

TEST_CASE("profile: a session puts the profiler's metadata and each case's profile in the package",
          "[bench][profile]") {
  TempDir tmp;
  Profiler profiler(settings_with(write_fake_ncu(tmp, kCollectRefused), tmp));
  SessionPlan plan;
  plan.cases = parse_sweep("sq=64,128", "t");
  plan.out_dir = (tmp.path / "pkg").string();
  plan.output = (tmp.path / "out.txt").string();
  plan.show_progress = false;
  plan.profile_metadata = [&profiler] { return profiler.metadata(); };
  const int code = run_session(plan, [&](const Problem& c, size_t i, int) {
    CaseRecord r = profiled_record();
    r.spec = c;
    r.profile.reset();
    profiler.profile(r, i);
    return r;
  });
  CHECK(code == 0);  // refused counters do not fail the run
  const Json meta = Json::parse(slurp(tmp.path / "pkg" / "metadata.json"));
  CHECK(meta["profile"]["available"] == false);
  CHECK(contains(meta["profile"]["unavailable_reason"].get<std::string>(), "ERR_NVGPUCTRPERM"));
  const Json results = Json::parse(slurp(tmp.path / "pkg" / "results.json"));
  REQUIRE(results["profiles"].size() == 2);
  CHECK(results["profiles"][0]["status"] == "failed");
  CHECK(results["profiles"][1]["status"] == "not_run");
  CHECK(contains(slurp(tmp.path / "pkg" / "README.md"), "**not available**"));
}

// --- The command line ----------------------------------------------------------------------------

TEST_CASE("cli: --profile needs --out-dir, and without a GPU it fails fast", "[bench][profile]") {
  TempDir tmp;
  const std::string cuflash = std::string("NO_COLOR=1 ") + CUFLASH_BINARY;
  const Outcome alone = run_shell(cuflash + " bench -s 64 --profile", tmp);
  CHECK(alone.exit_code == 2);
  CHECK(contains(alone.err, "--out-dir"));
  CHECK(contains(alone.err, "--profile"));
  // Cases the profiled child cannot rebuild from a sweep line: refused before anything runs.
  std::vector<std::string> options = {"--cache-seqlens 5 -b 1 --pass fwd"};
  if (context_parallel::ring_available()) {
    options.push_back("--gpus 1");  // without NCCL refused as such, before --profile's check
  } else {
    WARN("--profile with --gpus not checked: this build has no NCCL");
  }
  for (const std::string& option : options) {
    const Outcome refused = run_shell(cuflash + " bench -s 64 --profile --out-dir " +
                                          (tmp.path / "refused").string() + " " + option,
                                      tmp);
    INFO(option << ": " << refused.err);
    CHECK(refused.exit_code == 2);
    CHECK(
        contains(refused.err, "cannot rebuild a case with " + option.substr(0, option.find(' '))));
    CHECK_FALSE(fs::exists(tmp.path / "refused"));
  }
  const Outcome help = run_shell(cuflash + " bench --help", tmp);
  CHECK(contains(help.out, "--profile"));
  CHECK_FALSE(contains(run_shell(cuflash + " --help", tmp).out, "profile-target"));

  const Outcome info = run_shell(std::string(CUFLASH_BINARY) + " info --format json", tmp);
  if (!contains(info.out, "\"devices\": 0")) return;  // a GPU is present
  const fs::path dir = tmp.path / "pkg";
  const Outcome o = run_shell("CUFLASH_NCU=" + (tmp.path / "nosuch").string() + " " + cuflash +
                                  " bench -s 64 --profile --out-dir " + dir.string(),
                              tmp);
  CHECK(o.exit_code == 3);
  CHECK(contains(o.err, "GPU"));
  CHECK_FALSE(fs::exists(dir));
  CHECK_FALSE(fs::exists(tmp.path / "pkg-ncu"));
}

TEST_CASE("profile: the raw page of Nsight Compute 2025.3 on the H200 parses to the figures",
          "[profile]") {
  // A backward call's three kernels as ncu 2025.3 printed them (--csv --page raw --print-units
  // base), trimmed to the columns the package uses.
  const std::string text =
      slurp(std::filesystem::path(CUFLASH_SOURCE_DIR) / "tests/data/ncu_2025.3_backward.csv");
  const std::vector<NcuKernel> kernels = parse_ncu_kernels(text);
  REQUIRE(kernels.size() == 3);
  CHECK(kernels[1].name == "void sm90::backward_kernel<__half, 64>(sm90::BackwardTmaParams<T1>)");
  CHECK(kernels[1].grid == "(8, 8, 1)");
  const auto number = [&](const char* metric) {
    return ncu_number(kernels[1].metrics.at(metric)).value_or(-1);
  };
  CHECK(number("gpu__time_duration.sum") == Approx(45.472e-6));
  CHECK(number("dram__bytes.sum") == Approx(6394624));
  CHECK(number("dram__bytes.sum.per_second") == Approx(140.62772695285e9));
  CHECK(number("launch__registers_per_thread") == Approx(168));
  CHECK(number("launch__shared_mem_per_block_dynamic") == Approx(100392));
  CHECK(number("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active") ==
        Approx(32.35));
}
