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
using spawn_test::cuflash;
using spawn_test::contains;
using spawn_test::Outcome;
using spawn_test::python;
using spawn_test::run_shell;
using spawn_test::slurp;
using spawn_test::TempDir;

namespace {

// Writes q.npy (1, 2, 5, 8), k.npy and v.npy (1, 1, 7, 8) as float32, and k16.npy as float16.
void write_inputs(const TempDir& tmp) {
  const Outcome made = python(tmp, R"PY(
import numpy as np, sys
d = sys.argv[1]
np.save(f"{d}/q.npy", np.ones((1, 2, 5, 8), np.float32))
np.save(f"{d}/k.npy", np.ones((1, 1, 7, 8), np.float32))
np.save(f"{d}/v.npy", np.ones((1, 1, 7, 8), np.float32))
np.save(f"{d}/k16.npy", np.ones((1, 1, 7, 8), np.float16))
)PY", tmp.path.string());
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
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

TEST_CASE("input files that disagree on the dtype: the message shows the dtypes", "[cli]") {
  TempDir tmp;
  write_inputs(tmp);
  const auto path = [&](const char* name) { return (tmp.path / name).string(); };
  const Outcome o = cuflash("run --backend cpu --q " + path("q.npy") + " --k " + path("k16.npy") +
                                " --v " + path("v.npy"), tmp);
  CHECK(o.exit_code == 2);
  CHECK(contains(o.err, "dtype disagrees"));
  CHECK(contains(o.err, "(float16 vs float32)"));
  CHECK_FALSE(contains(o.err, "[1,1,7,8]"));  // the shapes, shown before
  CHECK(count_lines(o.err) == 1);
}

TEST_CASE("a file name with a newline or an escape still gives a one-line error", "[cli]") {
  TempDir tmp;
  write_inputs(tmp);
  const fs::path odd = tmp.path / "new\nline\x1b[31m.npy";
  std::ofstream(odd) << "not a .npy file";
  const Outcome o =
      cuflash("run --backend cpu --q '" + odd.string() + "' --k " + (tmp.path / "k.npy").string() +
                  " --v " + (tmp.path / "v.npy").string(),
              tmp);
  CHECK(o.exit_code == 2);
  INFO(o.err);
  CHECK(count_lines(o.err) == 1);
  CHECK(contains(o.err, "new\\nline\\x1b[31m.npy"));
  CHECK_FALSE(contains(o.err, "\x1b"));
}

TEST_CASE("options that were misread or silently ignored are refused", "[cli]") {
  TempDir tmp;
  SECTION("a negative --seed") {
    const Outcome o = cuflash("run --backend cpu -s 8 -d 8 --seed -1", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "--seed"));
    CHECK(contains(o.err, "'-1'"));
    CHECK(count_lines(o.err) == 1);
    CHECK(cuflash("run --backend cpu -s 8 -d 8 -q --seed 18446744073709551615", tmp).exit_code ==
          0);
  }
  SECTION("a shape option given twice to run") {
    const Outcome o = cuflash("run --backend cpu -s 64 -s 128 -d 8", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "--seq given 2 times"));
    CHECK(contains(o.err, "comma list"));
    CHECK(contains(o.err, "--seq 64,128"));
    CHECK_FALSE(contains(o.err, "At Most"));
    CHECK(count_lines(o.err) == 1);
  }
  SECTION("any other one-value option given twice: named in the same words") {
    for (const char* args :
         {"run --backend cpu -s 8 -d 8 --seed 1 --seed 2",
          "run --backend cpu --backend cpu -s 8 -d 8", "info --format json --format table",
          "--format json info --format table",
          "--format json run --backend cpu -s 8 -d 8 --format table"}) {
      INFO(args);
      const Outcome o = cuflash(args, tmp);
      CHECK(o.exit_code == 2);
      CHECK(contains(o.err, " given 2 times; it takes one value"));
      CHECK_FALSE(contains(o.err, "At Most"));
      CHECK(count_lines(o.err) == 1);
    }
  }
  SECTION("a list of a batch's lengths given twice, in any subcommand: refused, not joined") {
    for (const char* args :
         {"run --backend cpu --layout thd -d 8 --seqlens 5 --seqlens 7",
          "run --backend cpu --layout thd -d 8 --seqlens 5,7 --seqlens-k 3 --seqlens-k=4",
          "run --backend cpu -b 2 -s 8 -d 8 --cache-seqlens 3 --cache-seqlens 5",
          "bench --list --layout thd -d 8 --seqlens=5,7 --seqlens=4"}) {
      INFO(args);
      const Outcome o = cuflash(args, tmp);
      CHECK(o.exit_code == 2);
      CHECK(contains(o.err, "seqlens"));
      CHECK(contains(o.err, " given 2 times; it takes one comma list"));
      CHECK(count_lines(o.err) == 1);
      CHECK(o.out.empty());
    }
    CHECK(cuflash("run --backend cpu --layout thd -d 8 -q --seqlens 5,7 --seqlens-k 3,4", tmp)
              .exit_code == 0);
  }
  SECTION("--rounds that leave a round fewer than 5 samples") {
    const Outcome o = cuflash("bench --list --rounds 7", tmp);  // 30 samples: at most 6 rounds
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "--rounds 7"));
    CHECK(contains(o.err, "at most 6 rounds"));
    CHECK(count_lines(o.err) == 1);
    CHECK(cuflash("bench --list --rounds 6", tmp).exit_code == 0);
    CHECK(cuflash("bench --list --rounds 2 --iters 9", tmp).exit_code == 2);
    CHECK(cuflash("bench --list --rounds 2 --iters 10", tmp).exit_code == 0);
  }
  SECTION("an empty --out-dir or --output") {
    const Outcome run = cuflash("run --backend cpu -s 8 -d 8 --out-dir ''", tmp);
    CHECK(run.exit_code == 2);
    CHECK(contains(run.err, "--out-dir"));
    CHECK(run.out.empty());
    const Outcome bench = cuflash("bench --list --out-dir ''", tmp);
    CHECK(bench.exit_code == 2);
    CHECK(contains(bench.err, "--out-dir"));
    const Outcome output = cuflash("bench --list --output ''", tmp);
    CHECK(output.exit_code == 2);
    CHECK(contains(output.err, "--output"));
  }
}

