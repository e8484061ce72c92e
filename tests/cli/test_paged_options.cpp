// --page-size and --cache-seqlens on the command line: what they accept, the one-line errors
// (exit 2, nothing written) for what they do not, and the CPU reference following the lengths.
// No GPU needed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "spawn_util.h"

namespace fs = std::filesystem;
using spawn_test::count_lines;
using spawn_test::cuflash;
using spawn_test::Outcome;
using spawn_test::require_usage_error;
using spawn_test::TempDir;

TEST_CASE("paged options: bad page sizes and cache lengths are one-line usage errors",
          "[cli][paged]") {
  const std::string small = "--backend cpu -b 2 --heads 2 -s 1 --seq-k 100 -d 32 ";
  require_usage_error("run " + small + "--page-size 24", "--page-size 24");
  require_usage_error("run " + small + "--page-size 8", "power of two");
  require_usage_error("run " + small + "--page-size 16 --backward", "forward only");
  require_usage_error("run " + small + "--cache-seqlens 5,7 --backward", "forward only");
  require_usage_error("run " + small + "--cache-seqlens 5", "one per batch entry");
  require_usage_error("run " + small + "--cache-seqlens 5,101", "outside 1..seq_k");
  require_usage_error("run " + small + "--cache-seqlens 0,5", "--cache-seqlens");
  require_usage_error("run " + small + "--dtype fp32 --page-size 16", "fp16 and bf16");
  require_usage_error("run " + small + "--page-size 16 --page-size 32", "--page-size");
  require_usage_error("verify -b 2 -s 1 --seq-k 100 --page-size 16 --backward", "forward only");
  require_usage_error("bench -b 2 -s 1 --seq-k 100 --page-size 16", "--pass fwd");
  require_usage_error("bench --sweep decode --page-size 16 --pass fwd", "page_size=N");
  // A page larger than the next power of two of seq_k (128 here) only adds unused rows; far
  // larger ones overflowed the page pools' size.
  require_usage_error("run " + small + "--page-size 256", "at most 128");
  require_usage_error("run " + small + "--page-size 4611686018427387904", "at most 128");
  // The split-KV kernel applies no window, softcap or ALiBi.
  require_usage_error("run " + small + "--page-size 16 --window 4,4", "does not combine");
  require_usage_error("run " + small + "--cache-seqlens 5,7 --softcap 5", "--cache-seqlens");
  require_usage_error("run --backend cpu -s 128 --window 4,4 --splits 2", "--splits");
  require_usage_error("bench -s 128 --alibi --splits 2 --pass fwd --list", "--alibi");
  // Past int64's range CLI11 read the largest int64, which the errors then quoted.
  require_usage_error("run " + small + "--splits 9223372036854775808", "below 2^63");
  require_usage_error("run " + small + "--page-size 9223372036854775808", "below 2^63");
  // The profiled child rebuilds a case from its sweep line, which has no cache lengths.
  require_usage_error("bench -b 2 -s 1 --seq-k 100 --cache-seqlens 5,7 --pass fwd --profile "
                      "--out-dir never",
                      "--profile");
}

TEST_CASE("paged options: a sweep file's paged case without --pass fwd names the file and case",
          "[cli][paged]") {
  TempDir tmp;
  const fs::path sweep = tmp.path / "paged.sweep";
  std::ofstream(sweep) << "page_size=16 sq=64 d=64\n";
  const Outcome o = cuflash("bench --list --sweep " + sweep.string(), tmp);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find(sweep.string() + ": case ") != std::string::npos);
  CHECK(o.err.find("/page:16: --page-size: forward only") != std::string::npos);
  CHECK(o.err.find("--pass fwd") != std::string::npos);
  CHECK(count_lines(o.err) == 1);
  CHECK(cuflash("bench --list --pass fwd --sweep " + sweep.string(), tmp).exit_code == 0);
}

TEST_CASE("paged options: a refused case writes nothing", "[cli][paged]") {
  TempDir tmp;
  const fs::path out = tmp.path / "out";
  const Outcome o = cuflash("run --backend cpu -s 1 --seq-k 64 -d 32 --page-size 12 --out-dir " +
                                out.string(),
                            tmp);
  CHECK(o.exit_code == 2);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("paged options: bench --list names paged and length cases", "[cli][paged]") {
  TempDir tmp;
  const Outcome o = cuflash(
      "bench --list --pass fwd -b 2 -s 1 --seq-k 4096 --dtype bf16 --page-size 0,16,256 "
      "--cache-seqlens 100,4000",
      tmp);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.out == "bf16/b:2/h:8/sq:1/sk:4096/d:64/causal:0/cache:100+4000\n"
                 "bf16/b:2/h:8/sq:1/sk:4096/d:64/causal:0/page:16/cache:100+4000\n"
                 "bf16/b:2/h:8/sq:1/sk:4096/d:64/causal:0/page:256/cache:100+4000\n");
}

TEST_CASE("paged options: the CPU backend follows the cache lengths, not the page size",
          "[cli][paged]") {
  TempDir tmp;
  const std::string shape = "run --backend cpu --format json -b 2 --heads 2 -s 3 --seq-k 100 -d 32 "
                            "--dtype bf16 --causal ";
  const Outcome full = cuflash(shape, tmp);
  const Outcome same = cuflash(shape + "--cache-seqlens 100,100 --page-size 16", tmp);
  const Outcome shorter = cuflash(shape + "--cache-seqlens 1,57", tmp);
  INFO(full.err << same.err << shorter.err);
  REQUIRE(full.exit_code == 0);
  REQUIRE(same.exit_code == 0);
  REQUIRE(shorter.exit_code == 0);
  CHECK(same.out == full.out);
  CHECK(shorter.out != full.out);
}
