// --layout thd with --seqlens / --seqlens-k on the command line and the sweep key seqlens: the
// CPU backend against numpy, sequence by sequence, on the packed tensors it saved; the case
// names; and the one-line errors (exit 2, nothing written) for what is refused. No GPU needed.
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
using spawn_test::require_usage_error_writing_nothing;
using spawn_test::TempDir;

namespace {

// numpy attention of each sequence on its own, checked against the packed outputs in argv[1]:
// O [T, H, D], LSE [H, T], dQ, dK, dV. argv[2], argv[3]: the query and key lengths; argv[4]:
// "br" (bottom-right causal), "tl" (top-left causal) or "none"; argv[5], argv[6]: the window.
const char* kCheckScript = R"PY(
import numpy as np, sys
d, lq, lk, mask = sys.argv[1], eval(sys.argv[2]), eval(sys.argv[3]), sys.argv[4]
left, right = int(sys.argv[5]), int(sys.argv[6])
load = lambda n: np.load(f"{d}/{n}.npy").astype(np.float64)
q, k, v, do = load("q"), load("k"), load("v"), load("dout")
T, H, D = q.shape; Hkv = k.shape[1]
assert load("lse").shape == (H, T), load("lse").shape
cq, ck = np.concatenate([[0], np.cumsum(lq)]), np.concatenate([[0], np.cumsum(lk)])
o_all, lse_all = np.zeros_like(q), np.full((H, T), np.inf)
dq_all, dk_all, dv_all = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
for b in range(len(lq)):
    Sq, Sk = lq[b], lk[b]
    qs = q[cq[b]:cq[b+1]].transpose(1, 0, 2); dos = do[cq[b]:cq[b+1]].transpose(1, 0, 2)
    ks = np.repeat(k[ck[b]:ck[b+1]].transpose(1, 0, 2), H // Hkv, axis=0)
    vs = np.repeat(v[ck[b]:ck[b+1]].transpose(1, 0, 2), H // Hkv, axis=0)
    off = 0 if mask == "tl" else Sk - Sq
    i = np.arange(Sq)[:, None] + off; j = np.arange(Sk)[None, :]
    lo = i - left if left >= 0 else np.full_like(i, -10**9)
    hi = i if mask != "none" else (i + right if right >= 0 else np.full_like(i, 10**9))
    visible = (j >= lo) & (j <= hi)
    s = np.where(visible, qs @ ks.transpose(0, 2, 1) / np.sqrt(D), -np.inf)
    m = s.max(-1, keepdims=True); seen = np.isfinite(m)
    p = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0.0)
    l = p.sum(-1, keepdims=True); p = np.where(seen, p / np.where(seen, l, 1), 0.0)
    o = p @ vs
    lse = np.where(seen, m + np.log(np.where(seen, l, 1)), np.inf)[..., 0]
    dv = p.transpose(0, 2, 1) @ dos
    dp = dos @ vs.transpose(0, 2, 1)
    ds = p * (dp - (dos * o).sum(-1, keepdims=True)) / np.sqrt(D)
    dq = ds @ ks; dk = ds.transpose(0, 2, 1) @ qs
    dk = dk.reshape(Hkv, H // Hkv, Sk, D).sum(1); dv = dv.reshape(Hkv, H // Hkv, Sk, D).sum(1)
    o_all[cq[b]:cq[b+1]] = o.transpose(1, 0, 2); lse_all[:, cq[b]:cq[b+1]] = lse
    dq_all[cq[b]:cq[b+1]] = dq.transpose(1, 0, 2)
    dk_all[ck[b]:ck[b+1]] = dk.transpose(1, 0, 2); dv_all[ck[b]:ck[b+1]] = dv.transpose(1, 0, 2)
ours_lse = load("lse")
assert np.array_equal(np.isinf(ours_lse), np.isinf(lse_all)), "rows without keys differ"
fin = np.isfinite(lse_all)
assert np.abs(ours_lse[fin] - lse_all[fin]).max() <= 1e-6
for name, ref in [("o", o_all), ("dq", dq_all), ("dk", dk_all), ("dv", dv_all)]:
    err = np.abs(load(name) - ref).max() / max(1.0, np.abs(ref).max())
    assert err <= 1e-6, (name, err)
print("ok")
)PY";

void check_against_numpy(const std::string& lengths_q, const std::string& lengths_k,
                         const std::string& mask_option, const std::string& mask_name,
                         const std::string& window) {
  TempDir tmp;
  const fs::path dir = tmp.path / "out";
  std::string command = "run --backend cpu --layout thd --seqlens " + lengths_q +
                        " --heads 4 --heads-kv 2 -d 16 --dtype fp32 --backward --save-inputs " +
                        mask_option + " --out-dir " + dir.string();
  if (lengths_k != lengths_q) command += " --seqlens-k " + lengths_k;
  if (!window.empty()) command += " --window " + window;
  const Outcome o = cuflash(command, tmp);
  INFO(command << "\n" << o.err);
  REQUIRE(o.exit_code == 0);
  std::string left = "-1", right = "-1";
  if (!window.empty()) {
    left = window.substr(0, window.find(','));
    right = window.substr(window.find(',') + 1);
  }
  const Outcome check = python(tmp, kCheckScript,
                               dir.string() + " '[" + lengths_q + "]' '[" + lengths_k + "]' " +
                                   mask_name + " " + left + " " + right);
  INFO(check.err);
  CHECK(check.out == "ok\n");
}

}  // namespace

TEST_CASE("varlen: run --backend cpu matches numpy sequence by sequence", "[cli][varlen]") {
  SECTION("no mask, keys as long") { check_against_numpy("5,1,12", "5,1,12", "", "none", ""); }
  SECTION("causal bottom-right, other key lengths (rows without keys)") {
    check_against_numpy("5,1,12", "3,9,12", "--causal", "br", "");
  }
  SECTION("causal top-left, other key lengths") {
    check_against_numpy("5,1,12", "3,9,12", "--mask causal-top-left", "tl", "");
  }
  SECTION("a window") { check_against_numpy("7,13", "9,4", "", "none", "2,1"); }
}

TEST_CASE("varlen: case names and sweep lines", "[cli][varlen]") {
  TempDir tmp;
  const Outcome o = cuflash("bench --list --layout thd --seqlens 5,9 --heads 2 --causal", tmp);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.out == "fp16/b:1/h:2/sq:14/sk:14/d:64/causal:1/thd/seqlens:5+9\n");
  const Outcome k = cuflash("bench --list --layout thd --seqlens 5,9 --seqlens-k 7,1 --heads 2",
                            tmp);
  CHECK(k.out == "fp16/b:1/h:2/sq:14/sk:8/d:64/causal:0/thd/seqlens:5+9/seqlens-k:7+1\n");