TEST_CASE("input files: shape and dtype options are refused, others apply", "[cli]") {
  TempDir tmp;
  write_inputs(tmp);
  const auto path = [&](const char* name) { return (tmp.path / name).string(); };
  const std::string files =
      " --q " + path("q.npy") + " --k " + path("k.npy") + " --v " + path("v.npy");
  for (const auto& [option, name] :
       std::vector<std::pair<std::string, std::string>>{{"-s 64", "--seq"},
                                                        {"--dtype bf16", "--dtype"},
                                                        {"-d 8", "--head-dim"},
                                                        {"--heads 2", "--heads"},
                                                        {"-b 1", "--batch"}}) {
    INFO(option);
    const Outcome o = cuflash("run --backend cpu" + files + " " + option, tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, name));
    CHECK(contains(o.err, "shape and dtype come from the files"));
    CHECK(count_lines(o.err) == 1);
    CHECK(o.out.empty());
  }
  // Options the files do not decide still apply.
  CHECK(cuflash("run --backend cpu -q --causal --scale 0.5 --layout bhsd" + files, tmp).exit_code ==
        0);
}

TEST_CASE("JSON: bench --list one object a line, run's shapes as arrays", "[cli]") {
  TempDir tmp;
  SECTION("bench --list --format json") {
    const Outcome o = cuflash("bench --sweep seed --list --format json", tmp);
    REQUIRE(o.exit_code == 0);
    CHECK(count_lines(o.out) == 48);
    CHECK(o.out.rfind("{\"case\": \"fp16/b:1/h:8/sq:1024/sk:1024/d:64/causal:0\"}\n", 0) == 0);
    const Outcome global = cuflash("--format json bench --sweep seed --list", tmp);
    CHECK(global.out == o.out);
    std::ofstream(tmp.path / "list.json") << o.out;
    const Outcome parsed = python(tmp, R"PY(
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert all(list(r) == ["case"] and isinstance(r["case"], str) for r in rows), rows
print(len(rows))
)PY", (tmp.path / "list.json").string());
    INFO(parsed.err);
    CHECK(parsed.out == "48\n");
  }
  SECTION("run --format json: shape is an array of integers") {
    const Outcome o = cuflash("run --backend cpu -s 17 -d 8 --layout bshd --format json", tmp);
    REQUIRE(o.exit_code == 0);
    CHECK(contains(o.out, "{\"tensor\": \"o\", \"shape\": [1, 17, 8, 8], "));
    CHECK(contains(o.out, "{\"tensor\": \"lse\", \"shape\": [1, 8, 17], "));
    const Outcome table = cuflash("run --backend cpu -s 17 -d 8", tmp);
    CHECK(contains(table.out, "[1,8,17,8]"));
  }
}

