// The attention variants on the command line: --window, --softcap, --alibi, --alibi-slopes. What
// `run` computes with them is checked against numpy, written from the definitions; the case
// names carry them; bad values fail with one line, exit 2, nothing written.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "spawn_util.h"

namespace fs = std::filesystem;
using spawn_test::count_lines;
using spawn_test::cuflash;
using spawn_test::Outcome;
using spawn_test::python;
using spawn_test::run_shell;
using spawn_test::TempDir;

namespace {

void numpy_save(const TempDir& tmp, const fs::path& path, const std::string& expr) {
  const Outcome o = python(tmp, "import numpy as np, sys\nnp.save(sys.argv[1], " + expr + ")\n",
                           path.string());
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
}

// Exit 2 with a one-line message that names `word`, nothing on stdout, no folder written.
void check_refused(const TempDir& tmp, const std::string& options, const std::string& word) {
  const fs::path dir = tmp.path / "never";
  const Outcome o = cuflash("run --backend cpu -s 8 -d 8 --out-dir " + dir.string() + " " +
                                options,
                            tmp);
  INFO(options << "\n" << o.err);
  CHECK(o.exit_code == 2);
  CHECK(count_lines(o.err) == 1);
  CHECK(o.err.find(word) != std::string::npos);
  CHECK(o.out.empty());
  CHECK_FALSE(fs::exists(dir));
}

}  // namespace

TEST_CASE("run with a window, a softcap and ALiBi matches numpy", "[cli][variants]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "out";
  // 6 heads (ALiBi's rule for a count that is not a power of two), GQA, Sq < Sk (offset 4).
  const Outcome o = cuflash("run --backend cpu -b 1 --heads 6 --heads-kv 3 -s 19 --seq-k 23 "
                            "-d 16 --dtype fp32 --window 5,2 --softcap 1.5 --alibi --backward "
                            "--save-inputs --out-dir " + dir.string(),
                            tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  const Outcome check = python(tmp, R"PY(
import numpy as np, sys
d = sys.argv[1]
load = lambda n: np.load(f"{d}/{n}.npy").astype(np.float64)
q, k, v, do = load("q"), load("k"), load("v"), load("dout")
B, H, Sq, D = q.shape; Hkv, Sk = k.shape[1], k.shape[2]
k = np.repeat(k, H // Hkv, axis=1); v = np.repeat(v, H // Hkv, axis=1)
slopes = np.array([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])[None, :, None, None]
i = np.arange(Sq)[:, None] + (Sk - Sq); j = np.arange(Sk)[None, :]
x = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
t = np.tanh(x / 1.5)
s = 1.5 * t - slopes * np.abs(i - j)
s = np.where((j >= i - 5) & (j <= i + 2), s, -np.inf)
m = s.max(-1, keepdims=True)
p = np.exp(s - m); l = p.sum(-1, keepdims=True); p /= l
o = p @ v; lse = (m + np.log(l))[..., 0]
dv = p.transpose(0, 1, 3, 2) @ do
dp = do @ v.transpose(0, 1, 3, 2)
ds = p * (dp - (do * o).sum(-1, keepdims=True)) * (1 - t * t) / np.sqrt(D)
dq = ds @ k; dk = ds.transpose(0, 1, 3, 2) @ q
dk = dk.reshape(B, Hkv, H // Hkv, Sk, D).sum(2); dv = dv.reshape(B, Hkv, H // Hkv, Sk, D).sum(2)
for name, ref in [("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)]:
    err = np.abs(load(name) - ref).max() / max(1.0, np.abs(ref).max())
    assert err <= 1e-6, (name, err)
print("ok")
)PY", dir.string());
  INFO(check.err);
  CHECK(check.out == "ok\n");
}

TEST_CASE("case names carry the variants", "[cli][variants]") {
  TempDir tmp;
  const Outcome o = cuflash("bench --list -s 64 --window 8,0 --window -1,2 --softcap 30 --alibi",
                            tmp);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.out.find("fp16/b:1/h:8/sq:64/sk:64/d:64/causal:0/win:8:0/softcap:30/alibi:1") !=
        std::string::npos);
  CHECK(o.out.find("/win:-1:2/softcap:30/alibi:1") != std::string::npos);
  numpy_save(tmp, tmp.path / "slopes.npy", "np.full((2, 8), 0.5, np.float32)");
  const Outcome file =
      cuflash("bench --list -b 2 -s 64 --alibi-slopes " + (tmp.path / "slopes.npy").string(), tmp);
  CHECK(file.out.find("/alibi:file") != std::string::npos);
  std::ofstream(tmp.path / "v.txt") << "sq=64 window=16:0,-1:-1 softcap=0,50 alibi=1\n";
  const Outcome sweep = cuflash("bench --list --sweep " + (tmp.path / "v.txt").string(), tmp);
  INFO(sweep.err);
  CHECK(count_lines(sweep.out) == 4);
  CHECK(sweep.out.find("causal:0/win:16:0/alibi:1\n") != std::string::npos);
  CHECK(sweep.out.find("causal:0/softcap:50/alibi:1\n") != std::string::npos);
}

TEST_CASE("bad variant values: one line, exit 2, nothing written", "[cli][variants]") {
  TempDir tmp;
  check_refused(tmp, "--window -2,0", "--window");
  check_refused(tmp, "--window 3", "--window");
  check_refused(tmp, "--window 1,x", "--window");
  check_refused(tmp, "--window 1,1 --window 2,2", "--window");
  check_refused(tmp, "--softcap 0", "--softcap");
  check_refused(tmp, "--softcap -3", "--softcap");
  check_refused(tmp, "--softcap nan", "--softcap");
  check_refused(tmp, "--softcap inf", "--softcap");
  check_refused(tmp, "--softcap 1e-31", "--softcap");
  check_refused(tmp, "--scale 1e-39", "--scale");
  check_refused(tmp, "--scale 2e30", "--scale");
  numpy_save(tmp, tmp.path / "three.npy", "np.ones(3, np.float32)");
  numpy_save(tmp, tmp.path / "nan.npy", "np.array([1, 2, 3, 4, 5, 6, 7, np.nan], np.float32)");
  numpy_save(tmp, tmp.path / "f64.npy", "np.ones(8)");
  check_refused(tmp, "--alibi-slopes " + (tmp.path / "three.npy").string(), "--alibi-slopes");
  check_refused(tmp, "--alibi-slopes " + (tmp.path / "nan.npy").string(), "non-finite");
  check_refused(tmp, "--alibi-slopes " + (tmp.path / "f64.npy").string(), "fp32");
  check_refused(tmp, "--alibi --alibi-slopes " + (tmp.path / "three.npy").string(), "--alibi");
  std::ofstream(tmp.path / "bad.txt") << "sq=64 window=0:-3\n";
  const Outcome sweep = cuflash("bench --list --sweep " + (tmp.path / "bad.txt").string(), tmp);
  CHECK(sweep.exit_code == 2);
  CHECK(sweep.err.find("bad.txt:1: window") != std::string::npos);
  std::ofstream(tmp.path / "tiny.txt") << "sq=64 softcap=1e-31\n";
  const Outcome tiny = cuflash("bench --list --sweep " + (tmp.path / "tiny.txt").string(), tmp);
  CHECK(tiny.exit_code == 2);
  CHECK(tiny.err.find("tiny.txt:1: softcap") != std::string::npos);
  const Outcome mixed = cuflash("bench --list --softcap 3 --sweep seed", tmp);
  CHECK(mixed.exit_code == 2);
  CHECK(mixed.err.find("--sweep") != std::string::npos);
}
