// --ranks on the command line (the single-GPU mode of context parallelism) and the sweep key
// ranks: what they accept, the case names, and the one-line errors (exit 2, nothing written) for
// bad counts and for what they do not combine with. Only the [gpu] case needs a GPU.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "spawn_util.h"

namespace fs = std::filesystem;
using spawn_test::count_lines;
using spawn_test::cuflash;
using spawn_test::Outcome;
using spawn_test::require_usage_error;
using spawn_test::require_usage_error_writing_nothing;
using spawn_test::TempDir;

namespace {

const std::string kSmall = "--backend cpu -b 2 --heads 4 --heads-kv 2 -s 37 --seq-k 50 -d 8 ";

// Every line of `text` ends with `suffix`; at least one line.
bool every_line_ends_with(const std::string& text, const std::string& suffix) {
  std::istringstream lines(text);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    if (line.size() < suffix.size() || line.compare(line.size() - suffix.size(), suffix.size(),
                                                    suffix) != 0) {
      return false;
    }
    ++count;
  }
  return count > 0;
}

}  // namespace

TEST_CASE("ranks: counts that are not whole numbers from 1 to 256 are one-line errors",
          "[cli][context_parallel]") {
  for (const char* bad : {"0", "-1", "2.5", "two", "257", "99999999999999999999"}) {
    require_usage_error("run " + kSmall + "--ranks " + bad, "--ranks");
    require_usage_error("verify -s 64 --ranks " + std::string(bad), "--ranks");
    require_usage_error("bench -s 64 --list --ranks " + std::string(bad), "--ranks");
  }
  require_usage_error("run " + kSmall + "--ranks 2 --ranks 3", "--ranks");
}

TEST_CASE("ranks: a varlen batch, pages, key lengths and key splits are refused, nothing written",
          "[cli][context_parallel]") {
  const std::string decode = "--backend cpu -b 2 --heads 4 -s 1 --seq-k 100 -d 32 --ranks 2 ";
  const std::pair<std::string, std::string> refused[] = {
      {"run --backend cpu --layout thd --seqlens 5,9 -d 8 --ranks 2", "--seqlens"},
      {"run " + decode + "--page-size 16", "--page-size"},
      {"run " + decode + "--cache-seqlens 5,7", "--cache-seqlens"},
      {"run " + decode + "--splits 2", "--splits above 1"},
  };
  for (const auto& [command, words] : refused) {
    require_usage_error_writing_nothing(command, "--ranks does not combine with " + words);
  }
  require_usage_error("verify -b 2 -s 1 --seq-k 100 --splits 0,2 --ranks 2", "--splits above 1");
  require_usage_error("bench --layout thd --seqlens 5,9 --ranks 3 --list", "--seqlens");
  require_usage_error("bench --sweep varlen --ranks 2 --list", "--seqlens");
  // A sweep's own pages against --ranks, and its key ranks against its own pages.
  TempDir tmp;
  const fs::path paged = tmp.path / "paged.txt", ranked = tmp.path / "ranked.txt";
  std::ofstream(paged) << "sq=1 sk=100 dtype=bf16 page_size=16\n";
  std::ofstream(ranked) << "sq=1 sk=100 dtype=bf16 page_size=16 ranks=2\n";
  require_usage_error("bench --sweep " + paged.string() + " --ranks 2 --list", "--page-size");
  require_usage_error("bench --sweep " + paged.string() + " --ranks 2 --list", "paged.txt: case ");
  require_usage_error("bench --sweep " + ranked.string() + " --list", "ranked.txt:1");
  require_usage_error("bench --sweep " + ranked.string() + " --list", "--page-size");
}

TEST_CASE("ranks: accepted cases carry /ranks:N in their names", "[cli][context_parallel]") {
  TempDir tmp;
  SECTION("run on the CPU computes the attention in one piece, under the case's name") {
    const Outcome o = cuflash("run " + kSmall + "--causal --backward --ranks 3 --splits 1", tmp);
    INFO(o.err);
    CHECK(o.exit_code == 0);
    CHECK(o.err.find("/causal:1/splits:1/ranks:3 on cpu") != std::string::npos);
  }
  SECTION("bench --list, from the command line and with a sweep") {
    const Outcome list = cuflash("bench -s 113,1023 --ranks 4 --list", tmp);
    CHECK(list.exit_code == 0);
    CHECK(every_line_ends_with(list.out, "/ranks:4"));
    const Outcome sweep = cuflash("bench --sweep seed --ranks 2 --list", tmp);
    CHECK(sweep.exit_code == 0);
    CHECK(every_line_ends_with(sweep.out, "/ranks:2"));
  }
  SECTION("the help of run, verify and bench names the mode") {
    for (const char* command : {"run", "verify", "bench"}) {
      const Outcome help = cuflash(std::string(command) + " --help", tmp);
      CHECK(help.out.find("--ranks") != std::string::npos);
      CHECK(help.out.find("Context parallelism on one GPU") != std::string::npos);
    }
  }
}

TEST_CASE("ranks: verify runs the ranks on the GPU", "[cli][context_parallel][gpu]") {
  TempDir tmp;
  const Outcome o = cuflash(
      "verify -b 2 --heads 4 --heads-kv 2 -s 113,1023 --seq-k 1023 --causal --dtype bf16 "
      "--backward --ranks 3 --format json",
      tmp);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.out.find("/ranks:3\"") != std::string::npos);
  CHECK(o.out.find("\"pass\": false") == std::string::npos);
}