TEST_CASE("NO_COLOR turns colour off only when it is not empty", "[cli]") {
  TempDir tmp;
  // A terminal for stderr, through script(1): colour is only ever used on one.
  const auto on_terminal = [&](const std::string& environment) {
    const std::string command = std::string(CUFLASH_BINARY) + " run --backend cpu -s 8 -d 8";
    return run_shell("env -u NO_COLOR " + environment + " script -qec '" + command + "' /dev/null",
                     tmp);
  };
  const Outcome unset = on_terminal("");
  REQUIRE(unset.exit_code == 0);
  CHECK(contains(unset.out, "\033["));  // the test sees colour when there should be some
  CHECK(contains(on_terminal("NO_COLOR=").out, "\033["));
  CHECK_FALSE(contains(on_terminal("NO_COLOR=1").out, "\033["));
}

TEST_CASE("mistyped subcommands and options say what is wrong", "[cli]") {
  TempDir tmp;
  SECTION("an unknown subcommand, with the closest name") {
    const Outcome o = cuflash("rnu", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "unknown subcommand 'rnu'"));
    CHECK(contains(o.err, "did you mean 'run'?"));
    CHECK_FALSE(contains(o.err, "A subcommand is required"));
    CHECK(count_lines(o.err) == 1);
    const Outcome far = cuflash("frobnicate", tmp);
    CHECK(far.exit_code == 2);
    CHECK(contains(far.err, "unknown subcommand 'frobnicate'"));
    CHECK(contains(far.err, "run, verify, bench, info or help"));
  }
  SECTION("an unknown option") {
    const Outcome o = cuflash("--bogus", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "unknown option '--bogus'"));
    CHECK_FALSE(contains(o.err, "A subcommand is required"));
    CHECK(count_lines(o.err) == 1);
    // A typo, named with the closest option, also when its value repeats an earlier word.
    for (const auto& [args, said] :
         {std::pair{"run --backend cpu --seqk 8", "'--seqk' (did you mean '--seq-k'?)"},
          std::pair{"run --backend cpu -s 7 --hedas 7", "'--hedas' (did you mean '--heads'?)"},
          std::pair{"run --backend cpu --backnd cpu", "'--backnd' (did you mean '--backend'?)"}}) {
      INFO(args);
      const Outcome typo = cuflash(args, tmp);
      CHECK(typo.exit_code == 2);
      CHECK(contains(typo.err, std::string("run: unknown option ") + said));
    }
  }
  SECTION("words after '--' are arguments, which no subcommand takes") {
    for (const char* args : {"run -- -s 8", "verify -- 8", "bench -- --list"}) {
      INFO(args);
      const Outcome o = cuflash(args, tmp);
      CHECK(o.exit_code == 2);
      CHECK(contains(o.err, "after '--'"));
      CHECK_FALSE(contains(o.err, "unknown option"));
      CHECK(count_lines(o.err) == 1);
    }
    CHECK(contains(cuflash("run -- -s 8", tmp).err, "run: unexpected argument '-s' after '--'"));
  }
  SECTION("a subcommand's option before the subcommand") {
    const Outcome o = cuflash("--seq 64 run", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "unknown option '--seq'"));
    CHECK(contains(o.err, "run, verify and bench"));
  }
  SECTION("no subcommand lists them") {
    const Outcome o = cuflash("", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "a subcommand is required: run, verify, bench, info or help"));
  }
  SECTION("help prints the help, help SUBCOMMAND that subcommand's") {
    const Outcome o = cuflash("help", tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.out == cuflash("--help", tmp).out);
    const Outcome run = cuflash("help run", tmp);
    CHECK(run.exit_code == 0);
    CHECK(run.out == cuflash("run --help", tmp).out);
    CHECK(contains(run.out, "--backend"));
    const Outcome bad = cuflash("help rnu", tmp);
    CHECK(bad.exit_code == 2);
    CHECK(contains(bad.err, "rnu"));
    for (const char* sub : {"help", "man", "completion"}) {  // itself and the hidden ones too
      INFO(sub);
      const Outcome o = cuflash(std::string("help ") + sub, tmp);
      CHECK(o.exit_code == 0);
      CHECK(o.out == cuflash(std::string(sub) + " --help", tmp).out);
    }
  }
  SECTION("-V is --version") {
    const Outcome o = cuflash("-V", tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.out == cuflash("--version", tmp).out);
    CHECK(o.out.rfind("cuflash ", 0) == 0);
  }
  SECTION("verify --backend: verify has no backend to choose") {
    const Outcome o = cuflash("verify --backend cpu -s 8 -d 8", tmp);
    CHECK(o.exit_code == 2);
    CHECK(contains(o.err, "verify: unknown option '--backend'"));
    CHECK(contains(o.err, "CPU reference"));
    CHECK(contains(o.err, "run --backend cpu"));
    CHECK_FALSE(contains(o.err, "not expected"));
    CHECK(count_lines(o.err) == 1);
  }
}

