// Spawns the built `cuflash` binary and checks outputs, exit codes and error messages.
// These run without a GPU; where the outcome depends on one (cuda backend, verify, bench), the
// test asks `cuflash info` how many devices there are and expects the matching behaviour.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "spawn_util.h"

namespace fs = std::filesystem;
using spawn_test::ClosedPipeOutcome;
using spawn_test::count_lines;
using spawn_test::cuflash;
using spawn_test::cuflash_into_closed_pipe;
using spawn_test::names_of;
using spawn_test::Outcome;
using spawn_test::run_shell;
using spawn_test::slurp;
using spawn_test::snapshot;
using spawn_test::TempDir;

namespace {

int device_count() {
  TempDir tmp;
  const Outcome o = cuflash("info --format json", tmp);
  const auto at = o.out.find("\"devices\": ");
  REQUIRE(at != std::string::npos);
  return std::atoi(o.out.c_str() + at + 11);
}

// Writes a small .npy with numpy: `expr` is a numpy expression for the array.
void numpy_save(const TempDir& tmp, const fs::path& path, const std::string& expr) {
  const std::string script = "import numpy as np; np.save('" + path.string() + "', " + expr + ")";
  const Outcome o = run_shell(std::string(CUFLASH_TEST_PYTHON) + " -c \"" + script + "\"", tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
}

// A shell word for a path (the tests' paths hold no quotes).
std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// --q, --k and --v: q.npy, k.npy and v.npy of `folder`.
std::string qkv_in(const fs::path& folder) {
  return " --q " + quoted(folder / "q.npy") + " --k " + quoted(folder / "k.npy") + " --v " +
         quoted(folder / "v.npy");
}

bool is_root() { return geteuid() == 0; }

}  // namespace

TEST_CASE("help, version and usage errors", "[cli]") {
  TempDir tmp;
  SECTION("--help lists the subcommands and the exit codes") {
    const Outcome o = cuflash("--help", tmp);
    CHECK(o.exit_code == 0);
    for (const char* word : {"run", "verify", "bench", "info", "Exit codes"}) {
      CHECK(o.out.find(word) != std::string::npos);
    }
  }
  SECTION("every subcommand has --help") {
    for (const char* sub : {"run", "verify", "bench", "info"}) {
      const Outcome o = cuflash(std::string(sub) + " --help", tmp);
      CHECK(o.exit_code == 0);
      CHECK(o.out.find("--") != std::string::npos);
    }
  }
  SECTION("--version") {
    const Outcome o = cuflash("--version", tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.out.find("cuflash ") == 0);
  }
  SECTION("no subcommand, unknown option, bad values: exit 2") {
    CHECK(cuflash("", tmp).exit_code == 2);
    CHECK(cuflash("run --no-such-option", tmp).exit_code == 2);
    const Outcome dtype = cuflash("run --backend cpu --dtype fp8", tmp);
    CHECK(dtype.exit_code == 2);
    CHECK(dtype.err.find("--dtype") != std::string::npos);
    const Outcome seq = cuflash("run --backend cpu -s 0", tmp);
    CHECK(seq.exit_code == 2);
    CHECK(seq.err.find("--seq") != std::string::npos);
  }
  SECTION("heads not divisible by heads-kv names the option") {
    const Outcome o = cuflash("run --backend cpu --heads 6 --heads-kv 4 -s 8 -d 8", tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("--heads-kv") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
  SECTION("shapes too large to address and non-finite scales: exit 2 before any work") {
    const Outcome big = cuflash("run --backend cpu -b 9223372036854775807 --heads 4096", tmp);
    CHECK(big.exit_code == 2);
    CHECK(big.err.find("too large") != std::string::npos);
    const Outcome scale = cuflash("run --backend cpu -s 8 -d 8 --scale nan", tmp);
    CHECK(scale.exit_code == 2);
    CHECK(scale.err.find("--scale") != std::string::npos);
  }
  SECTION("--splits: negative, above the key blocks or with fp32: exit 2, one line") {
    const Outcome negative = cuflash("run --backend cpu -s 1 --seq-k 200 -d 8 --splits -1", tmp);
    CHECK(negative.exit_code == 2);
    CHECK(negative.err.find("--splits") != std::string::npos);
    const Outcome many = cuflash("verify -s 1 --seq-k 200 -d 64 --dtype bf16 --splits 4,5", tmp);
    CHECK(many.exit_code == 2);
    CHECK(many.err.find("--splits 5") != std::string::npos);
    CHECK(many.err.find("4 key blocks") != std::string::npos);
    CHECK(count_lines(many.err) == 1);
    const Outcome fp32 = cuflash("run --backend cpu -s 1 --seq-k 200 -d 8 --dtype fp32 --splits 2",
                                 tmp);
    CHECK(fp32.exit_code == 2);
    CHECK(fp32.err.find("fp32") != std::string::npos);
    CHECK(count_lines(fp32.err) == 1);
    const Outcome bench = cuflash("bench --sweep decode --splits 2 --list", tmp);
    CHECK(bench.exit_code == 2);
    CHECK(bench.err.find("--splits") != std::string::npos);
    // One key block (singular); a varlen batch is refused as such, not counted by its packed keys.
    const Outcome one = cuflash("run --backend cpu -s 1 --seq-k 40 -d 8 --splits 2", tmp);
    CHECK(one.exit_code == 2);
    CHECK(one.err.find("has 1 key block of 64 keys") != std::string::npos);
    const Outcome varlen =
        cuflash("run --backend cpu --layout thd --seqlens 5,7 -d 8 --splits 2", tmp);
    CHECK(varlen.exit_code == 2);
    CHECK(varlen.err.find("--seqlens does not combine with") != std::string::npos);
    CHECK(varlen.err.find("key block") == std::string::npos);
    CHECK(count_lines(varlen.err) == 1);
  }
  SECTION("--splits in range: the CPU backend computes the same, the name carries it") {
    const Outcome o = cuflash("run --backend cpu -s 1 --seq-k 200 -d 8 --splits 4", tmp);
    CHECK(o.exit_code == 0);
    const Outcome list = cuflash("bench -s 1 --seq-k 200 --splits 0,3 --list", tmp);
    CHECK(list.exit_code == 0);
    CHECK(list.out.find("/sk:200/d:64/causal:0\n") != std::string::npos);
    CHECK(list.out.find("/sk:200/d:64/causal:0/splits:3\n") != std::string::npos);
  }
  SECTION("--deterministic: in every computing subcommand, on the CPU backend too") {
    for (const char* sub : {"run", "verify", "bench"}) {
      const Outcome help = cuflash(std::string(sub) + " --help", tmp);
      INFO(sub);
      CHECK(help.out.find("--deterministic") != std::string::npos);
    }
    const Outcome o = cuflash("run --backend cpu -s 8 -d 8 --backward --deterministic", tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.err.find("/deterministic") != std::string::npos);  // the case's name in the log
  }
  SECTION("run takes one value per option") {
    const Outcome o = cuflash("run --backend cpu -s 16,32", tmp);
    CHECK(o.exit_code == 2);
  }
  SECTION("--format before the subcommand: bench's formats for bench, refused elsewhere") {
    const Outcome csv = cuflash("--format csv bench --list -s 8", tmp);
    INFO(csv.err);
    CHECK(csv.exit_code == 0);
    const Outcome run = cuflash("--format csv run --backend cpu -s 8 -d 8", tmp);
    CHECK(run.exit_code == 2);
    CHECK(run.err.find("--format csv") != std::string::npos);
    CHECK(run.out.empty());
    CHECK(cuflash("run --backend cpu -s 8 -d 8 --format csv", tmp).exit_code == 2);
  }
  SECTION("input files belong to run: verify and bench refuse them, and their help omits them") {
    std::ofstream(tmp.path / "x.npy") << "x";
    for (const char* sub : {"verify -s 8", "bench --list -s 8"}) {
      for (const char* option : {"--q", "--dout"}) {
        const Outcome o =
            cuflash(std::string(sub) + " " + option + " " + (tmp.path / "x.npy").string(), tmp);
        INFO(sub << " " << option << ": " << o.err);
        CHECK(o.exit_code == 2);
        CHECK(o.err.find("belong to `cuflash run`") != std::string::npos);
      }
      const std::string name = std::string(sub).substr(0, std::string(sub).find(' '));
      const Outcome help = cuflash(name + " --help", tmp);
      CHECK(help.out.find("--dout") == std::string::npos);
      CHECK(help.out.find("Q from a .npy file") == std::string::npos);
    }
    CHECK(cuflash("run --help", tmp).out.find("--dout") != std::string::npos);
  }
  SECTION("an empty --sweep is refused, not read as no sweep") {
    const Outcome o = cuflash("bench --list --sweep ''", tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("--sweep") != std::string::npos);
  }
  SECTION("--save-inputs needs --out-dir") {
    const Outcome o = cuflash("run --backend cpu -s 8 -d 8 --save-inputs", tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("--out-dir") != std::string::npos);
  }
}

TEST_CASE("run on the CPU backend", "[cli]") {
  TempDir tmp;
  SECTION("table on stdout, logs on stderr") {
    const Outcome o = cuflash("run --backend cpu -b 1 --heads 2 -s 33 -d 16 --backward", tmp);
    REQUIRE(o.exit_code == 0);
    CHECK(o.out.find("tensor") == 0);
    for (const char* t : {"o ", "lse", "dq", "dk", "dv"}) CHECK(o.out.find(t) != std::string::npos);
    CHECK(count_lines(o.out) == 6);
  }
  SECTION("json: one object a line with stable keys") {
    const Outcome o = cuflash("run --backend cpu -s 17 -d 8 --format json", tmp);
    REQUIRE(o.exit_code == 0);
    CHECK(count_lines(o.out) == 2);
    CHECK(o.out.rfind("{\"tensor\": \"o\", \"shape\": [1, 8, 17, 8]", 0) == 0);
    CHECK(o.out.find("\"nonfinite\": 0") != std::string::npos);
  }
  SECTION("json: a path's bytes that are not UTF-8 become U+FFFD, its UTF-8 stays") {
    const fs::path dir = tmp.path / "bad\xff\xfe-\xc3\xa9";
    const Outcome o =
        cuflash("run --backend cpu -s 17 -d 8 --format json -q --out-dir " + quoted(dir), tmp);
    REQUIRE(o.exit_code == 0);
    CHECK(o.out.find("bad\\ufffd\\ufffd-\xc3\xa9") != std::string::npos);
    CHECK(o.out.find('\xff') == std::string::npos);
    CHECK(fs::exists(dir / "o.npy"));
  }
  SECTION("auto without a GPU says so on stderr") {
    if (device_count() == 0) {
      const Outcome o = cuflash("run -s 8 -d 8", tmp);
      CHECK(o.exit_code == 0);
      CHECK(o.err.find("CPU") != std::string::npos);
    }
  }
  SECTION("an unusable --out-dir fails before computing: exit 3, one line") {
    std::ofstream(tmp.path / "plain-file") << "x";
    const Outcome o =
        cuflash("run --backend cpu -s 8 -d 8 --out-dir " + (tmp.path / "plain-file" / "sub").string(), tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("--out-dir") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    CHECK(o.out.empty());
  }
  SECTION("a forward-only run into a folder with gradients of an earlier run warns about them") {
    const std::string dir = (tmp.path / "out").string();
    REQUIRE(cuflash("run --backend cpu -s 8 -d 8 --backward -q --out-dir " + dir, tmp).exit_code ==
            0);
    const Outcome o = cuflash("run --backend cpu -s 8 -d 8 --out-dir " + dir, tmp);
    CHECK(o.exit_code == 0);
    for (const char* name : {"dq.npy", "dk.npy", "dv.npy"}) {
      CHECK(o.err.find(name) != std::string::npos);
    }
    CHECK(o.err.find("earlier run") != std::string::npos);
    const Outcome again = cuflash("run --backend cpu -s 8 -d 8 --backward --out-dir " + dir, tmp);
    CHECK(again.err.find("earlier run") == std::string::npos);
  }
  SECTION("-q silences the logs") {
    const Outcome o = cuflash("run --backend cpu -s 8 -d 8 -q", tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.err.empty());
  }
}

TEST_CASE("run writes files that numpy loads and that match an independent computation",
          "[cli]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "out";
  const Outcome o = cuflash("run --backend cpu -b 2 --heads 4 --heads-kv 2 -s 257 --seq-k 300 -d 64 "
                            "--dtype bf16 --causal --backward --save-inputs --out-dir " +
                                dir.string(),
                            tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  for (const char* f : {"o", "lse", "dq", "dk", "dv", "q", "k", "v", "dout"}) {
    CHECK(fs::exists(dir / (std::string(f) + ".npy")));
  }
  // The same attention, written again in numpy float64 from the saved bf16 inputs; bottom-right
  // causal mask; outputs are bf16 (rounded from float64), so compare within bf16 rounding.
  const std::string script = R"PY(
import numpy as np, sys
d = sys.argv[1]
def load(n):
    a = np.load(f"{d}/{n}.npy")
    if a.dtype.itemsize == 2 and a.dtype.kind in "Viu":
        a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)
q, k, v, do = load("q"), load("k"), load("v"), load("dout")
B, H, Sq, D = q.shape; Hkv, Sk = k.shape[1], k.shape[2]
k = np.repeat(k, H // Hkv, axis=1); v = np.repeat(v, H // Hkv, axis=1)
s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
i = np.arange(Sq)[:, None]; j = np.arange(Sk)[None, :]
s = np.where(j <= i + (Sk - Sq), s, -np.inf)
m = s.max(-1, keepdims=True)
p = np.exp(s - m); l = p.sum(-1, keepdims=True); p /= l
o = p @ v; lse = (m + np.log(l))[..., 0]
dv = p.transpose(0, 1, 3, 2) @ do
dp = do @ v.transpose(0, 1, 3, 2)
ds = p * (dp - (do * o).sum(-1, keepdims=True)) / np.sqrt(D)
dq = ds @ k; dk = ds.transpose(0, 1, 3, 2) @ q
dk = dk.reshape(B, Hkv, H // Hkv, Sk, D).sum(2); dv = dv.reshape(B, Hkv, H // Hkv, Sk, D).sum(2)
worst = 0
for name, ref in [("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)]:
    got = load(name)
    assert got.shape == ref.shape, (name, got.shape, ref.shape)
    err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
    tol = 1e-6 if name == "lse" else 2 ** -8
    print(name, err, file=sys.stderr)
    assert err <= tol, (name, err)
print("ok")
)PY";
  std::ofstream(tmp.path / "check.py") << script;
  const Outcome check =
      run_shell(std::string(CUFLASH_TEST_PYTHON) + " " + (tmp.path / "check.py").string() + " " +
                    dir.string(),
                tmp);
  INFO(check.err);
  CHECK(check.exit_code == 0);
  CHECK(check.out == "ok\n");
}

TEST_CASE("run: LSE's +inf is non-finite unless its row sees no key", "[cli]") {
  TempDir tmp;
  const auto lse_nonfinite = [](const Outcome& o) {
    const auto at = o.out.find("\"tensor\": \"lse\"");
    REQUIRE(at != std::string::npos);
    const auto field = o.out.find("\"nonfinite\": ", at);
    REQUIRE(field != std::string::npos);
    return std::atoll(o.out.c_str() + field + 13);
  };
  // Bottom-right causal, 8 queries on 4 keys: rows 0-3 of each of the 2 heads see no key.
  const Outcome keyless =
      cuflash("run --backend cpu --heads 2 -s 8 --seq-k 4 -d 8 --causal --format json", tmp);
  INFO(keyless.err);
  REQUIRE(keyless.exit_code == 0);
  CHECK(lse_nonfinite(keyless) == 0);
  // Scores of 8e40 overflow fp32: every LSE is +inf while every row sees keys (O is 1).
  numpy_save(tmp, tmp.path / "q.npy", "np.full((1, 1, 4, 8), 1e20, np.float32)");
  numpy_save(tmp, tmp.path / "v.npy", "np.ones((1, 1, 4, 8), np.float32)");
  const std::string q = quoted(tmp.path / "q.npy");
  const Outcome overflow = cuflash("run --backend cpu --format json --q " + q + " --k " + q +
                                       " --v " + quoted(tmp.path / "v.npy"),
                                   tmp);
  INFO(overflow.err);
  REQUIRE(overflow.exit_code == 0);
  CHECK(lse_nonfinite(overflow) == 4);
}

TEST_CASE("run reads inputs from .npy files", "[cli]") {
  TempDir tmp;
  const auto path = [&](const char* name) { return (tmp.path / name).string(); };
  numpy_save(tmp, path("q.npy"), "np.random.default_rng(1).standard_normal((1,2,5,8)).astype(np.float32)");
  numpy_save(tmp, path("k.npy"), "np.random.default_rng(2).standard_normal((1,1,7,8)).astype(np.float32)");
  numpy_save(tmp, path("v.npy"), "np.random.default_rng(3).standard_normal((1,1,7,8)).astype(np.float32)");
  const std::string files = " --q " + path("q.npy") + " --k " + path("k.npy") + " --v " + path("v.npy");

  SECTION("shape and dtype come from the files") {
    const Outcome o = cuflash("run --backend cpu --format json" + files, tmp);
    INFO(o.err);
    REQUIRE(o.exit_code == 0);
    CHECK(o.out.find("\"shape\": [1, 2, 5, 8], \"dtype\": \"fp32\"") != std::string::npos);
  }
  SECTION("a malformed file: exit 2, one line naming the file, nothing written") {
    std::ofstream(path("bad.npy")) << "\x93NUMPY\x01\x00garbage";
    const fs::path dir = tmp.path / "never";
    const Outcome o = cuflash("run --backend cpu --q " + path("bad.npy") + " --k " + path("k.npy") +
                                  " --v " + path("v.npy") + " --out-dir " + dir.string(),
                              tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("bad.npy") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    CHECK_FALSE(fs::exists(dir));
  }
  SECTION("files that disagree: exit 2 naming both") {
    numpy_save(tmp, path("v2.npy"), "np.ones((1,1,6,8), np.float32)");
    const Outcome o = cuflash("run --backend cpu --q " + path("q.npy") + " --k " + path("k.npy") +
                                  " --v " + path("v2.npy"), tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("v2.npy") != std::string::npos);
    CHECK(o.err.find("k.npy") != std::string::npos);
  }
  SECTION("a zero dimension: exit 2 naming the file") {
    numpy_save(tmp, path("k0.npy"), "np.ones((1,0,7,8), np.float32)");
    const Outcome o = cuflash("run --backend cpu --q " + path("q.npy") + " --k " + path("k0.npy") +
                                  " --v " + path("k0.npy"), tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("k0.npy") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
  SECTION("wrong rank: exit 2") {
    numpy_save(tmp, path("q3.npy"), "np.ones((2,5,8), np.float32)");
    const Outcome o = cuflash("run --backend cpu --q " + path("q3.npy") + " --k " + path("k.npy") +
                                  " --v " + path("v.npy"), tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("4-D") != std::string::npos);
  }
  SECTION("a missing file: exit 2 naming it") {
    const Outcome o = cuflash("run --backend cpu --q " + path("nope.npy") + " --k " + path("k.npy") +
                                  " --v " + path("v.npy"), tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("nope.npy") != std::string::npos);
  }
}

TEST_CASE("GPU commands without a GPU fail fast and clearly", "[cli]") {
  TempDir tmp;
  if (device_count() > 0) {
    SUCCEED("a GPU is present: covered by the gpu-labelled tests");
    return;
  }
  for (const char* args :
       {"run --backend cuda -s 8 -d 64", "verify -s 8 -d 8", "bench -s 8 -d 8"}) {
    const Outcome o = cuflash(args, tmp);
    INFO(args);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("GPU") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    CHECK(o.out.empty());
  }
  const Outcome info = cuflash("info", tmp);
  CHECK(info.exit_code == 0);
  CHECK(info.out.find("devices") != std::string::npos);
}

TEST_CASE("info names the backward's dQ orders and the option that fixes it", "[cli]") {
  TempDir tmp;
  const Outcome table = cuflash("info", tmp);
  CHECK(table.exit_code == 0);
  CHECK(table.out.find("backward_dq") != std::string::npos);
  CHECK(table.out.find("--deterministic") != std::string::npos);
  const Outcome json = cuflash("info --format json", tmp);
  CHECK(json.exit_code == 0);
  CHECK(json.out.find("\"backward_dq\":") != std::string::npos);
}

TEST_CASE("info lists the head dims the GPU kernels take", "[cli]") {
  TempDir tmp;
  const Outcome json = cuflash("info --format json", tmp);
  CHECK(json.exit_code == 0);
  const std::string expected =
      "\"head_dims\": \"8-256 in steps of 8 (tuned: 32, 64, 96, 128, 192, 256)\"";
  CHECK(json.out.find(expected) != std::string::npos);
}

TEST_CASE("info says whether --gpus is built in, with which NCCL", "[cli]") {
  TempDir tmp;
  const Outcome json = cuflash("info --format json", tmp);
  CHECK(json.exit_code == 0);
  const bool with_nccl =
      json.out.find("\"multi_gpu\": \"--gpus through NCCL ") != std::string::npos;
  const bool without = json.out.find("\"multi_gpu\": \"none (built without NCCL)\"") !=
                       std::string::npos;
  CHECK(with_nccl != without);
}

TEST_CASE("run --out-dir: a failed write leaves the folder exactly as it was", "[cli][out-dir]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "d";
  SECTION("inputs read from the folder survive a --save-inputs run that cannot write dout.npy") {
    fs::create_directories(dir);
    for (const char* name : {"q", "k", "v"}) {
      numpy_save(tmp, dir / (std::string(name) + ".npy"),
                 "np.random.default_rng(" + std::to_string(name[0]) +
                     ").standard_normal((1,2,16,8)).astype(np.float32)");
    }
    fs::create_directory(dir / "dout.npy");  // a name that cannot be written
    const auto before = snapshot(dir);
    const Outcome o = cuflash(
        "run --backend cpu" + qkv_in(dir) + " --backward --save-inputs --out-dir " + quoted(dir),
        tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("dout.npy") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    CHECK(o.out.empty());
    INFO("before: " << names_of(before) << "\nafter: " << names_of(snapshot(dir)));
    CHECK(snapshot(dir) == before);
  }
  SECTION("an earlier run's outputs survive a run that cannot write dk.npy") {
    REQUIRE(cuflash("run --backend cpu -s 64 -q --out-dir " + quoted(dir), tmp).exit_code == 0);
    fs::create_directory(dir / "dk.npy");
    const auto before = snapshot(dir);
    REQUIRE(before.count("o.npy") == 1);
    REQUIRE(before.count("lse.npy") == 1);
    const Outcome o = cuflash("run --backend cpu -s 64 --backward --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("dk.npy") != std::string::npos);
    INFO("before: " << names_of(before) << "\nafter: " << names_of(snapshot(dir)));
    CHECK(snapshot(dir) == before);
  }
  SECTION("a summary that cannot be written to stdout: exit 3, the files are not moved in") {
    if (!fs::exists("/dev/full")) {
      WARN("skipped: this system has no /dev/full");
      return;
    }
    REQUIRE(cuflash("run --backend cpu -s 64 -q --out-dir " + quoted(dir), tmp).exit_code == 0);
    const auto before = snapshot(dir);
    const Outcome o = run_shell("(NO_COLOR=1 " + std::string(CUFLASH_BINARY) +
                                    " run --backend cpu -s 64 --seed 3 -q --out-dir " +
                                    quoted(dir) + " >/dev/full)",
                                tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("stdout") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    CHECK(snapshot(dir) == before);
  }
  SECTION("a summary to a reader that has gone: exit 3, the files are not moved in") {
    REQUIRE(cuflash("run --backend cpu -s 64 -q --out-dir " + quoted(dir), tmp).exit_code == 0);
    const auto before = snapshot(dir);
    const ClosedPipeOutcome o = cuflash_into_closed_pipe(
        "run --backend cpu -s 64 --seed 3 -q --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("stdout") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    INFO("before: " << names_of(before) << "\nafter: " << names_of(snapshot(dir)));
    CHECK(snapshot(dir) == before);
  }
  SECTION("a write that fails half-way (a file size limit, as a full disk would) changes nothing") {
    // o.npy (16 KiB) and lse.npy fit under the limit (50 or 100 KiB, as the shell counts
    // ulimit -f blocks); dk.npy (256 KiB) does not. SIGXFSZ ignored: the write fails instead.
    const std::string shape = "run --backend cpu --heads 2 -s 64 --seq-k 1024 -d 64 ";
    REQUIRE(cuflash(shape + "--seed 1 -q --out-dir " + quoted(dir), tmp).exit_code == 0);
    const auto before = snapshot(dir);
    const Outcome o = run_shell("(trap '' XFSZ; ulimit -f 100; NO_COLOR=1 exec " +
                                    std::string(CUFLASH_BINARY) + " " + shape +
                                    "--seed 2 --backward --out-dir " + quoted(dir) + ")",
                                tmp);
    INFO(o.err);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("--out-dir") != std::string::npos);
    INFO("before: " << names_of(before) << "\nafter: " << names_of(snapshot(dir)));
    CHECK(snapshot(dir) == before);
  }
}

TEST_CASE("run: Ctrl-C, SIGTERM or SIGHUP stops it with exit 130 and writes nothing",
          "[cli][out-dir]") {
  TempDir tmp;
  // Some 100 GFLOP on the CPU reference: many seconds anywhere, in blocks of milliseconds.
  const std::string args = "run --backend cpu --heads 8 -s 8192 -d 64 --backward --out-dir ";
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    for (const bool existing : {false, true}) {
      const fs::path dir = tmp.path / ("out-" + std::to_string(sig) + (existing ? "-old" : "-new"));
      if (existing) {
        const std::string earlier = "run --backend cpu -s 16 -d 8 -q --out-dir " + quoted(dir);
        REQUIRE(cuflash(earlier, tmp).exit_code == 0);
      }
      const auto before = snapshot(dir);
      const fs::path err = tmp.path / "bg-stderr.txt";
      const pid_t pid = spawn_test::spawn_background(
          "env NO_COLOR=1 " + std::string(CUFLASH_BINARY) + " " + args + quoted(dir),
          tmp.path / "bg-stdout.txt", err);
      REQUIRE(pid > 0);
      // "forward+backward ... on cpu" is logged right before the computation starts.
      const bool computing = spawn_test::wait_for_text(err, "on cpu", 60);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      kill(pid, sig);
      const auto sent = std::chrono::steady_clock::now();
      const int code = spawn_test::wait_exit_code(pid);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
      INFO("signal " << sig << (existing ? ", folder of an earlier run" : ", new folder") << "\n"
                     << slurp(err));
      REQUIRE(computing);
      CHECK(code == 130);
      CHECK(seconds < 10);
      CHECK(slurp(err).find("interrupted") != std::string::npos);
      CHECK(fs::exists(dir) == existing);
      CHECK(snapshot(dir) == before);
      CHECK(slurp(tmp.path / "bg-stdout.txt").empty());
    }
  }
}

TEST_CASE("run --out-dir: a folder that cannot be written fails before computing",
          "[cli][out-dir]") {
  TempDir tmp;
  const std::string compute = "run --backend cpu --heads 8 -s 1024 -d 64 --out-dir ";
  SECTION("an existing folder without write permission") {
    if (is_root()) {
      WARN("skipped: running as root, whom folder permissions do not stop");
      return;
    }
    const fs::path dir = tmp.path / "read-only";
    fs::create_directory(dir);
    std::ofstream(dir / "o.npy") << "earlier";
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    const auto before = snapshot(dir);
    const Outcome o = cuflash(compute + quoted(dir), tmp);
    fs::permissions(dir, fs::perms::owner_all);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("--out-dir") != std::string::npos);
    CHECK(o.err.find("on cpu") == std::string::npos);  // the computation never started
    CHECK(count_lines(o.err) == 1);
    CHECK(snapshot(dir) == before);
  }
  SECTION("a folder nobody can write into (/proc)") {
    if (!fs::is_directory("/proc")) {
      WARN("skipped: this system has no /proc");
      return;
    }
    const Outcome o = cuflash(compute + "/proc", tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("--out-dir /proc") != std::string::npos);
    CHECK(o.err.find("on cpu") == std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
}

TEST_CASE("run --out-dir: files of an earlier run never sit silently beside new ones",
          "[cli][out-dir]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "d";
  const std::string shape = "run --backend cpu -s 16 -d 8 ";
  const std::string in_dir = " --q " + quoted(dir / "q.npy") + " --k " + quoted(dir / "k.npy") +
                             " --v " + quoted(dir / "v.npy");
  SECTION("inputs of an earlier seed, without --save-inputs: refused, exit 2, nothing changed") {
    REQUIRE(cuflash(shape + "--seed 1 --save-inputs -q --out-dir " + quoted(dir), tmp).exit_code ==
            0);
    const auto before = snapshot(dir);
    const Outcome o = cuflash(shape + "--seed 2 --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 2);
    for (const char* name : {"q.npy", "k.npy", "v.npy", "--save-inputs"}) {
      CHECK(o.err.find(name) != std::string::npos);
    }
    CHECK(count_lines(o.err) == 1);
    CHECK(o.out.empty());
    CHECK(snapshot(dir) == before);
    // The same inputs given as the run's inputs are not foreign: the run goes ahead.
    CHECK(cuflash("run --backend cpu -q" + in_dir + " --out-dir " + quoted(dir), tmp).exit_code ==
          0);
  }
  SECTION("--save-inputs of another seed replaces the earlier inputs") {
    const fs::path fresh = tmp.path / "fresh";
    REQUIRE(cuflash(shape + "--seed 1 --save-inputs -q --out-dir " + quoted(dir), tmp).exit_code ==
            0);
    REQUIRE(cuflash(shape + "--seed 2 --save-inputs -q --out-dir " + quoted(dir), tmp).exit_code ==
            0);
    REQUIRE(cuflash(shape + "--seed 2 --save-inputs -q --out-dir " + quoted(fresh), tmp)
                .exit_code == 0);
    for (const char* name : {"q.npy", "k.npy", "v.npy", "o.npy", "lse.npy"}) {
      INFO(name);
      CHECK(slurp(dir / name) == slurp(fresh / name));
    }
  }
  SECTION("--save-inputs with inputs read from the folder leaves those files as they are") {
    REQUIRE(cuflash(shape + "--seed 1 --save-inputs -q --out-dir " + quoted(dir), tmp).exit_code ==
            0);
    const auto before = snapshot(dir);
    const Outcome o =
        cuflash("run --backend cpu --save-inputs" + in_dir + " --out-dir " + quoted(dir), tmp);
    INFO(o.err);
    REQUIRE(o.exit_code == 0);
    const auto after = snapshot(dir);
    for (const char* name : {"q.npy", "k.npy", "v.npy"}) {
      INFO(name);
      CHECK(after.at(name) == before.at(name));  // the same file (inode) with the same bytes
    }
  }
  SECTION("an output name that is one of the run's inputs: refused, exit 2, nothing changed") {
    REQUIRE(cuflash(shape + "--seed 1 --save-inputs -q --out-dir " + quoted(dir), tmp).exit_code ==
            0);
    fs::rename(dir / "q.npy", dir / "o.npy");
    fs::remove(dir / "k.npy");
    fs::remove(dir / "v.npy");
    const fs::path elsewhere = tmp.path / "kv";
    REQUIRE(cuflash(shape + "--seed 1 --save-inputs -q --out-dir " + quoted(elsewhere), tmp)
                .exit_code == 0);
    const auto before = snapshot(dir);
    const Outcome o = cuflash("run --backend cpu --q " + quoted(dir / "o.npy") + " --k " +
                                  quoted(elsewhere / "k.npy") + " --v " +
                                  quoted(elsewhere / "v.npy") + " --out-dir " + quoted(dir),
                              tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("o.npy") != std::string::npos);
    CHECK(o.err.find("--q") != std::string::npos);
    CHECK(snapshot(dir) == before);
  }
  SECTION("an output name linked to an input elsewhere: the error names the input as given") {
    const fs::path inputs = tmp.path / "inputs";
    REQUIRE(
        cuflash(shape + "--seed 1 --save-inputs -q --out-dir " + quoted(inputs), tmp).exit_code ==
        0);
    fs::create_directory(dir);
    fs::create_symlink(inputs / "q.npy", dir / "o.npy");
    const auto before = snapshot(dir);
    const Outcome o =
        cuflash("run --backend cpu" + qkv_in(inputs) + " --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 2);
    const std::string named =
        "--q " + (inputs / "q.npy").string() + " (as " + (dir / "o.npy").string() + ")";
    INFO(o.err);
    CHECK(o.err.find(named) != std::string::npos);
    CHECK(snapshot(dir) == before);
  }
  SECTION("an --alibi-slopes file in the folder is an input too: never written") {
    fs::create_directory(dir);
    numpy_save(tmp, dir / "lse.npy", "np.full(2, 0.5, np.float32)");
    const std::string slopes = "--heads 2 --alibi-slopes ";
    const auto before = snapshot(dir);
    const Outcome o =
        cuflash(shape + slopes + quoted(dir / "lse.npy") + " --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("lse.npy") != std::string::npos);
    CHECK(o.err.find("--alibi-slopes") != std::string::npos);
    CHECK(snapshot(dir) == before);
    fs::rename(dir / "lse.npy", dir / "q.npy");
    const auto renamed = snapshot(dir);
    const Outcome saved = cuflash(
        shape + "--save-inputs " + slopes + quoted(dir / "q.npy") + " --out-dir " + quoted(dir),
        tmp);
    CHECK(saved.exit_code == 2);
    CHECK(saved.err.find("--alibi-slopes") != std::string::npos);
    CHECK(snapshot(dir) == renamed);
    // Without --save-inputs nothing is written onto it: the run goes ahead beside it.
    const Outcome beside =
        cuflash(shape + "-q " + slopes + quoted(dir / "q.npy") + " --out-dir " + quoted(dir), tmp);
    INFO(beside.err);
    CHECK(beside.exit_code == 0);
    CHECK(snapshot(dir).at("q.npy") == renamed.at("q.npy"));
  }
  SECTION("a staging folder a killed run left behind is named in a warning and kept") {
    const fs::path left = dir / ".cuflash-staging-AbC123";
    fs::create_directories(left / "previous");
    std::ofstream(left / "previous" / "o.npy") << "earlier";
    const Outcome o = cuflash(shape + "--out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.err.find(".cuflash-staging-AbC123") != std::string::npos);
    CHECK(o.err.find("previous/ holds files") != std::string::npos);
    CHECK(slurp(left / "previous" / "o.npy") == "earlier");
  }
  SECTION("a forward-only run warns about dq, dk, dv and dout.npy of an earlier backward run") {
    REQUIRE(cuflash(shape + "--backward --save-inputs -q --out-dir " + quoted(dir), tmp)
                .exit_code == 0);
    const Outcome o = cuflash("run --backend cpu" + in_dir + " --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 0);
    for (const char* name : {"dq.npy", "dk.npy", "dv.npy", "dout.npy"}) {
      CHECK(o.err.find(name) != std::string::npos);
      CHECK(fs::exists(dir / name));
    }
  }
}

TEST_CASE("results that cannot be written to stdout: exit 3", "[cli]") {
  TempDir tmp;
  if (!fs::exists("/dev/full")) {
    WARN("skipped: this system has no /dev/full");
    return;
  }
  for (const char* args : {"-q run --backend cpu -s 8 -d 8", "-q run --backend cpu -s 8 -d 8 "
                           "--format json", "info", "bench --list -s 8 -d 8", "--help"}) {
    INFO(args);
    const Outcome o = run_shell(std::string("(NO_COLOR=1 ") + CUFLASH_BINARY + " " + args +
                                    " >/dev/full)",
                                tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("stdout") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
  // A reader that has gone (`| head -1` done): the write fails, no SIGPIPE ends the process.
  for (const char* args : {"-q run --backend cpu -s 8 -d 8", "info", "bench --list -s 8 -d 8"}) {
    INFO(args);
    const ClosedPipeOutcome o = cuflash_into_closed_pipe(args, tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("stdout") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
}

TEST_CASE("run checks what needs no GPU first, and memory before allocating", "[cli]") {
  TempDir tmp;
  SECTION("-d 100, 264, 4 on --backend cuda: exit 2 naming the CPU backend, GPU or not") {
    for (const char* dim : {"100", "264", "4"}) {
      INFO("-d " << dim);
      const fs::path dir = tmp.path / (std::string("out") + dim);
      const Outcome o =
          cuflash("run --backend cuda -s 8 -d " + std::string(dim) + " --out-dir " + quoted(dir),
                  tmp);
      CHECK(o.exit_code == 2);
      CHECK(o.err.find("--head-dim " + std::string(dim)) != std::string::npos);
      CHECK(o.err.find("multiple of 8 from 8 to 256") != std::string::npos);
      CHECK(o.err.find("--backend cpu") != std::string::npos);
      CHECK(count_lines(o.err) == 1);
      CHECK(o.out.empty());
      CHECK_FALSE(fs::exists(dir));
    }
  }
  SECTION("-d 40 and -d 256 pass the head_dim check on --backend cuda") {
    for (const char* dim : {"40", "256"}) {
      INFO("-d " << dim);
      const Outcome o = cuflash("-q run --backend cuda -s 8 --heads 2 -d " + std::string(dim), tmp);
      CHECK(o.exit_code == (device_count() > 0 ? 0 : 3));  // no GPU: exit 3, after the check
      CHECK(o.err.find("head_dim") == std::string::npos);
    }
  }
  SECTION("verify and bench without a GPU: a head_dim no kernel takes is named first (exit 2)") {
    if (device_count() > 0) {
      SUCCEED("a GPU is present: verify records such a case and runs the others");
      return;
    }
    for (const char* command : {"verify -s 8 -d 64,100", "bench -s 8 -d 100 --pass fwd"}) {
      INFO(command);
      const Outcome o = cuflash(command, tmp);
      CHECK(o.exit_code == 2);
      CHECK(o.err.find("--head-dim 100") != std::string::npos);
      CHECK(count_lines(o.err) == 1);
    }
  }
  SECTION("-d 100 on --backend cpu runs: the CPU backend takes any head_dim") {
    const Outcome o = cuflash("-q run --backend cpu -s 8 --heads 2 -d 100", tmp);
    CHECK(o.exit_code == 0);
  }
  SECTION("no GPU is found before any input is made") {
    if (device_count() > 0) {
      SUCCEED("a GPU is present");
      return;
    }
    // 10^12 elements a tensor: making the inputs would fail long before saying there is no GPU.
    const Outcome o = cuflash("run --backend cuda --heads 16 -s 1000000000 -d 64", tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("GPU") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
  SECTION("a case larger than the host's memory: exit 3 naming both sizes, nothing allocated") {
    const Outcome o = cuflash("run --backend cpu --heads 16 -s 1000000000 -d 64", tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("host memory") != std::string::npos);
    CHECK(o.err.find("available") != std::string::npos);
    CHECK(o.err.find("-s 1000000000") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
  }
  SECTION("output files larger than the file system's free space: exit 3 before computing") {
    const fs::path dir = tmp.path / "never";
    const Outcome o =
        cuflash("run --backend cpu --heads 16 -s 1000000000 -d 64 --out-dir " + quoted(dir), tmp);
    CHECK(o.exit_code == 3);
    CHECK(o.err.find("free") != std::string::npos);
    CHECK(count_lines(o.err) == 1);
    CHECK_FALSE(fs::exists(dir));
  }
}

TEST_CASE("run on the CPU shows its progress on a terminal, and only there", "[cli]") {
  TempDir tmp;
  // A few seconds of CPU reference: long enough for the first redraw after half a second.
  const std::string args = "run --backend cpu --heads 8 -s 4096 -d 64";
  SECTION("stderr piped: no progress line") {
    const Outcome o = cuflash(args, tmp);
    CHECK(o.exit_code == 0);
    CHECK(o.err.find('\r') == std::string::npos);
    CHECK(o.err.find("CPU reference,") == std::string::npos);
  }
  SECTION("stderr a terminal: a progress line with a percentage") {
    const std::string script = R"PY(
import os, pty, subprocess, sys
master, slave = pty.openpty()
# One thread: the reference then takes seconds however many cores the machine has.
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, env=dict(os.environ, NO_COLOR="1", OMP_NUM_THREADS="1"))
os.close(slave)
data = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
code = child.wait()
sys.stdout.write(data.decode("utf-8", "replace"))
sys.exit(code)
)PY";
    std::ofstream(tmp.path / "on_terminal.py") << script;
    const Outcome o = run_shell(std::string(CUFLASH_TEST_PYTHON) + " " +
                                    quoted(tmp.path / "on_terminal.py") + " " + CUFLASH_BINARY + " " + args,
                                tmp);
    INFO(o.out << o.err);
    CHECK(o.exit_code == 0);
    CHECK(o.out.find("CPU reference, forward: ") != std::string::npos);
    CHECK(o.out.find("% (") != std::string::npos);
    CHECK(o.out.find("left") != std::string::npos);
  }
}

// Tagged [gpu]: registered under the ctest label `gpu` (tests/CMakeLists.txt), not run in CI.
TEST_CASE("run on the GPU writes what the CPU backend writes", "[gpu]") {
  TempDir tmp;
  REQUIRE(device_count() > 0);
  const std::string shape =
      "run -b 2 --heads 4 --heads-kv 2 -s 129 --seq-k 200 -d 64 --dtype bf16 --causal "
      "--layout bshd --backward --seed 5 --out-dir ";
  const Outcome gpu = cuflash(shape + (tmp.path / "gpu").string() + " --backend cuda", tmp);
  INFO(gpu.err);
  REQUIRE(gpu.exit_code == 0);
  CHECK(gpu.out.find("cuda") != std::string::npos);
  const Outcome cpu = cuflash(shape + (tmp.path / "cpu").string() + " --backend cpu", tmp);
  REQUIRE(cpu.exit_code == 0);
  // A check of the plumbing (layouts, dtypes, files), not of precision (that is `verify`):
  // bf16 outputs may differ by a few bf16 rounding steps; a layout or dtype mix-up is O(1).
  const std::string script = R"PY(
import numpy as np, sys
a, b = sys.argv[1], sys.argv[2]
def load(d, n):
    x = np.load(f"{d}/{n}.npy")
    if x.dtype.itemsize == 2 and x.dtype.kind in "Viu":
        x = (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float64)
for n in ["o", "lse", "dq", "dk", "dv"]:
    g, c = load(a, n), load(b, n)
    assert g.shape == c.shape, (n, g.shape, c.shape)
    assert np.isfinite(g).all(), n
    err = np.abs(g - c).max() / max(1.0, np.abs(c).max())
    print(n, err, file=sys.stderr)
    assert err <= (1e-5 if n == "lse" else 2 ** -5), (n, err)
print("ok")
)PY";
  std::ofstream(tmp.path / "same.py") << script;
  const Outcome check = run_shell(std::string(CUFLASH_TEST_PYTHON) + " " +
                                      (tmp.path / "same.py").string() + " " +
                                      (tmp.path / "gpu").string() + " " +
                                      (tmp.path / "cpu").string(),
                                  tmp);
  INFO(check.err);
  CHECK(check.out == "ok\n");
}

// Tagged [gpu]: verify on a varlen batch compares every output, LSE ([heads, total_q]) included,
// in the packed layout (a 3-D output must not be taken for an LSE, nor the 2-D LSE for an output).
TEST_CASE("verify --layout thd compares a varlen batch's outputs", "[gpu]") {
  TempDir tmp;
  REQUIRE(device_count() > 0);
  const Outcome o = cuflash(
      "verify --layout thd --heads 4 --heads-kv 2 --seqlens 1,113,300 --seqlens-k 64,113,77 "
      "-d 64 --dtype bf16 --mask causal,causal-top-left --backward",
      tmp);
  INFO(o.out << o.err);
  REQUIRE(o.exit_code == 0);
  const std::string printed = o.out + o.err;  // the table, then the summary line
  for (const char* tensor : {" o ", " lse ", " dq ", " dk ", " dv "}) {
    CHECK(printed.find(tensor) != std::string::npos);
  }
  CHECK(printed.find("all 2 cases passed") != std::string::npos);
}

namespace {

// The peak host memory and the estimate that `run -v` reports on stderr, in bytes.
struct PeakMemory {
  double peak = -1, estimate = -1;
};

PeakMemory peak_memory_of(const Outcome& o) {
  PeakMemory m;
  const auto at = o.err.find("peak host memory ");
  if (at == std::string::npos) return m;
  const auto number_after = [&](const std::string& marker, size_t from) {
    const auto open = o.err.find(marker, from);
    return open == std::string::npos ? -1.0 : std::atof(o.err.c_str() + open + marker.size());
  };
  m.peak = number_after("(", at);
  m.estimate = number_after("(", o.err.find("estimated", at));
  return m;
}

}  // namespace

TEST_CASE("run holds each tensor once in its stored form, and at most one float64 copy",
          "[cli]") {
  TempDir tmp;
  // What the process holds with (almost) no tensors: code, libraries, allocator.
  const Outcome tiny = cuflash("run --backend cpu -s 8 -d 8 -v", tmp);
  REQUIRE(tiny.exit_code == 0);
  const double base = peak_memory_of(tiny).peak;
  REQUIRE(base > 0);
  // bf16 tensors of 2^24 elements (32 MiB stored, 128 MiB as float64); short rows keep the CPU
  // reference at a second or two.
  const double elements = 64.0 * 16 * 256 * 64;
  const Outcome o = cuflash("run --backend cpu -b 64 --heads 16 -s 256 -d 64 --dtype bf16 -v "
                            "--out-dir " + quoted(tmp.path / "out"),
                            tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  const PeakMemory m = peak_memory_of(o);
  // Stored: Q, K, V, O (2 bytes each) and LSE; one float64 copy of each of Q, K, V, O; the
  // reference's working memory is tiles of at most a few MiB. Before, every tensor was held as
  // float64 (and copied again in the file's layout), about 25x the bytes of one tensor.
  const double stored = 4 * 2 * elements, float64 = 4 * 8 * elements;
  CHECK(m.peak - base <= 1.1 * (stored + float64) + 64.0 * (1 << 20));
  // The estimate behind the memory check is not below what the run held.
  CHECK(m.peak - base <= m.estimate);
}

TEST_CASE("verify refuses cases the CPU reference would take minutes on, before anything else",
          "[cli]") {
  TempDir tmp;
  const Outcome o = cuflash("verify -b 1 --heads 16 -s 16384 -d 128", tmp);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find("2^33") != std::string::npos);
  CHECK(o.err.find("--no-size-limit") != std::string::npos);
  CHECK(count_lines(o.err) == 1);
  // The help names the option.
  CHECK(cuflash("verify --help", tmp).out.find("--no-size-limit") != std::string::npos);
}

// Tagged [gpu]: the GPU path moves stored bytes to the device and back, with no float64 copy.
TEST_CASE("run --backend cuda --backward holds no more than its tensors' bytes", "[gpu]") {
  TempDir tmp;
  REQUIRE(device_count() > 0);
  const Outcome tiny = cuflash("run --backend cuda -s 8 -d 64 --backward -v", tmp);
  REQUIRE(tiny.exit_code == 0);
  const double base = peak_memory_of(tiny).peak;
  // bf16 tensors of 2^26 elements (128 MiB each): Q, K, V, dO in; O, dQ, dK, dV out.
  const double tensor_bytes = 2.0 * 64 * 16 * 1024 * 64;
  const Outcome o = cuflash("run --backend cuda --backward -b 64 --heads 16 -s 1024 -d 64 "
                            "--dtype bf16 --layout bshd --causal -v --save-inputs --out-dir " +
                                quoted(tmp.path / "out"),
                            tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  const PeakMemory m = peak_memory_of(o);
  CHECK(m.peak - base <= 1.2 * 8 * tensor_bytes);
  CHECK(m.peak - base <= m.estimate);
}
