// The command line's conventions, through the built binary: what a mistyped subcommand or option
// says, options that used to be misread or silently ignored, help texts, the one case name, JSON
// shapes, the generated manual page and bash completion, and the documentation's recipes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "spawn_util.h"

namespace fs = std::filesystem;
using spawn_test::count_lines;
using spawn_test::Outcome;
using spawn_test::run_shell;
using spawn_test::slurp;
using spawn_test::TempDir;

namespace {

Outcome cuflash(const std::string& args, const TempDir& tmp) {
  return run_shell(std::string("NO_COLOR=1 ") + CUFLASH_BINARY + " " + args, tmp);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("run, verify and bench name a case the same way", "[cli]") {
  TempDir tmp;
  const std::string shape = "-b 2 --heads 4 --heads-kv 2 -s 5 --seq-k 7 -d 8 --dtype bf16 "
                            "--mask causal-top-left --layout bshd";
  const Outcome bench = cuflash("bench --list " + shape, tmp);
  REQUIRE(bench.exit_code == 0);
  CHECK(bench.out == "bf16/b:2/h:4/hkv:2/sq:5/sk:7/d:8/causal:tl/bshd\n");
  const Outcome run = cuflash("run --backend cpu " + shape, tmp);
  REQUIRE(run.exit_code == 0);
  CHECK(contains(run.err, "forward bf16/b:2/h:4/hkv:2/sq:5/sk:7/d:8/causal:tl/bshd on cpu"));
  // verify's records use the same function; without a GPU it stops before naming a case.
  const Outcome filtered = cuflash("bench --list -s 5,7 --filter 'sq:7/sk:7/d:64/causal:0$'", tmp);
  CHECK(filtered.out == "fp16/b:1/h:8/sq:7/sk:7/d:64/causal:0\n");
}