TEST_CASE("each subcommand's help shows the global options and its own exit codes", "[cli]") {
  TempDir tmp;
  for (const char* sub : {"run", "verify", "bench", "info"}) {
    INFO(sub);
    const Outcome o = cuflash(std::string(sub) + " --help", tmp);
    REQUIRE(o.exit_code == 0);
    CHECK(contains(o.out, "Global options"));
    CHECK(contains(o.out, "--format"));
    CHECK(contains(o.out, "-q,--quiet"));
    CHECK(contains(o.out, "-v,--verbose"));
    CHECK(contains(o.out, "Exit codes: 0"));
  }
  const auto exit_codes = [&](const char* sub) {
    const std::string help = cuflash(std::string(sub) + " --help", tmp).out;
    return help.substr(help.find("Exit codes:"));
  };
  for (const char* sub : {"run", "info"}) {
    INFO(sub);
    CHECK_FALSE(contains(exit_codes(sub), " 1 "));
  }
  CHECK(contains(exit_codes("run"), "3 "));
  CHECK(contains(exit_codes("run"), "130"));  // Ctrl-C, SIGTERM or SIGHUP
  CHECK(contains(exit_codes("info"), "3 "));  // stdout that cannot be written
  CHECK_FALSE(contains(exit_codes("info"), "130"));
  CHECK(contains(exit_codes("verify"), "1 "));
  CHECK_FALSE(contains(exit_codes("verify"), "130"));
  for (const char* sub : {"man", "completion"}) {  // documents: nothing to verify or interrupt
    INFO(sub);
    CHECK_FALSE(contains(exit_codes(sub), " 1 "));
    CHECK_FALSE(contains(exit_codes(sub), "130"));
  }
  CHECK(contains(exit_codes("bench"), "130"));
  SECTION("global options work after the subcommand") {
    const Outcome o = cuflash("run --backend cpu -s 8 -d 8 --format json -q", tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.err.empty());
    CHECK(o.out.rfind("{\"tensor\": \"o\"", 0) == 0);
  }
}

TEST_CASE("the manual page and --help: subcommands, exit codes, environment, files", "[cli]") {
  TempDir tmp;
  const Outcome man = cuflash("man", tmp);
  REQUIRE(man.exit_code == 0);
  CHECK(man.out.rfind(".TH CUFLASH 1", 0) == 0);
  for (const char* sub : {"run", "verify", "bench", "info", "help"}) {
    CHECK(contains(man.out, ".SS \"" + std::string(sub) + "\"\n"));
  }
  for (const char* code : {"0", "1", "2", "3", "130"}) {
    CHECK(contains(man.out, ".TP\n.B " + std::string(code) + "\n"));
  }
  for (const char* section : {".SH EXIT STATUS", ".SH ENVIRONMENT", ".SH FILES"}) {
    CHECK(contains(man.out, section));
  }
  CHECK(contains(man.out, "NO_COLOR"));
  CHECK(contains(man.out, "CUFLASH_DISABLE_WGMMA"));
  CHECK(contains(man.out, "\\-\\-backend"));  // run's options
  CHECK(contains(man.out, "\\-\\-sweep"));    // bench's
  // groff reads it without a warning (where groff is installed; said when it is not).
  std::ofstream(tmp.path / "cuflash.1") << man.out;
  if (run_shell("command -v groff", tmp).exit_code != 0) {
    WARN("groff is not installed: the manual page was not run through it");
  } else {
    const Outcome groff =
        run_shell("groff -man -Tutf8 -ww -z " + (tmp.path / "cuflash.1").string(), tmp);
    CHECK(groff.exit_code == 0);
    CHECK(groff.err.empty());
  }

  const Outcome help = cuflash("--help", tmp);
  for (const char* line : {"  run", "  verify", "  bench", "  info", "  help"}) {
    CHECK(contains(help.out, line));
  }
  for (const char* word : {"Exit codes: 0", "130", "Environment:", "NO_COLOR",
                           "CUFLASH_DISABLE_WGMMA", "Files:", "share/cuflash/sweeps"}) {
    CHECK(contains(help.out, word));
  }
}