  std::ofstream(tmp.path / "v.txt") << "h=2 d=64 seqlens=5+9,3 mask=none\n"
                                       "h=2 seqlens=4 seqlens_k=6 layout=thd\n";
  const Outcome sweep = cuflash("bench --list --sweep " + (tmp.path / "v.txt").string(), tmp);
  INFO(sweep.err);
  CHECK(sweep.exit_code == 0);
  CHECK(sweep.out == "fp16/b:1/h:2/sq:14/sk:14/d:64/causal:0/thd/seqlens:5+9\n"
                     "fp16/b:1/h:2/sq:3/sk:3/d:64/causal:0/thd/seqlens:3\n"
                     "fp16/b:1/h:2/sq:4/sk:6/d:64/causal:0/thd/seqlens:4/seqlens-k:6\n");
  // The named sweep parses.
  const Outcome named = cuflash("bench --list --sweep varlen", tmp);
  INFO(named.err);
  CHECK(named.exit_code == 0);
  CHECK(named.out.find("/thd/seqlens:1916+3610+2356+3573+3849+1080") != std::string::npos);
}

TEST_CASE("varlen: bad lengths and combinations are one-line usage errors", "[cli][varlen]") {
  const std::string run = "run --backend cpu --heads 2 -d 8 ";
  require_usage_error_writing_nothing(run + "--seqlens 3,5", "--layout thd");
  require_usage_error_writing_nothing(run + "--layout bshd --seqlens 3,5", "--layout thd");
  require_usage_error_writing_nothing(run + "--layout thd", "needs --seqlens");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,0", "--seqlens");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,-2", "--seqlens");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,5 -b 2", "--batch");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,5 -s 8", "--seq");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,5 --seqlens-k 4", "--seqlens-k");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,5 --seqlens-k 4,0", "--seqlens-k");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,5 --cache-seqlens 3,5", "--seqlens");
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 3,5 --page-size 16", "--seqlens");
  require_usage_error_writing_nothing("bench --sweep fa --seqlens 3,5", "--seqlens");
  // An empty item would be dropped without a word, changing the batch: a comma too many.
  for (const std::string lists :
       {"--seqlens 3,,5", "--seqlens=3,5,", "--seqlens 3,5 --seqlens-k ,4,6"}) {
    require_usage_error_writing_nothing(run + "--layout thd " + lists, "an empty item");
  }
  require_usage_error_writing_nothing("bench --list --sweep seed --page-size 16,",
                                      "--page-size '16,'");
  require_usage_error_writing_nothing("bench --list -b 1,,2", "-b '1,,2'");
  // Lengths whose sum overflows 64 bits name their option (they once made a case of -1 tokens).
  require_usage_error_writing_nothing(run + "--layout thd --seqlens 9223372036854775807,1",
                                      "--seqlens 9223372036854775807,1 sums past");
  require_usage_error_writing_nothing(
      run + "--layout thd --seqlens 1,2 --seqlens-k 9223372036854775807,1", "--seqlens-k");
  require_usage_error_writing_nothing("bench --list --layout thd --seqlens 9223372036854775807,1",
                                      "--seqlens");

  TempDir tmp;
  std::ofstream(tmp.path / "b.txt") << "b=2 h=2 seqlens=5+9\n";
  std::ofstream(tmp.path / "l.txt") << "h=2 seqlens=5+9 layout=bhsd\n";
  std::ofstream(tmp.path / "t.txt") << "h=2 layout=thd\n";
  std::ofstream(tmp.path / "z.txt") << "h=2 seqlens=5+0\n";
  std::ofstream(tmp.path / "o.txt") << "h=2 seqlens=9223372036854775807+1\n";
  for (const auto& [file, word] :
       {std::pair{"b.txt", "drop b"}, std::pair{"l.txt", "layout"},
        std::pair{"t.txt", "needs seqlens"}, std::pair{"z.txt", "positive integer"},
        std::pair{"o.txt", "o.txt:1: seqlens: the lengths sum past"}}) {
    const Outcome o = cuflash("bench --list --sweep " + (tmp.path / file).string(), tmp);
    INFO(file << ": " << o.err);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find(word) != std::string::npos);
  }
}

