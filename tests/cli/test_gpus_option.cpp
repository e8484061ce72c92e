// --gpus on the command line (context parallelism over the host's GPUs through NCCL): what it
// accepts, the case names, and the one-line errors (exit 2, nothing written) for bad counts, for
// --ranks with it and for what it does not combine with; without a GPU `--backend cuda` fails
// with exit 3 and writes nothing. Only the [gpu] cases need a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <string>

#include "spawn_util.h"

namespace fs = std::filesystem;
using spawn_test::cuflash;
using spawn_test::Outcome;
using spawn_test::require_usage_error;
using spawn_test::require_usage_error_writing_nothing;
using spawn_test::TempDir;

namespace {

int gpus_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// Whether this build has NCCL (`info` says so in multi_gpu).
bool built_with_nccl() {
  TempDir tmp;
  return cuflash("info --format json", tmp).out.find("\"multi_gpu\": \"--gpus through NCCL") !=
         std::string::npos;
}

}  // namespace

TEST_CASE("gpus: counts that are not whole numbers from 1 to 256 are one-line errors",
          "[cli][context_parallel]") {
  for (const char* bad : {"0", "-1", "2.5", "two", "257"}) {
    require_usage_error("run -s 64 --gpus " + std::string(bad), "--gpus");
    require_usage_error("verify -s 64 --gpus " + std::string(bad), "--gpus");
    require_usage_error("bench -s 64 --list --gpus " + std::string(bad), "--gpus");
  }
  require_usage_error("run -s 64 --gpus 2 --ranks 2", "--gpus");
}

TEST_CASE("gpus: a varlen batch, pages, key lengths and key splits are refused, nothing written",
          "[cli][context_parallel]") {
  const std::string decode = "-b 2 --heads 4 -s 1 --seq-k 100 -d 32 --gpus 1 ";
  const std::pair<std::string, std::string> refused[] = {
      {"run --layout thd --seqlens 5,9 -d 8 --gpus 1", "--seqlens"},
      {"run " + decode + "--page-size 16", "--page-size"},
      {"run " + decode + "--cache-seqlens 5,7", "--cache-seqlens"},
      {"run " + decode + "--splits 2", "--splits above 1"},
  };
  for (const auto& [command, words] : refused) {
    require_usage_error_writing_nothing(command, "--gpus does not combine with " + words);
  }
  // A sweep's own ranks against --gpus.
  TempDir tmp;
  const fs::path ranked = tmp.path / "ranked.txt";
  std::ofstream(ranked) << "sq=64 dtype=bf16 ranks=2\n";
  require_usage_error("bench --sweep " + ranked.string() + " --gpus 1 --list",
                      "--gpus does not combine with --ranks");
}

TEST_CASE("gpus: more GPUs than the machine has is a usage error, and no GPU at all exit 3",
          "[cli][context_parallel]") {
  TempDir tmp;
  const int present = gpus_present();
  if (!built_with_nccl()) {  // refused before the count is looked at
    require_usage_error_writing_nothing("run -s 64 --gpus 1", "--gpus: this build has no NCCL");
    WARN("skipped: a build without NCCL refuses --gpus before counting GPUs");
    return;
  }
  if (present > 0) {
    require_usage_error_writing_nothing(
        "run -s 64 --gpus " + std::to_string(present + 1),
        "--gpus " + std::to_string(present + 1) + ": this machine has");
    return;
  }
  // No GPU: the count cannot be checked first; the GPU backend fails and nothing is written.
  // (`run` without --backend falls back to the CPU reference, as for every case.)
  const Outcome o = cuflash(
      "run -s 64 -d 64 --gpus 2 --backend cuda --out-dir " + (tmp.path / "out").string(), tmp);
  INFO(o.err);
  if (o.exit_code == 2) {  // a build without NCCL says so first
    CHECK(o.err.find("no NCCL") != std::string::npos);
  } else {
    CHECK(o.exit_code == 3);
  }
  CHECK(!fs::exists(tmp.path / "out"));
}

TEST_CASE("gpus: cases carry /gpus:N in their names, and the help names the mode",
          "[cli][context_parallel]") {
  TempDir tmp;
  const Outcome list = cuflash("bench -s 113,1023 --gpus 1 --list", tmp);
  INFO(list.err);
  if (list.exit_code == 2) {  // a build without NCCL refuses --gpus
    CHECK(list.err.find("no NCCL") != std::string::npos);
  } else {
    CHECK(list.exit_code == 0);
    CHECK(list.out.find("/gpus:1") != std::string::npos);
  }
  for (const char* command : {"run", "verify", "bench"}) {
    const Outcome help = cuflash(std::string(command) + " --help", tmp);
    CHECK(help.out.find("--gpus") != std::string::npos);
  }
}

TEST_CASE("gpus: verify computes over the GPUs there are", "[cli][context_parallel][gpu]") {
  TempDir tmp;
  const int gpus = std::max(1, std::min(gpus_present(), 2));
  const Outcome o = cuflash(
      "verify -b 2 --heads 4 --heads-kv 2 -s 113,1023 --seq-k 1023 --causal --dtype bf16 "
      "--backward --format json --gpus " + std::to_string(gpus),
      tmp);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.out.find("/gpus:" + std::to_string(gpus) + "\"") != std::string::npos);
  CHECK(o.out.find("\"pass\": false") == std::string::npos);
}

TEST_CASE("gpus: bench times the ring and reports TFLOP/s per GPU and the communication",
          "[cli][context_parallel][gpu]") {
  TempDir tmp;
  const int gpus = std::max(1, std::min(gpus_present(), 2));
  const Outcome o = cuflash("bench -b 1 --heads 4 -s 1024 -d 64 --dtype bf16 --causal --warmup 2 "
                            "--iters 5 --out-dir " + (tmp.path / "pkg").string() +
                                " --gpus " + std::to_string(gpus),
                            tmp);
  INFO(o.out << o.err);
  REQUIRE(o.exit_code == 0);
  CHECK(o.out.find("TFLOP/s_per_GPU") != std::string::npos);
  CHECK(o.out.find("comm_exposed_ms") != std::string::npos);
  std::ifstream file(tmp.path / "pkg" / "results.json");
  const std::string results((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
  CHECK(results.find("\"tflops_per_gpu\":") != std::string::npos);
  const size_t comm = results.find("\"comm_ms\":");
  REQUIRE(comm != std::string::npos);
  const double comm_ms = std::stod(results.substr(comm + std::string("\"comm_ms\":").size()));
  if (gpus == 1) {
    CHECK(comm_ms == 0);  // one GPU passes nothing around the ring
    WARN("one GPU present: no communication was timed");
  } else {
    CHECK(comm_ms > 0);
  }
}