TEST_CASE("bash completion from the command line's definition", "[cli]") {
  TempDir tmp;
  const fs::path script = tmp.path / "cuflash.bash";
  const Outcome made = cuflash("completion bash", tmp);
  REQUIRE(made.exit_code == 0);
  std::ofstream(script) << made.out;
  const Outcome syntax = run_shell("bash -n " + script.string(), tmp);
  CHECK(syntax.exit_code == 0);
  CHECK(syntax.err.empty());
  // Completes the command line `words` (shell words; the last one is being completed) as bash
  // would: COMP_WORDS and COMP_CWORD set, the completion function called.
  std::ofstream(tmp.path / "complete.sh") << R"SH(
source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_cuflash
if ((${#COMPREPLY[@]})); then printf '%s\n' "${COMPREPLY[@]}"; fi
)SH";
  const auto complete = [&](const std::string& words) {
    const Outcome o = run_shell("bash " + (tmp.path / "complete.sh").string() + " " +
                                    script.string() + " " + words, tmp);
    INFO(o.err);
    CHECK(o.exit_code == 0);
    return o.out;
  };
  CHECK(complete("cuflash ru") == "run\n");
  CHECK(complete("cuflash ''") == "run\nverify\nbench\ninfo\nhelp\n");
  CHECK(complete("cuflash run --dtype b") == "bf16\n");
  CHECK(complete("cuflash verify --dtype fp16,b") == "fp16,bf16\n");
  CHECK(complete("cuflash run --mask causal-") == "causal-top-left\n");
  CHECK(complete("cuflash --format j") == "json\n");
  CHECK(complete("cuflash bench --format m") == "markdown\n");
  CHECK(complete("cuflash -q verify --backw") == "--backward\n");
  CHECK(complete("cuflash run --backend c") == "cuda\ncpu\n");
  CHECK(complete("cuflash help v") == "verify\n");
  CHECK(complete("cuflash run --seq ''").empty());
  CHECK_FALSE(contains(complete("cuflash ''"), "completion"));  // hidden subcommands stay so
  // ... until typed: then they complete their own words.
  CHECK(complete("cuflash completion ''") == "bash\n");
  CHECK(complete("cuflash man ''").empty());
  CHECK(complete("cuflash man --h") == "--help\n");
}

TEST_CASE("the build installs the manual page and the bash completion", "[cli]") {
  TempDir tmp;
  const Outcome o = run_shell(std::string(CUFLASH_CMAKE) + " --install " + CUFLASH_BUILD_DIR +
                                  " --component cli-docs --prefix " + tmp.path.string(),
                              tmp);
  INFO(o.out + o.err);
  REQUIRE(o.exit_code == 0);
  const fs::path man = tmp.path / "share/man/man1/cuflash.1";
  const fs::path completion = tmp.path / "share/bash-completion/completions/cuflash";
  REQUIRE(fs::exists(man));
  REQUIRE(fs::exists(completion));
  CHECK(slurp(man) == cuflash("man", tmp).out);
  CHECK(slurp(completion) == cuflash("completion bash", tmp).out);
}

TEST_CASE("test presets: release, debug and ci leave the gpu label out, *-gpu run it", "[cli]") {
  // The project's CMakePresets.json over stand-in build folders, each with a test that passes and
  // a test labelled gpu that fails, as the GPU tests do on a machine without a GPU.
  TempDir tmp;
  fs::copy_file(fs::path(CUFLASH_SOURCE_DIR) / "CMakePresets.json", tmp.path / "CMakePresets.json");
  for (const char* build : {"release", "debug", "ci", "gpu"}) {
    fs::create_directories(tmp.path / "build" / build);
    std::ofstream(tmp.path / "build" / build / "CTestTestfile.cmake")
        << "add_test(host_test /bin/sh -c \"exit 0\")\n"
           "set_tests_properties(host_test PROPERTIES LABELS cli)\n"
           "add_test(gpu_test /bin/sh -c \"exit 1\")\n"
           "set_tests_properties(gpu_test PROPERTIES LABELS gpu)\n";
  }
  const auto ctest = [&](const std::string& preset) {
    return run_shell("cd " + tmp.path.string() + " && " + CUFLASH_CTEST + " --preset " + preset,
                     tmp);
  };
  for (const char* preset : {"release", "debug", "ci"}) {
    INFO(preset);
    const Outcome o = ctest(preset);
    CHECK(o.exit_code == 0);
    CHECK(contains(o.out, "host_test"));
    CHECK_FALSE(contains(o.out, "gpu_test"));
  }
  for (const char* preset : {"release-gpu", "debug-gpu", "gpu"}) {
    INFO(preset);
    const Outcome o = ctest(preset);
    CHECK(o.exit_code != 0);  // the GPU test ran, and failed
    CHECK(contains(o.out, "host_test"));
    CHECK(contains(o.out, "gpu_test"));
  }
}

TEST_CASE("the README's NumPy-only bf16 recipes read and write cuflash's files", "[cli]") {
  TempDir tmp;
  // The recipe lines, found by their comments in the README's code block.
  const std::string readme = slurp(fs::path(CUFLASH_SOURCE_DIR) / "README.md");
  const auto line_with = [&](const std::string& marker) {
    const auto at = readme.find(marker);
    REQUIRE(at != std::string::npos);
    const auto begin = readme.rfind('\n', at) + 1;
    return readme.substr(begin, readme.find('\n', at) - begin);
  };
  const std::string save = line_with("# bf16 from NumPy alone");
  const std::string load = line_with("# bf16, NumPy alone");
  std::ofstream(tmp.path / "recipes.txt") << save << "\n" << load << "\n";
  // Save Q=K=V with the save recipe, let cuflash compute (bf16 on the CPU reference) and write
  // its inputs and outputs, then read them with the load recipe: the inputs come back exactly,
  // the output matches numpy's attention within bf16 rounding.
  const Outcome saved = python(tmp, R"PY(
import numpy as np, os, sys
os.chdir(sys.argv[1])
save, load = open("recipes.txt").read().splitlines()
q = (np.arange(-16, 16, dtype=np.float32) / 8).reshape(1, 1, 4, 8)
exec(save)
)PY", tmp.path.string());
  INFO(saved.err);
  REQUIRE(saved.exit_code == 0);
  const std::string q = (tmp.path / "q.npy").string();
  const Outcome run = cuflash("run --backend cpu -q --save-inputs --out-dir " +
                                  (tmp.path / "out").string() + " --q " + q + " --k " + q +
                                  " --v " + q,
                              tmp);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(contains(run.out, "bf16"));
  const Outcome loaded = python(tmp, R"PY(
import numpy as np, os, sys
os.chdir(sys.argv[1])
save, load = open("recipes.txt").read().splitlines()
q = (np.arange(-16, 16, dtype=np.float32) / 8).reshape(1, 1, 4, 8)
exec(load)
assert o.dtype == np.float32 and o.shape == q.shape, (o.dtype, o.shape)
s = q[0, 0].astype(np.float64) @ q[0, 0].T.astype(np.float64) / np.sqrt(8)
p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
assert np.abs(o[0, 0] - p @ q[0, 0]).max() <= 2 ** -7, np.abs(o[0, 0] - p @ q[0, 0]).max()
exec(load.replace("out/o.npy", "out/q.npy"))
assert (o == q).all()
print("ok")
)PY", tmp.path.string());
  INFO(loaded.err);
  CHECK(loaded.out == "ok\n");
}