TEST_CASE("varlen: .npy inputs are [tokens, heads, head_dim] and --seqlens splits them",
          "[cli][varlen]") {
  TempDir tmp;
  const Outcome made = python(tmp, R"PY(
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(5)
for name, shape in [("q", (10, 4, 8)), ("k", (10, 2, 8)), ("v", (10, 2, 8)), ("q4", (1, 10, 4, 8))]:
    np.save(f"{d}/{name}.npy", rng.standard_normal(shape).astype(np.float32))
)PY", tmp.path.string());
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  const std::string files = " --q " + (tmp.path / "q.npy").string() + " --k " +
                            (tmp.path / "k.npy").string() + " --v " +
                            (tmp.path / "v.npy").string();
  const fs::path dir = tmp.path / "out";
  const Outcome o =
      cuflash("run --backend cpu --layout thd --seqlens 3,7 --causal --out-dir " + dir.string() +
                  files,
              tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  const Outcome shapes = python(tmp, R"PY(
import numpy as np, sys
d = sys.argv[1]
print(np.load(f"{d}/o.npy").shape, np.load(f"{d}/lse.npy").shape)
)PY", dir.string());
  CHECK(shapes.out == "(10, 4, 8) (4, 10)\n");

  require_usage_error_writing_nothing("run --backend cpu --layout thd --seqlens 3,5" + files,
                                      "sums to 8 tokens, but --q holds 10");
  require_usage_error_writing_nothing(
      "run --backend cpu --layout thd --seqlens 9223372036854775807,1" + files,
      "--seqlens 9223372036854775807,1 sums past 2^63 tokens");
  require_usage_error_writing_nothing(
      "run --backend cpu --layout thd --seqlens 3,7 --seqlens-k 3,8" + files,
      "--seqlens-k 3,8 sums to 11 tokens, but --k and --v hold 10");
  require_usage_error_writing_nothing("run --backend cpu --layout thd --seqlens 3,7 --q " +
                    (tmp.path / "q4.npy").string() + " --k " + (tmp.path / "k.npy").string() +
                    " --v " + (tmp.path / "v.npy").string(),
                "3-D");
}
