// Host-side tests of `cuflash bench`: sweep files and case names, statistics and FLOP counts,
// the output formats (Google Benchmark's JSON schema included), the result package, the sweep
// loop (failures, Ctrl-C, exit codes) and whole runs through a fake runner. (The inputs are
// io/random_inputs.h's, tested in tests/unit/test_random_inputs.cpp.)
// None needs a GPU; the last cases spawn the built binary and the PyTorch comparison script.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "bench/formats.h"
#include "bench/gpu_runner.h"
#include "bench/package.h"
#include "bench/session.h"
#include "bench/stats.h"
#include "bench/sweep.h"
#include "bench/sweep_runner.h"
#include "cli/exit_codes.h"
#include "cli/memory_check.h"
#include "cuflash/attention.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/error.h"
#include "cuflash/io/npy.h"
#include "cuflash/io/random_inputs.h"
#include "spawn_util.h"

namespace fs = std::filesystem;
using namespace cuflash;
using namespace cuflash::bench;
using cuflash::cli::case_label;
using spawn_test::contains;
using spawn_test::count_lines;
using spawn_test::Outcome;
using spawn_test::run_shell;
using spawn_test::slurp;
using spawn_test::TempDir;

namespace {

// Runs a Python snippet on `file` (sys.argv[1]); the snippet asserts what it checks.
Outcome python_check(const TempDir& tmp, const fs::path& file, const std::string& script) {
  const fs::path py = tmp.path / "check.py";
  std::ofstream(py) << script;
  return run_shell(std::string(CUFLASH_TEST_PYTHON) + " " + py.string() + " " + file.string(), tmp);
}

Problem make_case(int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d, DType dtype, Mask mask,
                  int64_t hkv = 0) {
  Problem c;
  c.shape = AttentionShape{b, h, hkv ? hkv : h, sq, sk, d};
  c.dtype = dtype;
  c.mask = mask;
  return c;
}

const fs::path kSweepDir = fs::path(CUFLASH_SOURCE_DIR) / "share" / "sweeps";

// A plausible timed pass: samples around `ms`.
PassResult fake_pass(const Problem& c, const std::string& pass, double ms) {
  PassResult p;
  p.pass = pass;
  p.flops = pass_flops(c, pass);
  p.bytes = pass_bytes(c, pass);
  for (int i = 0; i < 5; ++i) p.samples_ms.push_back(ms * (1.0 + 0.01 * ((i * 7) % 5 - 2)));
  p.timing.method = "graph";
  p.timing.calls_per_sample = 12;
  p.timing.warmup = 10;
  p.memory = MemoryInfo{1 << 20, pass == "bwd" ? 4096 : 0, 2 << 20};
  return p;
}

CaseRecord fake_record(const Problem& c, size_t index, int /*round*/ = 0) {
  CaseRecord r;
  r.spec = c;
  const double ms = 0.01 * double(index + 1);
  r.passes = {fake_pass(c, "fwd", ms), fake_pass(c, "bwd", 2.5 * ms)};
  return r;
}

}  // namespace

// --- JSON ----------------------------------------------------------------------------------------

TEST_CASE("json: key order, escapes, non-finite numbers and invalid UTF-8", "[bench]") {
  Json j = Json::object();
  j["b"] = 1;
  j["a"] = "x\"y\\z\n\t\x01";
  j["n"] = nullptr;
  j["t"] = true;
  j["f"] = 0.1;
  j["inf"] = INFINITY;
  j["list"] = std::vector<std::string>{"p"};
  j["b"] = 2;  // replaced in place, order kept
  CHECK(json_text(j) ==
        R"({"b":2,"a":"x\"y\\z\n\t\u0001","n":null,"t":true,"f":0.1,"inf":null,"list":["p"]})");
  CHECK(json_text(Json::object(), 2) == "{}");
  CHECK(json_text(Json::array(), 2) == "[]");
  const Json nested = Json{{"k", Json::array({1, Json::object()})}};
  CHECK(json_text(nested, 2) == "{\n  \"k\": [\n    1,\n    {}\n  ]\n}");
  CHECK(json_text(Json("a\xff")) == "\"a\xef\xbf\xbd\"");  // U+FFFD, not an exception
  CHECK(find_member(j, "f") != nullptr);
  CHECK(find_member(j, "zz") == nullptr);
  CHECK(find_member(Json::array(), "f") == nullptr);
}

// --- Statistics and FLOPs ------------------------------------------------------------------------

TEST_CASE("stats: median, spread and noise", "[bench]") {
  const SampleStats odd = summarize({3, 1, 2});
  CHECK(odd.median == 2);
  CHECK(odd.min == 1);
  CHECK(odd.max == 3);
  CHECK(odd.mean == Approx(2));
  CHECK(odd.stddev == Approx(1));
  CHECK(odd.noise == Approx(0.5));
  CHECK(summarize({4, 1, 3, 2}).median == 2.5);
  const SampleStats one = summarize({5});
  CHECK(one.stddev == 0);
  CHECK(one.noise == 0);
  CHECK_THROWS(summarize({}));
}

TEST_CASE("stats: visible pairs match a row-by-row count for every mask", "[bench]") {
  for (const Mask mask : {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left}) {
    for (const int64_t sq : {1, 2, 7, 64, 100}) {
      for (const int64_t sk : {1, 3, 7, 64, 150}) {
        Problem p;
        p.shape.seq_q = sq;
        p.shape.seq_k = sk;
        p.mask = mask;
        double expected = 0;
        const int64_t offset = diagonal_offset(mask, sq, sk);
        for (int64_t i = 0; i < sq; ++i) {
          expected += mask == Mask::none ? double(sk)
                                         : double(std::clamp<int64_t>(i + offset + 1, 0, sk));
        }
        INFO("mask " << to_string(mask) << " sq " << sq << " sk " << sk);
        CHECK(visible_pairs(p) == expected);
      }
    }
  }
}

TEST_CASE("stats: visible pairs of a window match a pair-by-pair count", "[bench]") {
  for (const Mask mask : {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left}) {
    for (const Window window : {Window{0, 0}, Window{3, 1}, Window{-1, 2}, Window{5, -1}}) {
      for (const auto& [sq, sk] : {std::pair<int64_t, int64_t>{9, 9}, {4, 11}, {13, 6}}) {
        Problem p;
        p.shape.seq_q = sq;
        p.shape.seq_k = sk;
        p.mask = mask;
        p.window = window;
        const int64_t offset = mask == Mask::causal_top_left ? 0 : sk - sq;
        double expected = 0;
        for (int64_t i = 0; i < sq; ++i) {
          for (int64_t j = 0; j < sk; ++j) {
            const bool causal_ok = mask == Mask::none || j <= i + offset;
            const bool left_ok = window.left < 0 || j >= i + offset - window.left;
            const bool right_ok = window.right < 0 || j <= i + offset + window.right;
            expected += causal_ok && left_ok && right_ok ? 1 : 0;
          }
        }
        INFO("mask " << to_string(mask) << " window " << window.left << "," << window.right
                     << " sq " << sq << " sk " << sk);
        CHECK(visible_pairs(p) == expected);
      }
    }
  }
}

TEST_CASE("stats: FLOP counts of the protocol", "[bench]") {
  const Problem full = make_case(1, 8, 4096, 4096, 64, DType::fp16, Mask::none);
  CHECK(forward_flops(full) == 4.0 * 8 * 4096.0 * 4096 * 64);
  CHECK(pass_flops(full, "bwd") == 2.5 * forward_flops(full));
  const Problem causal =
      make_case(2, 8, 1024, 1024, 128, DType::bf16, Mask::causal_bottom_right);
  CHECK(forward_flops(causal) == 4.0 * 2 * 8 * 128 * (1024.0 * 1025 / 2));
  CHECK(tflops(1e12, 1000) == Approx(1));
}

TEST_CASE("stats: bytes moved, with and without cache lengths", "[bench]") {
  // Decoding, B=8, 32/8 heads, 1 x 32768, D=128, bf16: K and V dominate.
  Problem decode = make_case(8, 32, 1, 32768, 128, DType::bf16, Mask::causal_bottom_right);
  decode.shape.heads_kv = 8;
  const double q = 8.0 * 32 * 1 * 128 * 2;        // Q or O
  const double kv = 8.0 * 8 * 32768 * 128 * 2;    // K or V
  CHECK(pass_bytes(decode, "fwd") == 2 * q + 2 * kv);
  CHECK(pass_bytes(decode, "bwd") == 4 * q + 4 * kv);
  CHECK(gb_per_second(1e9, 1000) == Approx(1));
  // Cache lengths: only each entry's own keys are read, and only its own pairs count.
  Problem lengths = decode;
  lengths.cache_seqlens = {100, 4000, 32768, 1, 7, 8, 9, 10};
  const double keys = 100 + 4000 + 32768 + 1 + 7 + 8 + 9 + 10;
  CHECK(pass_bytes(lengths, "fwd") == 2 * q + 2 * keys * 8 * 128 * 2);
  CHECK(visible_pairs(lengths) == Approx(keys / 8));
  Problem page = decode;
  page.page_size = 64;  // paging moves the same bytes
  CHECK(pass_bytes(page, "fwd") == pass_bytes(decode, "fwd"));
  // A window reads the keys from the first query's band start to the last one's end: with one
  // query at the end of 32768 keys and 1024 keys to its left, 1025 keys; dK and dV are still
  // written whole.
  Problem window = decode;
  window.window = Window{1024, 0};
  const double window_kv = 8.0 * 8 * 1025 * 128 * 2;
  CHECK(pass_bytes(window, "fwd") == 2 * q + 2 * window_kv);
  CHECK(pass_bytes(window, "bwd") == 4 * q + 2 * window_kv + 2 * kv);
  // Top-left causal with Sq < Sk: the keys past the last query are never read.
  Problem top_left = make_case(1, 8, 256, 1024, 64, DType::fp16, Mask::causal_top_left);
  const double tl_q = 8.0 * 256 * 64 * 2;
  CHECK(pass_bytes(top_left, "fwd") == 2 * tl_q + 2 * (8.0 * 256 * 64 * 2));
}

// --- Sweeps and names ----------------------------------------------------------------------------

TEST_CASE("sweep: case names", "[bench]") {
  CHECK(case_label(make_case(1, 8, 4096, 4096, 64, DType::bf16, Mask::causal_bottom_right)) ==
        "bf16/b:1/h:8/sq:4096/sk:4096/d:64/causal:1");
  CHECK(case_label(make_case(1, 8, 4096, 4096, 64, DType::bf16, Mask::causal_top_left)) ==
        "bf16/b:1/h:8/sq:4096/sk:4096/d:64/causal:1");  // the same mask when square
  CHECK(case_label(make_case(2, 8, 100, 300, 32, DType::fp32, Mask::causal_top_left, 2)) ==
        "fp32/b:2/h:8/hkv:2/sq:100/sk:300/d:32/causal:tl");
  Problem bshd = make_case(1, 4, 8, 8, 64, DType::fp16, Mask::none);
  bshd.layout = Layout::bshd;
  CHECK(case_label(bshd) == "fp16/b:1/h:4/sq:8/sk:8/d:64/causal:0/bshd");
  CHECK(run_name("bwd", bshd) == "bwd/" + case_label(bshd));
  Problem deterministic = bshd;
  deterministic.deterministic = true;
  CHECK(case_label(deterministic) == "fp16/b:1/h:4/sq:8/sk:8/d:64/causal:0/bshd/deterministic");
}

// What bench reports as the backward's workspace (no GPU needed to size it).
TEST_CASE("workspace: the deterministic backward adds one counter per 16 query rows", "[bench]") {
  const AttentionShape s{2, 8, 2, 1000, 700, 64};
  const size_t plain = backward_workspace_size(s, DType::fp16);
  CHECK(backward_workspace_size(s, DType::fp16, false) == plain);
  // 2 x 8 x ceil(1000 / 16) = 1008 counters of 4 bytes, rounded up to 256 bytes, in each of four
  // key groups' sections, and room for three more accumulators of 2 x 8 x 1000 x 64 floats.
  CHECK(backward_workspace_size(s, DType::fp16, true) == plain + 4 * 4096 + 3 * 4096000);
}

// Deterministic mode reserves up to three more dQ accumulators (at most 48 MiB), which small
// problems use for groups of keys, and four counter sections; the size grows with the shape.
TEST_CASE("workspace: the deterministic backward reserves room for key groups", "[bench]") {
  // 8 x 4096 x 64 floats of accumulator (8 MiB), 8 x 4096 floats of row sums, 8 x 256 counters,
  // and the section of the walking kernels' tile counter.
  const AttentionShape small{1, 8, 8, 4096, 4096, 64};
  const size_t accumulator = 8 * 4096 * 64 * 4, row_sums = 8 * 4096 * 4, counters = 8 * 256 * 4;
  const size_t tile_counter = 256;
  CHECK(backward_workspace_size(small, DType::bf16) == accumulator + row_sums + tile_counter);
  CHECK(backward_workspace_size(small, DType::bf16, true) ==
        4 * accumulator + row_sums + 4 * counters + tile_counter);
  // A 64 MiB accumulator: the extra room stops at 48 MiB.
  const AttentionShape large{16, 16, 16, 1024, 1024, 64};
  CHECK(backward_workspace_size(large, DType::bf16, true) ==
        backward_workspace_size(large, DType::bf16) + (size_t{48} << 20) + 4 * 16 * 16 * 64 * 4);
  // One more key or query never shrinks it (callers size one workspace for several blocks).
  for (const AttentionShape& s : {small, large, AttentionShape{1, 32, 32, 4096, 4096, 64},
                                  AttentionShape{1, 64, 1, 130000, 130000, 128}}) {
    AttentionShape more_keys = s, more_queries = s;
    more_keys.seq_k += 1;
    more_queries.seq_q += 1;
    CHECK(backward_workspace_size(more_keys, DType::bf16, true) >=
          backward_workspace_size(s, DType::bf16, true));
    CHECK(backward_workspace_size(more_queries, DType::bf16, true) >=
          backward_workspace_size(s, DType::bf16, true));
  }
}

TEST_CASE("sweep: deterministic=0,1 runs each case in both backward modes", "[bench]") {
  const auto cases = parse_sweep("sq=16 d=32,64 deterministic=0,1\nsq=8\n", "t.txt");
  REQUIRE(cases.size() == 5);
  CHECK(case_label(cases[0]) == "fp16/b:1/h:8/sq:16/sk:16/d:32/causal:0");
  CHECK(case_label(cases[1]) == "fp16/b:1/h:8/sq:16/sk:16/d:32/causal:0/deterministic");
  CHECK_FALSE(cases[2].deterministic);
  CHECK(cases[3].deterministic);
  CHECK_FALSE(cases[4].deterministic);  // the default
}

TEST_CASE("sweep: page_size and cache lengths in names, and the sweep key", "[bench]") {
  Problem c = make_case(2, 8, 1, 4096, 128, DType::bf16, Mask::causal_bottom_right);
  c.page_size = 16;
  CHECK(case_label(c) == "bf16/b:2/h:8/sq:1/sk:4096/d:128/causal:1/page:16");
  c.cache_seqlens = {100, 4000};
  CHECK(case_label(c) == "bf16/b:2/h:8/sq:1/sk:4096/d:128/causal:1/page:16/cache:100+4000");
  const auto cases = parse_sweep("b=8 sq=1 sk=32768 dtype=bf16 page_size=0,16,256", "t");
  REQUIRE(cases.size() == 3);
  CHECK(cases[0].page_size == 0);
  CHECK(cases[1].page_size == 16);
  CHECK(cases[2].page_size == 256);
  CHECK_THROWS_WITH(parse_sweep("page_size=24 dtype=bf16", "bad.txt"),
                    Catch::Contains("bad.txt:1") && Catch::Contains("--page-size 24"));
  CHECK_THROWS_WITH(parse_sweep("page_size=16 dtype=fp32", "bad.txt"),
                    Catch::Contains("fp16 and bf16"));
}

TEST_CASE("sweep: ranks in names, the sweep key and its sweep line", "[bench]") {
  Problem c = make_case(1, 8, 1023, 1023, 64, DType::bf16, Mask::causal_bottom_right);
  c.ranks = 3;
  CHECK(case_label(c) == "bf16/b:1/h:8/sq:1023/sk:1023/d:64/causal:1/ranks:3");
  const auto cases = parse_sweep("sq=113 ranks=0,1,4", "t");
  REQUIRE(cases.size() == 3);
  CHECK(cases[0].ranks == 0);
  CHECK(cases[1].ranks == 1);
  CHECK(cases[2].ranks == 4);
  const auto again = parse_sweep(sweep_line(cases[2]), "line");
  REQUIRE(again.size() == 1);
  CHECK(case_label(again[0]) == case_label(cases[2]));
  CHECK_THROWS_WITH(parse_sweep("ranks=1025", "bad.txt"),
                    Catch::Contains("bad.txt:1") && Catch::Contains("ranks"));
  CHECK_THROWS_WITH(parse_sweep("ranks=-2", "bad.txt"), Catch::Contains("ranks"));
  CHECK_THROWS_WITH(parse_sweep("sq=1 sk=100 splits=2 ranks=2 dtype=bf16", "bad.txt"),
                    Catch::Contains("--ranks does not combine with --splits above 1"));
}

// What bench reports as the workspaces of context parallelism on one GPU (no GPU needed).
TEST_CASE("workspace: context parallelism on one GPU sizes its sections from the largest chunk",
          "[bench]") {
  const AttentionShape s{1, 2, 1, 100, 60, 64};
  // 2 ranks: chunks of at most ceil(100 / 4) = 25 queries and 15 keys. Forward: a block's O
  // (1 x 2 x 25 x 64 fp16: 6400 bytes), three fp32 partial O (38400) and LSE (600 -> 768).
  CHECK(context_parallel::single_gpu_forward_workspace_size(s, DType::fp16, 2) ==
        6400 + 38400 + 768);
  // Backward: fp32 sums of dQ (51200), dK and dV (15360 each), which each block's backward()
  // adds to, two chunks' LSE (200 -> 256 each), backward()'s own workspace.
  const AttentionShape block{1, 2, 1, 25, 15, 64};
  CHECK(context_parallel::single_gpu_backward_workspace_size(s, DType::fp16, 2) ==
        51200 + 2 * 15360 + 2 * 256 + backward_workspace_size(block, DType::fp16));
  CHECK(context_parallel::single_gpu_backward_workspace_size(s, DType::fp16, 2, true) >
        context_parallel::single_gpu_backward_workspace_size(s, DType::fp16, 2));
  CHECK_THROWS_AS(context_parallel::single_gpu_forward_workspace_size(s, DType::fp16, 0), Error);
  Problem p;
  p.shape = s;
  CHECK(context_parallel::device_passes(p).ranks == 0);
  p.ranks = 2;
  const DevicePasses passes = context_parallel::device_passes(p);
  CHECK(passes.ranks == 2);
  CHECK(passes.forward_workspace_bytes(p) ==
        context_parallel::single_gpu_forward_workspace_size(s, p.dtype, 2));
}

TEST_CASE("sweep: a line expands to the product of its lists, in a fixed order", "[bench]") {
  const auto cases = parse_sweep(
      "# comment\n\n  b=2 h=4,8 sq=16 sk=32,64 d=64 dtype=bf16 mask=none,causal # tail\n"
      "sq=5\n",
      "t.txt");
  REQUIRE(cases.size() == 9);
  CHECK(case_label(cases[0]) == "bf16/b:2/h:4/sq:16/sk:32/d:64/causal:0");
  CHECK(case_label(cases[1]) == "bf16/b:2/h:4/sq:16/sk:64/d:64/causal:0");
  CHECK(case_label(cases[2]) == "bf16/b:2/h:8/sq:16/sk:32/d:64/causal:0");
  CHECK(case_label(cases[4]) == "bf16/b:2/h:4/sq:16/sk:32/d:64/causal:1");
  // Defaults: the command line's (b=1 h=8 hkv=h sk=sq d=64 dtype=fp16 mask=none layout=bhsd).
  CHECK(case_label(cases[8]) == "fp16/b:1/h:8/sq:5/sk:5/d:64/causal:0");
  CHECK(cases[8].layout == Layout::bhsd);
  CHECK(cases[8].scale == 0.0);
}

TEST_CASE("sweep: errors name the file, the line and the problem", "[bench]") {
  const auto message = [](const std::string& text) {
    try {
      parse_sweep(text, "bad.txt");
    } catch (const cli::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("sq=8\nfoo=1\n") ==
        "--sweep bad.txt:2: unknown key 'foo' (expected one of dtype, d, mask, b, h, hkv, sq, sk, "
        "seqlens, seqlens_k, window, softcap, alibi, layout, splits, page_size, "
        "deterministic, ranks)");
  CHECK(message("deterministic=yes") ==
        "--sweep bad.txt:1: deterministic: unknown value 'yes' (expected 0, 1)");
  CHECK(message("sq=8 sq=9") == "--sweep bad.txt:1: key 'sq' given twice");
  CHECK(message("sq") == "--sweep bad.txt:1: expected key=value, got 'sq'");
  CHECK(message("sq=0") == "--sweep bad.txt:1: sq: '0' is not a positive integer");
  CHECK(message("sq=1,,2") == "--sweep bad.txt:1: sq: empty item in '1,,2'");
  CHECK(message("dtype=fp8") ==
        "--sweep bad.txt:1: dtype: unknown value 'fp8' (expected fp16, bf16, fp32)");
  CHECK(message("h=8 hkv=3") == "--sweep bad.txt:1: hkv 3 does not divide h 8");
  CHECK(message("# nothing\n\n") == "--sweep bad.txt: the file lists no cases");
  // Every case gets the command line's size check, and a file names at most 100000 cases.
  CHECK(message("b=9223372036854775807 h=9223372036854775807").find("--sweep bad.txt:1: shape ") ==
        0);
  std::string sq = "sq=1", b = "b=1";
  for (int i = 2; i <= 400; ++i) sq += "," + std::to_string(i);
  for (int i = 2; i <= 250; ++i) b += "," + std::to_string(i);
  CHECK(message(sq + " " + b + "\nsq=1\n") ==  // 400 x 250 cases, then one more
        "--sweep bad.txt:2: the file's lines name more than 100000 cases; split the sweep");
  // A binary file: its bytes escaped, the message one line.
  CHECK(message(std::string("\x93NUMPY\x01\x00v", 9) + "\n") ==
        "--sweep bad.txt:1: expected key=value, got '\\x93NUMPY\\x01\\x00v'");
}

TEST_CASE("sweep: the seed and fa files", "[bench]") {
  const auto seed = load_sweep((kSweepDir / "seed.txt").string());
  REQUIRE(seed.size() == 48);
  CHECK(case_label(seed.front()) == "fp16/b:1/h:8/sq:1024/sk:1024/d:64/causal:0");
  CHECK(case_label(seed.back()) == "fp32/b:1/h:8/sq:16384/sk:16384/d:128/causal:1");
  const auto fa = load_sweep((kSweepDir / "fa.txt").string());
  REQUIRE(fa.size() == 48);
  int causal = 0, bf16 = 0;
  for (const Problem& c : fa) {
    INFO(case_label(c));
    CHECK(c.shape.batch * c.shape.seq_q == 16384);
    CHECK(c.shape.heads * c.shape.head_dim == 2048);
    CHECK(c.shape.seq_k == c.shape.seq_q);
    causal += c.mask == Mask::causal_bottom_right;
    bf16 += c.dtype == DType::bf16;
  }
  CHECK(causal == 24);
  CHECK(bf16 == 24);
}

TEST_CASE("sweep: names are looked up in the search folders, paths are read as given", "[bench]") {
  CHECK(resolve_sweep("seed", {"/nonexistent", kSweepDir.string()}) ==
        (kSweepDir / "seed.txt").string());
  CHECK(resolve_sweep((kSweepDir / "fa.txt").string(), {}) == (kSweepDir / "fa.txt").string());
  try {
    resolve_sweep("nosuch", {kSweepDir.string()});
    FAIL("expected an error");
  } catch (const cli::UsageError& e) {
    const std::string what = e.what();
    CHECK(what.find("--sweep nosuch: no sweep of that name") == 0);
    CHECK(what.find("fa, headdims, seed, variants, varlen") != std::string::npos);
  }
  CHECK_THROWS_AS(resolve_sweep("./missing.txt", {}), cli::UsageError);
  CHECK_THROWS_WITH(resolve_sweep("./missing.txt", {}), Catch::Contains("no such file"));
  CHECK_THROWS_WITH(resolve_sweep(kSweepDir.string(), {}), Catch::Contains("is a directory"));
}

TEST_CASE("sweep: --filter keeps the matching cases", "[bench]") {
  const auto seed = load_sweep((kSweepDir / "seed.txt").string());
  CHECK(filter_cases(seed, "bf16/.*d:128/causal:1").size() == 4);
  CHECK(filter_cases(seed, "^fp32/.*sq:16384").size() == 4);
  CHECK(filter_cases(seed, "^(?!fp32/.*sq:16384)").size() == 44);  // a subset without the slowest
  CHECK_THROWS_AS(filter_cases(seed, "("), cli::UsageError);
  // A leading ".*" (dropped before matching) selects what the pattern without it does.
  CHECK(filter_cases(seed, ".*bf16/.*d:128/causal:1").size() == 4);
  CHECK(filter_cases(seed, ".*?.*d:128").size() == 24);
  CHECK(filter_cases(seed, ".*").size() == 48);
  CHECK(filter_cases(seed, ".*|nothing").size() == 48);
  CHECK(filter_cases(seed, ".*^fp32/").size() == 16);
  CHECK(filter_cases(seed, ".*fp64").empty());
  CHECK_THROWS_AS(filter_cases(seed, ".*)"), cli::UsageError);
}

TEST_CASE("sweep: --filter matches a varlen case of 20,000 sequences", "[bench]") {
  // Its name has about 40,000 characters; ".*" made the matcher overflow the main thread's stack.
  std::string lengths = "1";
  for (int i = 1; i < 20000; ++i) lengths += "+1";
  const auto cases = parse_sweep("h=2 d=64 dtype=bf16 mask=causal seqlens=" + lengths, "t.txt");
  REQUIRE(cases.size() == 1);
  CHECK(filter_cases(cases, "^bf16/.*causal:1").size() == 1);
  CHECK(filter_cases(cases, "^bf16/.*fp16").empty());
  // A leading ".*", which the matcher retried from each of the 40,000 starts: 70 s for no match.
  const auto began = std::chrono::steady_clock::now();
  CHECK(filter_cases(cases, ".*fp16").empty());
  CHECK(filter_cases(cases, ".*?causal:1").size() == 1);
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds(10));
}

// --- Peaks and formats ---------------------------------------------------------------------------

TEST_CASE("formats: --peak-tflops", "[bench]") {
  CHECK(parse_peak_tflops("989").at("fp32") == 989);
  const auto peaks = parse_peak_tflops("fp16=900,fp32=60");
  CHECK(peaks.at("fp16") == 900);
  CHECK(peaks.count("bf16") == 0);
  CHECK_THROWS_AS(parse_peak_tflops("fp8=1"), cli::UsageError);
  CHECK_THROWS_AS(parse_peak_tflops("-3"), cli::UsageError);
  CHECK_THROWS_AS(parse_peak_tflops("fp16=x"), cli::UsageError);
  RunSettings settings;
  settings.peak_tflops = peaks;
  CHECK(*percent_of_peak(settings, DType::fp16, 450) == Approx(50));
  CHECK_FALSE(percent_of_peak(settings, DType::bf16, 450).has_value());
}

TEST_CASE("formats: --peak-gbps", "[bench]") {
  CHECK(parse_peak_gbps("4800") == 4800);
  CHECK_THROWS_AS(parse_peak_gbps("0"), cli::UsageError);
  CHECK_THROWS_AS(parse_peak_gbps("fast"), cli::UsageError);
  RunSettings settings;
  CHECK_FALSE(percent_of_peak_gbps(settings, 100).has_value());
  settings.peak_gbps = 4000;
  CHECK(*percent_of_peak_gbps(settings, 1000) == Approx(25));
}

namespace {

std::vector<CaseRecord> sample_records() {
  const Problem a = make_case(1, 8, 1024, 1024, 64, DType::fp16, Mask::none);
  const Problem b = make_case(1, 8, 4096, 4096, 128, DType::bf16, Mask::causal_bottom_right);
  CaseRecord ok = fake_record(a, 0);
  ok.verify = "pass";
  CaseRecord failed;
  failed.spec = b;
  failed.passes = {fake_pass(b, "fwd", 0.2)};
  failed.failure =
      Failure{"bwd", FailureKind::out_of_memory, "cudaMalloc: out of device memory, again", false};
  return {ok, failed};
}

}  // namespace

TEST_CASE("formats: table, markdown and csv", "[bench]") {
  const auto records = sample_records();
  RunSettings settings;
  SECTION("table: a header, one row per pass and per failure, aligned") {
    const std::string t = format_table(records, settings);
    CHECK(count_lines(t) == 5);
    CHECK(t.rfind("pass  case", 0) == 0);
    CHECK(t.find("%peak") == std::string::npos);
    CHECK(t.find("graph x12") != std::string::npos);
    CHECK(t.find("ok, verified") != std::string::npos);
    CHECK(t.find("FAILED bwd (out_of_memory): cudaMalloc: out of device memory, again") !=
          std::string::npos);
    std::istringstream lines(t);
    std::string header, first;
    std::getline(lines, header);
    std::getline(lines, first);
    const size_t end = header.find("median_ms") + std::string("median_ms").size();
    CHECK(std::isdigit(static_cast<unsigned char>(first[end - 1])));  // numbers right-aligned
    CHECK(first[end] == ' ');
  }
  SECTION("--peak-tflops adds a column") {
    settings.peak_tflops = parse_peak_tflops("100");
    CHECK(format_table(records, settings).find("%peak") != std::string::npos);
  }
  SECTION("GB/s always; --peak-gbps adds its % column after it") {
    const std::string plain = format_table(records, settings);
    CHECK(plain.find(" GB/s ") != std::string::npos);
    CHECK(plain.find("%peak_GB/s") == std::string::npos);
    settings.peak_gbps = 4800;
    const std::string md = format_markdown(records, settings);
    CHECK(md.find("| TFLOP/s | GB/s | %peak_GB/s | alloc_MiB |") != std::string::npos);
  }
  SECTION("cases over several GPUs add TFLOP/s per GPU and the communication") {
    CHECK(format_table(records, settings).find("comm_ms") == std::string::npos);
    std::vector<CaseRecord> ring = {records.front()};
    ring[0].spec.gpus = 2;
    ring[0].passes.resize(1);
    ring[0].passes[0].communication = CommunicationTimes{0.125, 0.03125};
    const std::string md = format_markdown(ring, settings);
    CHECK(md.find("| TFLOP/s | TFLOP/s_per_GPU | comm_ms | comm_exposed_ms | GB/s |") !=
          std::string::npos);
    CHECK(md.find("| 0.125 | 0.03125 |") != std::string::npos);
    const Json rows = benchmark_json(ring, settings, Json::object(), JsonRows::medians);
    const Json& median = rows["benchmarks"].at(0);
    CHECK(median["gpus"] == 2);
    CHECK(median["tflops_per_gpu"].get<double>() == Approx(median["tflops"].get<double>() / 2));
    CHECK(median["comm_ms"] == 0.125);
    CHECK(median["comm_exposed_ms"] == 0.03125);
  }
  SECTION("the JSON median rows name the kernels of each pass, in launch order") {
    std::vector<CaseRecord> named = {records.front()};
    named[0].passes.resize(1);
    named[0].passes[0].kernels = {
        "split::split_forward_kernel<__half, split::SplitConfig<64, 1, 3>, false>",
        "split::merge_partials_kernel<__half>"};
    const Json rows = benchmark_json(named, settings, Json::object(), JsonRows::medians);
    CHECK(rows["benchmarks"].at(0)["kernels"] == Json(named[0].passes[0].kernels));
    const Json none =
        benchmark_json({records.front()}, settings, Json::object(), JsonRows::medians);
    CHECK(none["benchmarks"].at(0)["kernels"] == Json::array());
  }
  SECTION("the JSON rows say whether the backward's dQ order was fixed") {
    std::vector<CaseRecord> modes = {records.front(), records.front()};
    modes[1].spec.deterministic = true;
    const Json rows = benchmark_json(modes, settings, Json::object(), JsonRows::medians);
    CHECK(rows["benchmarks"].at(0)["deterministic"] == false);
    CHECK(rows["benchmarks"].back()["deterministic"] == true);
  }
  SECTION("markdown") {
    const std::string md = format_markdown(records, settings);
    CHECK(md.rfind("| pass | case | median_ms |", 0) == 0);
    CHECK(md.find("\n| --- | --- | ---: |") != std::string::npos);
    CHECK(count_lines(md) == 6);
  }
  SECTION("csv: fixed columns, quoted fields, full precision") {
    const std::string csv = format_csv(records, settings);
    CHECK(count_lines(csv) == 5);
    CHECK(csv.rfind("name,pass,backend,dtype,batch,heads,heads_kv,seq_q,seq_k,head_dim,mask,layout,"
                    "status,error,median_ms,", 0) == 0);
    CHECK(csv.find(",tflops,pct_of_peak,bytes,gbps,pct_of_peak_gbps,alloc_bytes,") !=
          std::string::npos);
    CHECK(csv.find("fwd/fp16/b:1/h:8/sq:1024/sk:1024/d:64/causal:0,fwd,cuflash,fp16,1,8,8,1024,"
                   "1024,64,none,bhsd,ok,,0.01,") != std::string::npos);
    CHECK(csv.find(",failed,\"out_of_memory: cudaMalloc: out of device memory, again\",") !=
          std::string::npos);
  }
}

TEST_CASE("formats: JSON in Google Benchmark's schema", "[bench]") {
  TempDir tmp;
  RunSettings settings;
  settings.peak_tflops = parse_peak_tflops("bf16=1000");
  const Json metadata{{"started_utc", "2026-01-02T03:04:05Z"},
                      {"host_name", "h"},
                      {"num_cpus", 16},
                      {"cuflash", {{"build_type", "Release"}}}};
  const fs::path file = tmp.path / "r.json";
  std::ofstream(file) << format_results(Format::json, sample_records(), settings, metadata);
  const Outcome o = python_check(tmp, file, R"PY(
import json, sys
doc = json.load(open(sys.argv[1]))
c = doc["context"]
assert c["date"] == "2026-01-02T03:04:05Z" and c["json_schema_version"] == 1, c
assert c["library_build_type"] == "release" and c["cuflash_bench"]["host_name"] == "h"
rows = doc["benchmarks"]
assert len(rows) == 3 * (5 + 6), len(rows)  # three passes: 5 samples and 6 aggregates each
first = rows[0]
assert first["name"] == "fwd/fp16/b:1/h:8/sq:1024/sk:1024/d:64/causal:0", first
assert first["run_type"] == "iteration" and first["repetition_index"] == 0
assert first["iterations"] == 12 and first["time_unit"] == "us" and first["backend"] == "cuflash"
assert first["real_time"] == first["cpu_time"] and abs(first["real_time"] - 9.8) < 1e-9, first
aggs = [r for r in rows[:11] if r["run_type"] == "aggregate"]
assert [a["aggregate_name"] for a in aggs] == ["mean", "median", "stddev", "cv", "min", "max"]
median = aggs[1]
assert median["name"] == first["name"] + "_median" and median["run_name"] == first["name"]
assert median["aggregate_unit"] == "time" and aggs[3]["aggregate_unit"] == "percentage"
for key in ("tflops", "flops", "bytes", "gbps", "pct_of_peak_gbps", "noise", "alloc_bytes",
            "workspace_bytes", "memgetinfo_bytes",
            "calls_per_sample", "timing", "cold", "verify", "kernels", "pass", "dtype", "seq_q",
            "mask"):
    assert key in median, key
assert median["pct_of_peak"] is None and median["verify"] == "pass"
assert abs(median["tflops"] - median["flops"] / (median["real_time"] * 1e-6) / 1e12) < 1e-9
assert abs(median["gbps"] - median["bytes"] / (median["real_time"] * 1e-6) / 1e9) < 1e-9
assert median["bytes"] == 2 * 2 * 8 * 1024 * 64 * 2 and median["pct_of_peak_gbps"] is None
assert abs(median["real_time"] - 10.0) < 1e-9 and aggs[3]["real_time"] == median["noise"]
for key, agg in (("median_ms", 1), ("mean_ms", 0), ("stddev_ms", 2), ("min_ms", 4), ("max_ms", 5)):
    assert abs(median[key] * 1e3 - aggs[agg]["real_time"]) < 1e-9, key
bf16 = [r for r in rows if r.get("aggregate_name") == "median" and r["dtype"] == "bf16"][0]
assert abs(bf16["pct_of_peak"] - bf16["tflops"] / 10) < 1e-9
assert len({r["family_index"] for r in rows}) == 3
assert doc["failures"] == [{"name": "bf16/b:1/h:8/sq:4096/sk:4096/d:128/causal:1",
                            "pass": "bwd", "kind": "out_of_memory",
                            "reason": "cudaMalloc: out of device memory, again",
                            "fatal": False, "passes_timed": 1}], doc["failures"]
print("ok")
)PY");
  INFO(o.err);
  CHECK(o.out == "ok\n");
}

TEST_CASE("formats: the compact JSON, one median row per pass and one line per row", "[bench]") {
  const Json metadata{{"started_utc", "2026-01-02T03:04:05Z"}};
  const auto records = sample_records();
  const Json full = benchmark_json(records, RunSettings{}, metadata, JsonRows::all);
  const Json compact = benchmark_json(records, RunSettings{}, metadata, JsonRows::medians);
  REQUIRE(compact["benchmarks"].size() == 3);  // fwd and bwd of the first case, fwd of the second
  std::vector<Json> full_medians;
  for (const Json& row : full["benchmarks"]) {
    if (row.value("aggregate_name", "") == "median") full_medians.push_back(row);
  }
  REQUIRE(full_medians.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(compact["benchmarks"][i] == full_medians[i]);
  CHECK(compact["failures"] == full["failures"]);
  CHECK(compact["context"] == full["context"]);

  const std::string text = json_lines_text(compact);
  CHECK(Json::parse(text) == compact);
  CHECK(count_lines(text) == 11);  // {, context, "benchmarks":[, 3 rows, ], "failures":[, 1, ], }
  std::istringstream lines(text);
  std::string line;
  int row_lines = 0;
  while (std::getline(lines, line)) row_lines += line.rfind("{\"name\":\"", 0) == 0;
  CHECK(row_lines == 3 + 1);  // the three rows and the failure, each a line that starts with it
  CHECK(json_lines_text(Json{{"benchmarks", Json::array()}}) == "{\n\"benchmarks\":[]\n}\n");
}

// --- The result package --------------------------------------------------------------------------

TEST_CASE("package: every file, atomically, and never over an existing package", "[bench]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "a" / "pkg";
  const Json metadata{{"status", "running"}};
  ResultPackage package(dir.string());
  package.write({}, RunSettings{}, metadata);
  CHECK(slurp(dir / "failures.json") == "[]\n");
  package.write(sample_records(), RunSettings{}, metadata);
  for (const char* file : {"metadata.json", "results.json", "results.md", "failures.json"}) {
    CHECK(fs::exists(dir / file));
    CHECK_FALSE(fs::exists(dir / (std::string(file) + ".tmp")));
  }
  const Json failures = Json::parse(slurp(dir / "failures.json"));
  REQUIRE(failures.size() == 1);
  CHECK(failures[0]["kind"] == "out_of_memory");
  CHECK(Json::parse(slurp(dir / "metadata.json")) == metadata);
  CHECK(slurp(dir / "results.md").find("| pass | case |") != std::string::npos);
  CHECK_THROWS_AS(ResultPackage(dir.string()), cli::UsageError);
  // A folder of the user's, not empty: refused, whatever it holds; an empty one serves.
  const fs::path project = tmp.path / "project";
  fs::create_directory(project);
  std::ofstream(project / "README.md") << "mine";
  CHECK_THROWS_AS(ResultPackage(project.string()), cli::UsageError);
  CHECK(slurp(project / "README.md") == "mine");
  fs::create_directory(tmp.path / "empty");
  CHECK_NOTHROW(ResultPackage((tmp.path / "empty").string()));
  std::ofstream(tmp.path / "file") << "x";
  CHECK_THROWS_AS(ResultPackage((tmp.path / "file" / "sub").string()), cli::RuntimeFailure);
}

// --- The sweep loop ------------------------------------------------------------------------------

TEST_CASE("sweep loop: failures are recorded and the sweep goes on", "[bench]") {
  const auto cases = parse_sweep("sq=8,16,32,64", "t");
  int callbacks = 0;
  const SweepOutcome outcome = run_sweep(
      cases,
      [](const Problem& c, size_t i, int) {
        CaseRecord r = fake_record(c, i);
        if (i == 1) r.failure = Failure{"setup", FailureKind::unsupported, "no kernel", false};
        if (i == 2) r.failure = Failure{"verify", FailureKind::verification_failed, "dq", false};
        return r;
      },
      [&](const std::vector<CaseRecord>& records, size_t index) {
        CHECK(records.size() == size_t(++callbacks));
        CHECK(index + 1 == records.size());
      },
      false);
  CHECK(outcome.records.size() == 4);
  CHECK(callbacks == 4);
  CHECK_FALSE(outcome.interrupted);
  CHECK(sweep_exit_code(outcome) == cli::kExitBadInput);  // unsupported outranks verification
}

TEST_CASE("sweep loop: rounds visit every case in turn and gather each pass's samples",
          "[bench]") {
  const auto cases = parse_sweep("sq=8,16,32", "t");
  CHECK(samples_in_round(30, 3, 0) == 10);
  CHECK(samples_in_round(31, 3, 0) == 11);
  CHECK(samples_in_round(31, 3, 2) == 10);
  std::vector<std::pair<size_t, int>> visits;
  // Round r's samples of case i all equal 10 * i + r, so that each sample says where it came
  // from; case 1 fails in round 1 and is not visited in round 2.
  const SweepOutcome outcome = run_sweep(
      cases,
      [&](const Problem& c, size_t i, int round) {
        visits.emplace_back(i, round);
        CaseRecord r = fake_record(c, i);
        for (PassResult& p : r.passes) {
          p.samples_ms.assign(size_t(samples_in_round(31, 3, round)), 10.0 * double(i) + round);
          p.round_samples = {static_cast<int>(p.samples_ms.size())};
          p.sample_spans = {{100.0 * round + i, 100.0 * round + i + 0.5}};
        }
        if (i == 1 && round == 1) {
          r.failure = Failure{"fwd", FailureKind::out_of_memory, "out of memory", false};
        }
        return r;
      },
      [](const std::vector<CaseRecord>& records, size_t index) {
        CHECK(index < records.size());
      },
      false, 3);
  const std::vector<std::pair<size_t, int>> expected{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                                     {2, 1}, {0, 2}, {2, 2}};
  CHECK(visits == expected);
  REQUIRE(outcome.records.size() == 3);
  const PassResult& fwd = outcome.records[2].passes[0];
  CHECK(fwd.round_samples == std::vector<int>{11, 10, 10});
  REQUIRE(fwd.samples_ms.size() == 31);
  CHECK(fwd.samples_ms.front() == 20.0);
  CHECK(fwd.samples_ms.back() == 22.0);
  CHECK(round_spread(fwd.samples_ms, fwd.round_samples) == Approx(2.0 / 21.0));
  // Each round's span, in round order: where a clock log meets the case's samples.
  REQUIRE(fwd.sample_spans.size() == 3);
  CHECK(fwd.sample_spans[0].begin_s == 2.0);
  CHECK(fwd.sample_spans[2].end_s == 202.5);
  const Json rows =
      benchmark_json(outcome.records, RunSettings{}, Json::object(), JsonRows::medians);
  const auto row =
      std::find_if(rows["benchmarks"].begin(), rows["benchmarks"].end(),
                   [](const Json& r) { return r["pass"] == "fwd" && r["seq_q"] == 32; });
  REQUIRE(row != rows["benchmarks"].end());
  CHECK((*row)["sample_spans"] == Json::parse("[[2.0, 2.5], [102.0, 102.5], [202.0, 202.5]]"));
  CHECK(outcome.records[1].failure);
  CHECK(outcome.records[1].passes[0].round_samples == std::vector<int>{11, 10});
  CHECK_FALSE(outcome.records[0].failure);
  CHECK(sweep_exit_code(outcome) == 3);
}

TEST_CASE("sweep loop: a fatal failure in a later round stops the sweep and says so", "[bench]") {
  const auto cases = parse_sweep("sq=8,16,32", "t");
  const SweepOutcome outcome = run_sweep(
      cases,
      [](const Problem& c, size_t i, int round) {
        CaseRecord r = fake_record(c, i);
        if (round == 1 && i == 1) {
          r.failure = Failure{"fwd", FailureKind::cuda_error, "illegal address", true};
        }
        return r;
      },
      [](const std::vector<CaseRecord>&, size_t) {}, false, 3);
  CHECK(outcome.stopped);
  CHECK_FALSE(outcome.interrupted);
  CHECK(outcome.not_run == 0);         // every case was visited in round 0
  CHECK(outcome.rounds_finished == 1);  // round 1 stopped at case 1
  REQUIRE(outcome.records.size() == 3);
  CHECK(outcome.records[1].failure);
  // Case 0 took its round-1 samples before the stop; case 2 never got to round 1.
  CHECK(outcome.records[0].passes[0].samples_ms.size() == 10);
  CHECK(outcome.records[2].passes[0].samples_ms.size() == 5);
  CHECK(sweep_exit_code(outcome) == 3);
}

TEST_CASE("round spread: the distance between the rounds' medians", "[bench]") {
  CHECK(round_spread({1, 2, 3}, {3}) == 0);  // one round
  CHECK(round_spread({1, 2, 3}, {}) == 0);
  // Rounds with medians 1.0 and 1.1 (outliers inside a round do not count), overall median 1.05.
  CHECK(round_spread({1.0, 1.0, 9.0, 1.1, 1.1, 0.1}, {3, 3}) == Approx(0.1 / 1.05));
}

TEST_CASE("sweep loop: exit codes by the most serious failure", "[bench]") {
  SweepOutcome o;
  o.records.resize(3);
  CHECK(sweep_exit_code(o) == 0);
  o.records[0].failure = Failure{"verify", FailureKind::verification_failed, "", false};
  CHECK(sweep_exit_code(o) == 1);
  o.records[1].failure = Failure{"bwd", FailureKind::out_of_memory, "", false};
  CHECK(sweep_exit_code(o) == 3);
  o.interrupted = true;
  CHECK(sweep_exit_code(o) == cli::kExitInterrupted);
}

TEST_CASE("sweep loop: a fatal failure stops the sweep", "[bench]") {
  const auto cases = parse_sweep("sq=8,16,32,64", "t");
  const SweepOutcome outcome = run_sweep(
      cases,
      [](const Problem& c, size_t i, int) {
        CaseRecord r = fake_record(c, i);
        if (i == 1) r.failure = Failure{"fwd", FailureKind::cuda_error, "illegal address", true};
        return r;
      },
      [](const std::vector<CaseRecord>&, size_t) {}, false);
  CHECK(outcome.records.size() == 2);
  CHECK(outcome.not_run == 2);
  CHECK_FALSE(outcome.interrupted);
  CHECK(sweep_exit_code(outcome) == 3);
}

TEST_CASE("sweep loop: Ctrl-C stops after the current case, and the handler is restored",
          "[bench]") {
  struct sigaction before {};
  sigaction(SIGINT, nullptr, &before);
  const auto cases = parse_sweep("sq=8,16,32,64,128", "t");
  size_t saved = 0;
  const SweepOutcome outcome = run_sweep(
      cases,
      [](const Problem& c, size_t i, int) {
        if (i == 1) std::raise(SIGINT);  // as if Ctrl-C came while case 1 was running
        return fake_record(c, i);
      },
      [&](const std::vector<CaseRecord>& records, size_t) { saved = records.size(); }, false);
  CHECK(outcome.interrupted);
  CHECK(outcome.records.size() == 2);  // case 1 finished, cases 2-4 never started
  CHECK(saved == 2);
  CHECK(outcome.not_run == 3);
  CHECK(sweep_exit_code(outcome) == 130);
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
}

TEST_CASE("failures: library errors are classified by their kind", "[bench]") {
  const auto classify = [](auto error) {
    return classify_failure(std::make_exception_ptr(error), "setup");
  };
  const Failure oom = classify(Error(Error::Kind::out_of_memory, "cudaMalloc: out of memory"));
  CHECK(oom.kind == FailureKind::out_of_memory);
  CHECK(oom.pass == "setup");
  CHECK(oom.reason == "cudaMalloc: out of memory");
  CHECK_FALSE(oom.fatal);
  CHECK(classify(Error(Error::Kind::unsupported, "head_dim 96")).kind == FailureKind::unsupported);
  CHECK(classify(Error(Error::Kind::invalid_argument, "heads_kv")).kind ==
        FailureKind::unsupported);
  CHECK(classify(cli::UsageError("seq_k (0) must be positive")).kind == FailureKind::unsupported);
  CHECK(classify(std::bad_alloc()).kind == FailureKind::out_of_memory);
  CHECK(classify(std::runtime_error("other")).kind == FailureKind::error);
}

// --- Whole runs through a fake runner ------------------------------------------------------------

TEST_CASE("session: a complete run writes a consistent package and the results", "[bench]") {
  TempDir tmp;
  SessionPlan plan;
  plan.cases = parse_sweep("sq=64,128 dtype=fp16,bf16", "t");
  plan.protocol = Json{{"sweep", "t"}};
  plan.format = Format::csv;
  plan.output = (tmp.path / "out.csv").string();
  plan.out_dir = (tmp.path / "pkg").string();
  plan.show_progress = false;
  const int code = run_session(plan, fake_record);
  CHECK(code == 0);
  CHECK(count_lines(slurp(plan.output)) == 1 + 2 * 4);
  const Outcome o = python_check(tmp, tmp.path / "pkg", R"PY(
import json, os, sys
d = sys.argv[1]
meta = json.load(open(os.path.join(d, "metadata.json")))
assert meta["status"] == "complete", meta["status"]
assert meta["cases"] == {"total": 4, "finished": 4, "failed": 0, "not_run": 0, "rounds": 1,
                         "rounds_finished": 1}, meta["cases"]
assert meta["finished_utc"].endswith("Z") and meta["started_utc"].endswith("Z")
assert meta["protocol"]["sweep"] == "t"
for key in ("host_name", "command_line", "executable", "cuflash", "cuda", "device"):
    assert key in meta, key
for key in ("version", "git_commit", "git_dirty", "build_type", "cuda_architectures", "cxx_flags"):
    assert key in meta["cuflash"], key
results = json.load(open(os.path.join(d, "results.json")))
rows = results["benchmarks"]
assert len(rows) == 8 and all(r["aggregate_name"] == "median" for r in rows), rows
assert all(r["repetitions"] == 5 and r["mean_ms"] > 0 for r in rows)
text = open(os.path.join(d, "results.json")).read()
assert text.count("\n") == 1 + 1 + 1 + 8 + 1 + 1 + 1, text  # one line per row
assert json.load(open(os.path.join(d, "failures.json"))) == []
assert "| pass | case |" in open(os.path.join(d, "results.md")).read()
print("ok")
)PY");
  INFO(o.err);
  CHECK(o.out == "ok\n");
}

TEST_CASE("session: an interrupted run keeps the finished cases and says so", "[bench]") {
  TempDir tmp;
  SessionPlan plan;
  plan.cases = parse_sweep("sq=64,128,256,512", "t");
  plan.output = (tmp.path / "out.txt").string();
  plan.out_dir = (tmp.path / "pkg").string();
  plan.show_progress = false;
  const int code = run_session(plan, [](const Problem& c, size_t i, int) {
    if (i == 2) std::raise(SIGINT);
    CaseRecord r = fake_record(c, i);
    if (i == 0) {  // the forward pass was timed, the backward pass ran out of memory
      r.passes.pop_back();
      r.failure = Failure{"bwd", FailureKind::out_of_memory, "out of device memory", false};
    }
    return r;
  });
  CHECK(code == cli::kExitInterrupted);
  const Outcome o = python_check(tmp, tmp.path / "pkg", R"PY(
import json, os, sys
d = sys.argv[1]
meta = json.load(open(os.path.join(d, "metadata.json")))
assert meta["status"] == "interrupted", meta["status"]
assert meta["cases"] == {"total": 4, "finished": 3, "failed": 1, "not_run": 1, "rounds": 1,
                         "rounds_finished": 0}, meta["cases"]
results = json.load(open(os.path.join(d, "results.json")))
names = {r["run_name"] for r in results["benchmarks"]}
assert len(names) == 5, names  # fwd+bwd of cases 1 and 2, fwd of case 0
assert len(json.load(open(os.path.join(d, "failures.json")))) == 1
print("ok")
)PY");
  INFO(o.err);
  CHECK(o.out == "ok\n");
  CHECK(count_lines(slurp(plan.output)) == 1 + 5 + 1);  // header, 5 passes, 1 failure
}

TEST_CASE("session: --samples keeps every sample's row in the package", "[bench]") {
  TempDir tmp;
  SessionPlan plan;
  plan.cases = parse_sweep("sq=64", "t");
  plan.out_dir = (tmp.path / "pkg").string();
  plan.output = (tmp.path / "out.txt").string();
  plan.samples = true;
  plan.show_progress = false;
  CHECK(run_session(plan, fake_record) == 0);
  const Json results = Json::parse(slurp(tmp.path / "pkg" / "results.json"));
  int iterations = 0, aggregates = 0;
  for (const Json& row : results["benchmarks"]) {
    iterations += row["run_type"] == "iteration";
    aggregates += row["run_type"] == "aggregate";
  }
  CHECK(iterations == 2 * 5);  // fwd and bwd, five samples each
  CHECK(aggregates == 2 * 6);
}

TEST_CASE("session: a baseline without any of the run's passes is refused before any case runs",
          "[bench][compare]") {
  TempDir tmp;
  // The baseline: the forward pass of one case.
  const auto forward_only = [](const Problem& c, size_t i, int round) {
    CaseRecord record = fake_record(c, i, round);
    record.passes.resize(1);
    REQUIRE(record.passes[0].pass == "fwd");
    return record;
  };
  SessionPlan first;
  first.cases = parse_sweep("sq=64", "t");
  first.out_dir = (tmp.path / "baseline").string();
  first.output = (tmp.path / "first.txt").string();
  first.show_progress = false;
  REQUIRE(run_session(first, forward_only) == 0);

  SessionPlan plan;
  plan.compare = first.out_dir;
  plan.output = (tmp.path / "second.txt").string();
  plan.show_progress = false;
  int runs = 0;
  const auto counted = [&runs](const Problem& c, size_t i, int round) {
    ++runs;
    return fake_record(c, i, round);
  };
  // Another case, and the same case's backward pass alone: refused, nothing run or written.
  for (const auto& [sweep, passes] : {std::pair{"sq=128", std::vector<std::string>{"fwd", "bwd"}},
                                      std::pair{"sq=64", std::vector<std::string>{"bwd"}}}) {
    INFO(sweep << ", " << passes.size() << " passes");
    plan.cases = parse_sweep(sweep, "t");
    plan.passes = passes;
    CHECK_THROWS_WITH(run_session(plan, counted),
                      Catch::Contains("has none of this run's passes"));
    CHECK(runs == 0);
    CHECK_FALSE(fs::exists(plan.output));
  }
  // Both passes of that case and another: the forward of the first is compared.
  plan.cases = parse_sweep("sq=64,128", "t");
  plan.passes = {"fwd", "bwd"};
  CHECK(run_session(plan, counted) == 0);
  CHECK(runs == 2);
  CHECK(slurp(plan.output).find("Comparison with") != std::string::npos);
}

TEST_CASE("report: bench_report.py reads the compact package", "[bench]") {
  TempDir tmp;
  SessionPlan plan;
  plan.cases = parse_sweep("sq=64,128 dtype=fp16,bf16", "t");
  plan.protocol = Json{{"sweep", "t"}};
  plan.out_dir = (tmp.path / "pkg").string();
  plan.output = (tmp.path / "out.txt").string();
  plan.show_progress = false;
  REQUIRE(run_session(plan, fake_record) == 0);
  const fs::path report = tmp.path / "report.md";
  const Outcome o = run_shell(std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR +
                                  "/share/tools/bench_report.py " + plan.out_dir + " --output " +
                                  report.string(),
                              tmp);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  const std::string text = slurp(report);
  CHECK(text.find("## Sweep t") != std::string::npos);
  CHECK(text.find("### bwd, bf16") != std::string::npos);
  CHECK(text.find("| b:1/h:8/sq:128/sk:128/d:64/causal:0 | 0.04 |") != std::string::npos);
  // A package given twice, or a row whose time is not a positive number: exit 2, one line.
  const std::string script =
      std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR + "/share/tools/bench_report.py ";
  const Outcome twice = run_shell(script + plan.out_dir + " " + plan.out_dir, tmp);
  CHECK(twice.exit_code == 2);
  CHECK(twice.err.find("given twice") != std::string::npos);
  std::string results = slurp(fs::path(plan.out_dir) / "results.json");
  const std::string time = "\"real_time\":";
  const size_t at = results.find(time);
  REQUIRE(at != std::string::npos);
  const size_t value = results.find_first_not_of(' ', at + time.size());
  results.replace(value, results.find_first_of(",}", value) - value, "0");
  std::ofstream(tmp.path / "zero.json") << results;
  const Outcome zero = run_shell(script + (tmp.path / "zero.json").string(), tmp);
  INFO(zero.err);
  CHECK(zero.exit_code == 2);
  CHECK(count_lines(zero.err) == 1);
  CHECK(zero.err.find("real_time 0 is not a positive number") != std::string::npos);
}

TEST_CASE("report: bench_report.py counts and lists the cases where cuflash is slower", "[bench]") {
  TempDir tmp;
  // Two cases timed by cuflash and by another backend: cuflash faster on the first, slower on
  // the second.
  const auto results = [](const std::string& backend, double first_ms, double second_ms) {
    Json rows = Json::array();
    for (const auto& [name, ms] :
         {std::pair{std::string("fwd/bf16/b:1/h:8/sq:1/sk:4096/d:64/causal:1"), first_ms},
          std::pair{std::string("fwd/bf16/b:8/h:8/sq:1/sk:4096/d:64/causal:1"), second_ms}}) {
      rows.push_back(Json{{"run_name", name},
                          {"run_type", "aggregate"},
                          {"aggregate_name", "median"},
                          {"pass", "fwd"},
                          {"dtype", "bf16"},
                          {"backend", backend},
                          {"real_time", ms},
                          {"time_unit", "ms"},
                          {"tflops", 1.0}});
    }
    return Json{{"benchmarks", rows}}.dump();
  };
  std::ofstream(tmp.path / "ours.json") << results("cuflash", 1.0, 2.0);
  std::ofstream(tmp.path / "other.json") << results("other", 1.5, 1.6);
  const fs::path report = tmp.path / "report.md";
  const Outcome o =
      run_shell(std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR +
                    "/share/tools/bench_report.py " + (tmp.path / "ours.json").string() + " " +
                    (tmp.path / "other.json").string() + " --output " + report.string(),
                tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  const std::string text = slurp(report);
  INFO(text);
  CHECK(text.find("cuflash/other 1.10x (min 0.80x, 1 at or above 1x)") != std::string::npos);
  CHECK(text.find("Cases where cuflash is slower: 1\n") != std::string::npos);
  CHECK(text.find("- fwd bf16 b:8/h:8/sq:1/sk:4096/d:64/causal:1: cuflash/other 0.80 (2 ms "
                  "against 1.6)") != std::string::npos);
  CHECK(text.find("b:1/h:8/sq:1/sk:4096/d:64/causal:1: cuflash/other") == std::string::npos);
}

TEST_CASE("sdpa_bench.py: compact package files, every sample with --samples", "[bench]") {
  TempDir tmp;
  // cuflash's compact row of the same case, for the fields both scripts must write.
  const Problem c = make_case(1, 8, 64, 64, 64, DType::fp16, Mask::none);
  std::ofstream(tmp.path / "cuflash.json")
      << json_lines_text(benchmark_json({fake_record(c, 0)}, RunSettings{}, Json::object(),
                                        JsonRows::medians));
  const Outcome o = python_check(tmp, tmp.path, std::string(R"PY(
import json, os, sys
sys.path.insert(0, ")PY") + CUFLASH_SOURCE_DIR + R"PY(/share/tools")
import sdpa_bench as sb
c = sb.parse_sweep("sq=64 d=64 dtype=fp16", "t")[0]
timing = dict(method="graph", calls_per_sample=12, cold=False, warmup=10, span=[1.5, 2.5])
def timed(name, ms):
    return dict(pass_=name, samples=[ms, 1.01 * ms, 0.99 * ms], timing=timing,
                flops=sb.pass_flops(c, name), alloc_bytes=1 << 20, memgetinfo_bytes=2 << 20)
fwd = timed("fwd", 0.01)
fwd["kernels"] = ["flash_fwd_kernel"]
records = [dict(case=c, passes={"flash": [fwd, timed("bwd", 0.03)]}, failures={})]
meta = dict(status="complete", started_utc="2026-01-02T03:04:05Z", host_name="h", num_cpus=2,
            executable="python3", command_line=["python3"], device=dict(name="none", uuid=None),
            torch=dict(version="0", cuda="0", cudnn=0), protocol=dict(sweep="t"))
ours = json.load(open(os.path.join(sys.argv[1], "cuflash.json")))["benchmarks"][0]
for samples, rows in ((False, 2), (True, 2 * (3 + 6))):
    d = os.path.join(sys.argv[1], f"pkg-{samples}")
    os.makedirs(d)
    sb.write_package(d, records, ["flash"], meta, {}, samples)
    text = open(os.path.join(d, "sdpa-flash.json")).read()
    doc = json.loads(text)
    assert len(doc["benchmarks"]) == rows, len(doc["benchmarks"])
    if not samples:
        assert text.count("\n") == 8, text  # {, context, [, 2 rows, ], failures, }
        median = doc["benchmarks"][0]
        assert median["aggregate_name"] == "median" and median["backend"] == "sdpa-flash"
        assert abs(median["median_ms"] - 0.01) < 1e-12 and abs(median["real_time"] - 10) < 1e-9
        assert sorted(median) == sorted(ours), set(median) ^ set(ours)
        assert median["kernels"] == ["flash_fwd_kernel"], median["kernels"]
        assert median["sample_spans"] == [[1.5, 2.5]], median["sample_spans"]
        assert doc["benchmarks"][1]["kernels"] is None  # bwd: the profiler named none
print("ok")
)PY");
  INFO(o.err);
  CHECK(o.out == "ok\n");
}

TEST_CASE("compact_package.py: a full package becomes the compact one", "[bench]") {
  TempDir tmp;
  for (const bool samples : {true, false}) {
    SessionPlan plan;
    plan.cases = parse_sweep("sq=64,128 dtype=fp16,bf16", "t");
    plan.out_dir = (tmp.path / (samples ? "full" : "compact")).string();
    plan.output = (tmp.path / "out.txt").string();
    plan.samples = samples;
    plan.show_progress = false;
    REQUIRE(run_session(plan, fake_record) == 0);
  }
  const std::string tool = std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR +
                           "/share/tools/compact_package.py ";
  const Outcome first = run_shell(tool + (tmp.path / "full").string(), tmp);
  INFO(first.err);
  CHECK(first.exit_code == 0);
  CHECK(first.out.find("8 median rows") != std::string::npos);
  const Outcome again = run_shell(tool + (tmp.path / "full").string(), tmp);
  CHECK(again.out.find("already compact") != std::string::npos);
  const Outcome o = python_check(tmp, tmp.path, R"PY(
import json, math, os, sys
load = lambda name: json.load(open(os.path.join(sys.argv[1], name, "results.json")))
full, compact = load("full"), load("compact")
assert len(full["benchmarks"]) == len(compact["benchmarks"]) == 8
for a, b in zip(full["benchmarks"], compact["benchmarks"]):
    assert list(a) == list(b), (list(a), list(b))
    for key in a:
        same = a[key] == b[key] or math.isclose(a[key], b[key], rel_tol=1e-12)
        assert same, (key, a[key], b[key])
print("ok")
)PY");
  INFO(o.err);
  CHECK(o.out == "ok\n");
}

// --- The binary and the PyTorch script -----------------------------------------------------------

TEST_CASE("ncu_stalls.py: samples by reason, the top and the matching instructions", "[bench]") {
  TempDir tmp;
  // The shape of `ncu --page source --csv --print-source sass`: the kernel's name, the header,
  // one row per instruction (numbers may carry thousands separators).
  std::ofstream(tmp.path / "det.csv")
      << "\"Kernel Name\",\"void k(int)\",\n"
         "\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",\"Instructions Executed\","
         "\"stall_barrier\",\"stall_membar\",\"stall_wait\",\"stall_barrier (Not Issued)\"\n"
         "\"0x10\",\"      HMMA.1688.F32.TF32 R60, R108, R44, R72\",\"40\",\"1,024\",\"0\",\"0\","
         "\"40\",\"0\"\n"
         "\"0x20\",\"      ULDC.64 UR6, c[0x0][0x448]\",\"1,043\",\"512\",\"1,030\",\"0\",\"13\","
         "\"900\"\n"
         "\"0x30\",\"      ERRBAR\",\"278\",\"4,096\",\"0\",\"276\",\"2\",\"0\"\n"
         "\"0x40\",\"      MEMBAR.ALL.GPU\",\"0\",\"0\",\"0\",\"0\",\"0\",\"0\"\n";
  std::ofstream(tmp.path / "not-ncu.csv") << "a,b\n1,2\n";
  const std::string tool = std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR +
                           "/share/tools/ncu_stalls.py ";
  const Outcome o = run_shell(tool + (tmp.path / "det.csv").string() +
                                  " --top 2 --match 'MEMBAR|ERRBAR'", tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  CHECK(o.out.find("1361 samples, 4 instructions") != std::string::npos);
  CHECK(o.out.find("kernel: void k(int)") != std::string::npos);
  CHECK(o.out.find("by reason: barrier 1030, membar 276, wait 55") != std::string::npos);
  CHECK(o.out.find("   1043  barrier ") != std::string::npos);  // first of the top 2
  CHECK(o.out.find("      512x  ULDC.64") != std::string::npos);  // with its executions
  CHECK(o.out.find("HMMA") == std::string::npos);                // third by samples
  CHECK(o.out.find("ERRBAR") != std::string::npos);
  CHECK(o.out.find("executed     4096  samples    278 (membar)") != std::string::npos);
  CHECK(o.out.find("MEMBAR.ALL.GPU") == std::string::npos);  // never ran
  const Outcome bad = run_shell(tool + (tmp.path / "not-ncu.csv").string(), tmp);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("not-ncu.csv: no 'Warp Stall Sampling (All Samples)' column") !=
        std::string::npos);
}

TEST_CASE("case_clocks.py: the clock while each case's samples ran, per result file", "[bench]") {
  TempDir tmp;
  // A log every 100 ms for a second, 1980 MHz in its first half and 1800 in its second; case X
  // ran late in file 1 and early in file 2, case Y in both halves (two rounds) in file 1 and
  // without spans in file 2 (an older file), case Z only in file 2, where no sample is near.
  const Outcome o = python_check(tmp, tmp.path, std::string(R"PY(
import json, os, subprocess, sys
from datetime import datetime
d, t0 = sys.argv[1], 1765000000
with open(os.path.join(d, "clocks.csv"), "w") as f:
    f.write("timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu\n")
    for k in range(11):
        when = datetime.fromtimestamp(t0 + 0.1 * k).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        f.write(f"{when}, {1980 if k < 5 else 1800} MHz, 500.00 W, 60\n")
def results(name, rows):
    doc = {"benchmarks": [dict(run_name=case, aggregate_name="median", **extra)
                          for case, extra in rows]}
    json.dump(doc, open(os.path.join(d, name), "w"))
results("one.json", [("X", {"sample_spans": [[t0 + 0.82, t0 + 0.84]]}),
                     ("Y", {"sample_spans": [[t0 + 0.12, t0 + 0.13], [t0 + 0.61, t0 + 0.62]]})])
results("two.json", [("X", {"sample_spans": [[t0 + 0.21, t0 + 0.23]]}), ("Y", {}),
                     ("Z", {"sample_spans": [[t0 + 5.0, t0 + 5.1]]})])
tool = os.path.join(")PY") + CUFLASH_SOURCE_DIR + R"PY(", "share", "tools", "case_clocks.py")
out = subprocess.run([sys.executable, tool, "--clocks", os.path.join(d, "clocks.csv"),
                      os.path.join(d, "one.json"), os.path.join(d, "two.json")],
                     capture_output=True, text=True, cwd=d)
assert out.returncode == 0, out.stderr
for line in ("    1800   1980  X", "    1890      -  Y", "       -      -  Z",
             "1: one.json: median over 2 cases 1845 MHz", "2: two.json: median over 1 cases 1980 MHz"):
    assert line in out.stdout, (line, out.stdout)
print("ok")
)PY");
  INFO(o.err);
  CHECK(o.out == "ok\n");
}

TEST_CASE("stage_clocks.py: each stage's clock range from nvidia-smi's log", "[bench]") {
  TempDir tmp;
  // nvidia-smi's CSV (a header, an error line, a sample without temperature, "[N/A]" power) and
  // the stage lines bench_h200.sh writes; a stage without an end is left out.
  std::ofstream(tmp.path / "clocks.csv")
      << "timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu\n"
         "2026/12/07 02:53:48.312, 1980 MHz, 376.67 W, 40\n"
         "2026/12/07 02:53:48.812, 1965 MHz, 410.00 W, 41\n"
         "Unable to query something\n"
         "2026/12/07 02:53:49.312, 1755 MHz, 590.50 W, 55\n"
         "2026/12/07 02:53:49.812, 1785 MHz, [N/A], 57\n"
         "2026/12/07 02:53:50.312, 1770 MHz, 600.00 W\n";
  std::ofstream(tmp.path / "stages.txt") << "2026/12/07 02:53:48.000 start cool\n"
                                            "2026/12/07 02:53:49.000 end cool\n"
                                            "2026/12/07 02:53:49.100 start hot\n"
                                            "2026/12/07 02:53:51.000 end hot\n"
                                            "2026/12/07 02:54:00.000 start idle\n"
                                            "2026/12/07 02:54:01.000 end idle\n"
                                            "2026/12/07 02:55:00.000 start cut\n";
  const std::string tool =
      std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR + "/share/tools/stage_clocks.py ";
  const Outcome o = run_shell(
      tool + (tmp.path / "stages.txt").string() + " " + (tmp.path / "clocks.csv").string(), tmp);
  INFO(o.out << o.err);
  REQUIRE(o.exit_code == 0);
  CHECK(contains(o.out,
                 "cool                                  2 samples, SM 1965 / 1972 / 1980 MHz, "
                 "393 W, 41 C"));
  CHECK(contains(o.out,
                 "hot                                   3 samples, SM 1755 / 1770 / 1785 MHz, "
                 "595 W, 57 C"));
  CHECK(contains(o.out, "idle                               no clock samples"));
  CHECK(!contains(o.out, "cut"));
  const Outcome usage = run_shell(tool, tmp);
  CHECK(usage.exit_code == 1);
  CHECK(contains(usage.err, "stage_clocks.py STAGES CLOCKS.csv"));
}

TEST_CASE(
    "profile_vs_cudnn.sh: a bad pass, no shape, an unknown option, --deterministic forward or "
    "a folder in use is refused",
    "[bench]") {
  TempDir tmp;
  const std::string tool =
      std::string("bash ") + CUFLASH_SOURCE_DIR + "/share/scripts/profile_vs_cudnn.sh ";
  const std::string out = (tmp.path / "out").string();
  const Outcome bad_pass = run_shell(tool + out + " sideways -b 1", tmp);
  CHECK(bad_pass.exit_code == 2);
  CHECK(contains(bad_pass.err, "usage: share/scripts/profile_vs_cudnn.sh"));
  CHECK(run_shell(tool + out + " bwd", tmp).exit_code == 2);  // no shape
  const Outcome forward_ordered = run_shell(tool + "--deterministic " + out + " fwd -b 1", tmp);
  CHECK(forward_ordered.exit_code == 2);
  CHECK(contains(forward_ordered.err, "--deterministic orders the backward's dQ sums"));
  const Outcome unknown = run_shell(tool + "--fast " + out + " bwd -b 1", tmp);
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "unknown option --fast"));
  fs::create_directories(tmp.path / "out");
  std::ofstream(tmp.path / "out" / "kept.txt") << "the user's\n";
  const Outcome in_use = run_shell(tool + out + " fwd -b 1", tmp);
  CHECK(in_use.exit_code == 2);
  CHECK(contains(in_use.err, "is not empty: give a new folder"));
  CHECK(fs::exists(tmp.path / "out" / "kept.txt"));
  CHECK(!fs::exists(tmp.path / "out" / "build.log"));  // nothing started
}

TEST_CASE("build_gpu.sh: bad jobs, an unknown option or a tree that is not ours is refused",
          "[bench]") {
  TempDir tmp;
  const std::string tool =
      std::string("bash ") + CUFLASH_SOURCE_DIR + "/share/scripts/build_gpu.sh ";
  const Outcome bad_jobs = run_shell(tool + "--jobs 0", tmp);
  CHECK(bad_jobs.exit_code == 2);
  CHECK(contains(bad_jobs.err, "--jobs takes a positive number, not '0'"));
  const Outcome unknown = run_shell(tool + "--tests", tmp);
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "unknown option --tests"));
  const Outcome not_ours = run_shell(tool + "--source " + tmp.path.string(), tmp);
  CHECK(not_ours.exit_code == 2);
  CHECK(contains(not_ours.err, "is not a cuflash tree"));
  CHECK(!fs::exists(tmp.path / "build"));  // nothing configured
}

TEST_CASE("gpu_check.sh: an unknown stage, an empty list or two log folders are refused",
          "[bench]") {
  TempDir tmp;
  const std::string tool =
      std::string("bash ") + CUFLASH_SOURCE_DIR + "/share/scripts/gpu_check.sh ";
  const Outcome unknown = run_shell(tool + "--stages gpu-tests,bogus out", tmp);
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "unknown stage 'bogus' in --stages"));
  const Outcome empty = run_shell(tool + "--stages , out", tmp);
  CHECK(empty.exit_code == 2);
  CHECK(contains(empty.err, "--stages needs a list"));
  const Outcome two_folders = run_shell(tool + "out other", tmp);
  CHECK(two_folders.exit_code == 2);
  CHECK(contains(two_folders.err, "one log folder only"));
  CHECK(!fs::exists(tmp.path / "out"));  // refused before any folder was made
  CHECK(!fs::exists(tmp.path / "other"));
}

TEST_CASE("sass_waits.py: the wgmma waits and the exponentials between them", "[bench]") {
  TempDir tmp;
  // The shape of `cuobjdump -sass`: a function header, then an instruction a line with its
  // address and encoding in comments.
  const auto line = [](const char* address, const char* text) {
    return std::string("        /*") + address + "*/                   " + text +
           " ;   /* 0x000fe20000000800 */\n";
  };
  std::ofstream(tmp.path / "k.sass")
      << "\t\tFunction : _Z6kernelv\n"
      << line("0000", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24")
      << line("0010", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24, gsb0")
      << line("0020", "WARPGROUP.DEPBAR.LE gsb0, 0x1") << line("0030", "MUFU.EX2 R24, R24")
      << line("0040", "FFMA R25, R25, UR21, -R179") << line("0050", "MUFU.EX2 R25, R25")
      << line("0060", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
      << line("0070", "F2FP.BF16.F32.PACK_AB R1, R2, R3") << "\t\tFunction : _Z5otherv\n"
      << line("0000", "EXIT");
  const std::string tool =
      std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR + "/share/tools/sass_waits.py ";
  const Outcome o = run_shell(tool + (tmp.path / "k.sass").string() + " --kernel kernel", tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  CHECK(o.out.find("_Z6kernelv: 8 instructions, 2 wgmma waits, MUFU.EX2 between a wait for all "
                   "but one group and the next full wait: [2]") != std::string::npos);
  CHECK(o.out.find("  group committed: HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24, gsb0\n"
                   "  WARPGROUP.DEPBAR.LE gsb0, 0x1\n    2 MUFU.EX2\n"
                   "  WARPGROUP.DEPBAR.LE gsb0, 0x0\n    1 F2FP\n") != std::string::npos);
  CHECK(o.out.find("_Z5otherv") == std::string::npos);  // --kernel leaves it out
}

TEST_CASE("check_wgmma_pipelines.py: kernels that ptxas serialized, known or new", "[bench]") {
  TempDir tmp;
  const auto serialized = [](const std::string& kernel) {
    return "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are "
           "serialized due to insufficient register resources for the function '" +
           kernel + "'\n";
  };
  const std::string known_kernel =
      "_ZN7cuflash6detail4sm9015backward_kernelI6__halfLi64ELb0ELb0ELb0ELb0EEEvNS1_"
      "17BackwardTmaParamsIT_EE";
  const std::string new_kernel =
      "_ZN7cuflash6detail4sm9014forward_kernelI13__nv_bfloat16Li128ELNS1_13ForwardKernelE0EEEvNS1_"
      "16ForwardTmaParamsIT_EE";
  std::ofstream(tmp.path / "build.log")
      << "[1/2] Building CUDA object a.cu.o\n"
      << serialized(known_kernel) << "[2/2] Building CUDA object b.cu.o\n"
      << serialized(new_kernel);
  std::ofstream(tmp.path / "known.txt") << "# why\n" << known_kernel << "  # head_dim 64\n\n";
  std::ofstream(tmp.path / "both.txt") << known_kernel << "\n" << new_kernel << "\n_Z4gonev\n";
  const std::string tool = std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR +
                           "/share/scripts/check_wgmma_pipelines.py " +
                           (tmp.path / "build.log").string();
  const Outcome fails = run_shell(tool + " --known " + (tmp.path / "known.txt").string(), tmp);
  CHECK(fails.exit_code == 1);
  CHECK(fails.out.find("NEW: sm90 forward_kernel bf16 head_dim 128: C7512 serialized due to "
                       "insufficient register resources") != std::string::npos);
  CHECK(fails.out.find("known: sm90 backward_kernel fp16 head_dim 64") != std::string::npos);
  CHECK(fails.out.find("2 kernels serialized or given injected waits, 1 of them not known") !=
        std::string::npos);
  CHECK(fails.err.find("see the lines marked NEW") != std::string::npos);
  const Outcome passes = run_shell(tool + " --known " + (tmp.path / "both.txt").string(), tmp);
  CHECK(passes.exit_code == 0);
  CHECK(passes.out.find("not serialized in this output (known): _Z4gonev") != std::string::npos);
  const Outcome missing = run_shell(tool + " --known " + (tmp.path / "none.txt").string(), tmp);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("none.txt: No such file or directory") != std::string::npos);
}

// ptxas's other note: a wait for every product in flight added before an instruction (C7517), or
// an arrive (C7519); the kernel then counts as one whose overlap is lost.
TEST_CASE("check_wgmma_pipelines.py: kernels that ptxas gave injected waits", "[bench]") {
  TempDir tmp;
  const std::string kernel =
      "_ZN7cuflash6detail4sm9015backward_kernelI6__halfLi128ELb0ELb0ELb0ELb0ELb1ELb0ELb0EEEvNS1_"
      "17BackwardTmaParamsIT_EE";
  std::ofstream(tmp.path / "build.log")
      << "ptxas info    : (C7517) warpgroup.wait is injected in around line 990 by compiler to "
         "allow use of registers defined by GMMA in function '"
      << kernel << "'\n";
  std::ofstream(tmp.path / "none.txt") << "# nothing known\n";
  std::ofstream(tmp.path / "known.txt") << kernel << "\n";
  const std::string tool = std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR +
                           "/share/scripts/check_wgmma_pipelines.py " +
                           (tmp.path / "build.log").string() + " --known ";
  const Outcome fails = run_shell(tool + (tmp.path / "none.txt").string(), tmp);
  CHECK(fails.exit_code == 1);
  CHECK(fails.out.find("NEW: sm90 backward_kernel fp16 head_dim 128: C7517 warpgroup.wait is "
                       "injected to allow use of registers defined by GMMA") != std::string::npos);
  CHECK(fails.out.find("1 kernels serialized or given injected waits, 1 of them not known") !=
        std::string::npos);
  const Outcome passes = run_shell(tool + (tmp.path / "known.txt").string(), tmp);
  CHECK(passes.exit_code == 0);
}

TEST_CASE("cli: named sweeps, --list and --filter need no GPU", "[bench]") {
  TempDir tmp;
  const std::string cuflash = std::string("NO_COLOR=1 ") + CUFLASH_BINARY;
  const Outcome seed = run_shell(cuflash + " bench --sweep seed --list", tmp);
  INFO(seed.err);
  CHECK(seed.exit_code == 0);
  CHECK(count_lines(seed.out) == 48);
  const Outcome decode = run_shell(cuflash + " bench --sweep decode --list", tmp);
  CHECK(decode.exit_code == 0);
  CHECK(count_lines(decode.out) == 208);
  const Outcome path = run_shell(cuflash + " bench --sweep " + (kSweepDir / "fa.txt").string() +
                                     " --list --filter 'fp16/.*d:128/causal:1'", tmp);
  CHECK(path.exit_code == 0);
  CHECK(count_lines(path.out) == 6);
  const Outcome both = run_shell(cuflash + " bench --sweep seed -s 1024", tmp);
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("--sweep") != std::string::npos);
  const Outcome none = run_shell(cuflash + " bench --sweep nosuch", tmp);
  CHECK(none.exit_code == 2);
  CHECK(count_lines(none.err) == 1);
  const Outcome format = run_shell(cuflash + " bench --format yaml", tmp);
  CHECK(format.exit_code == 2);
  const Outcome samples = run_shell(cuflash + " bench --samples", tmp);  // needs --out-dir
  CHECK(samples.exit_code == 2);
  CHECK(samples.err.find("--out-dir") != std::string::npos);
}

TEST_CASE("cli: --deterministic names every case it applies to, sweeps included", "[bench]") {
  TempDir tmp;
  const std::string bench = std::string("NO_COLOR=1 ") + CUFLASH_BINARY + " bench";
  const Outcome lists = run_shell(bench + " -s 100,200 -d 64 --deterministic --list", tmp);
  INFO(lists.err);
  CHECK(lists.exit_code == 0);
  CHECK(lists.out == "fp16/b:1/h:8/sq:100/sk:100/d:64/causal:0/deterministic\n"
                     "fp16/b:1/h:8/sq:200/sk:200/d:64/causal:0/deterministic\n");
  const Outcome plain = run_shell(bench + " -s 100 -d 64 --list", tmp);
  CHECK(plain.out == "fp16/b:1/h:8/sq:100/sk:100/d:64/causal:0\n");
  const Outcome seed = run_shell(bench + " --sweep seed --deterministic --list", tmp);
  CHECK(seed.exit_code == 0);
  CHECK(count_lines(seed.out) == 48);
  size_t named = 0;
  for (size_t at = seed.out.find("/deterministic\n"); at != std::string::npos;
       at = seed.out.find("/deterministic\n", at + 1)) {
    ++named;
  }
  CHECK(named == 48);
  const Outcome filtered =
      run_shell(bench + " --sweep seed --deterministic --list --filter 'd:128/causal:1/det'", tmp);
  CHECK(count_lines(filtered.out) == 12);
}

// The benchmark uploads io::random_input_bytes(case, tensor, seed); `run` (and `verify`, through
// the same generate_inputs()) must compute on exactly those tensors.
TEST_CASE("cli: run's generated inputs are the benchmark's, bit for bit", "[bench]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "out";
  const Outcome o = run_shell(std::string("NO_COLOR=1 ") + CUFLASH_BINARY +
                                  " run --backend cpu -b 2 --heads 4 --heads-kv 2 -s 5 --seq-k 7"
                                  " -d 3 --dtype bf16 --layout bshd --backward --seed 9"
                                  " --save-inputs -q --out-dir " + dir.string(),
                              tmp);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  Problem p;
  p.shape = AttentionShape{2, 4, 2, 5, 7, 3};
  p.dtype = DType::bf16;
  p.layout = Layout::bshd;
  for (const auto& [name, tensor] :
       {std::pair{"q", io::InputTensor::q}, std::pair{"k", io::InputTensor::k},
        std::pair{"v", io::InputTensor::v}, std::pair{"dout", io::InputTensor::dout}}) {
    INFO(name);
    const io::NpyArray saved = io::read_npy((dir / (std::string(name) + ".npy")).string());
    CHECK(saved.bytes == io::random_input_bytes(p, tensor, 9));
  }
}

TEST_CASE("cli: without a GPU, bench fails fast and writes nothing", "[bench]") {
  TempDir tmp;
  const Outcome info = run_shell(std::string(CUFLASH_BINARY) + " info --format json", tmp);
  if (info.out.find("\"devices\": 0") == std::string::npos) {
    SUCCEED("a GPU is present");
    return;
  }
  const fs::path dir = tmp.path / "pkg";
  const Outcome o = run_shell(std::string("NO_COLOR=1 ") + CUFLASH_BINARY +
                                  " bench --sweep seed --format csv --out-dir " + dir.string(),
                              tmp);
  CHECK(o.exit_code == 3);
  CHECK(count_lines(o.err) == 1);
  CHECK(o.err.find("GPU") != std::string::npos);
  CHECK(o.out.empty());
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("cli: output places, baselines, peaks and repeated cases are checked before the GPU",
          "[bench]") {
  TempDir tmp;
  const auto bench = [&](const std::string& args) {
    return run_shell(std::string("NO_COLOR=1 ") + CUFLASH_BINARY + " bench " + args, tmp);
  };
  const auto require_usage_error = [&](const std::string& args, const std::string& words) {
    const Outcome o = bench(args);
    INFO(args << ": " << o.err);
    CHECK(o.exit_code == 2);
    CHECK(count_lines(o.err) == 1);
    CHECK(o.err.find(words) != std::string::npos);
  };
  // A folder of the user's as --out-dir: refused, its files untouched.
  const fs::path project = tmp.path / "project";
  fs::create_directory(project);
  std::ofstream(project / "README.md") << "mine";
  require_usage_error("-s 64 --out-dir " + project.string(), "not empty");
  CHECK(slurp(project / "README.md") == "mine");
  // --output: a folder or a link is refused before the sweep, not after it.
  require_usage_error("-s 64 --output " + project.string(), "not a regular file");
  fs::create_symlink(project / "README.md", tmp.path / "link");
  require_usage_error("-s 64 --output " + (tmp.path / "link").string(), "not a regular file");
  CHECK(slurp(project / "README.md") == "mine");
  // --list writes to --output when given.
  const Outcome list = bench("--list -s 64,128 --output " + (tmp.path / "l.txt").string());
  CHECK(list.exit_code == 0);
  CHECK(list.out.empty());
  CHECK(slurp(tmp.path / "l.txt") ==
        "fp16/b:1/h:8/sq:64/sk:64/d:64/causal:0\nfp16/b:1/h:8/sq:128/sk:128/d:64/causal:0\n");
  // Empty values are refused rather than read as "not given"; an infinite peak is no peak.
  require_usage_error("-s 64 --compare ''", "--compare");
  require_usage_error("-s 64 --peak-tflops ''", "--peak-tflops");
  require_usage_error("-s 64 --peak-gbps ''", "--peak-gbps");
  require_usage_error("-s 64 --peak-tflops inf", "--peak-tflops");
  // A case named twice, from a file or from the lists.
  std::ofstream(tmp.path / "twice.txt") << "b=1\nb=1\n";
  require_usage_error("--list --sweep " + (tmp.path / "twice.txt").string(), "comes twice");
  require_usage_error("--list -s 64,64", "comes twice");
  // Lines that differ only in a key an option sets for all of them: the option is named.
  std::ofstream(tmp.path / "det.txt") << "b=1 deterministic=0,1\n";
  require_usage_error(
      "--list --deterministic --sweep " + (tmp.path / "det.txt").string(),
      "comes twice from --sweep " + (tmp.path / "det.txt").string() + " with --deterministic");
  // ... and not named where the lines were one case already.
  const Outcome twice =
      bench("--list --deterministic --sweep " + (tmp.path / "twice.txt").string());
  CHECK(twice.exit_code == 2);
  CHECK(twice.err.find("comes twice") != std::string::npos);
  CHECK(twice.err.find("with --deterministic") == std::string::npos);
  // Lists whose product passes 100000 cases, refused before they are made.
  require_usage_error("--list -s $(seq -s, 1 400) -b $(seq -s, 1 300)", "more than 100000 cases");
  // A sweep's head_dim without kernels names the file and the case.
  std::ofstream(tmp.path / "d7.txt") << "d=7\n";
  const Outcome info = run_shell(std::string(CUFLASH_BINARY) + " info --format json", tmp);
  if (info.out.find("\"devices\": 0") != std::string::npos) {
    require_usage_error("--sweep " + (tmp.path / "d7.txt").string(), "d7.txt: case ");
  }
}

TEST_CASE("cli: the PyTorch script expands sweeps to the same cases and names", "[bench]") {
  TempDir tmp;
  const std::string script =
      std::string(CUFLASH_TEST_PYTHON) + " " + CUFLASH_SOURCE_DIR + "/share/tools/sdpa_bench.py";
  const std::string cuflash = std::string("NO_COLOR=1 ") + CUFLASH_BINARY + " bench";
  for (const std::string args :
       {"--sweep seed --list", "--sweep fa --list", "--sweep decode --list",
        "--sweep varlen --list",
        "--sweep seed --list --filter 'bf16/.*causal:1'", "--sweep fa --list --format json",
        "-s 100,200 --seq-k 300 -d 32,64 --dtype bf16,fp32 --mask none,causal,causal-top-left "
        "--heads 8 --heads-kv 2,8 --layout bhsd,bshd --list"}) {
    INFO(args);
    const Outcome ours = run_shell(cuflash + " " + args, tmp);
    const Outcome theirs = run_shell(script + " " + args, tmp);
    INFO(theirs.err);
    CHECK(ours.exit_code == 0);
    CHECK(theirs.exit_code == 0);
    CHECK(ours.out == theirs.out);
  }
  const Outcome samples = run_shell(script + " --sweep seed --samples", tmp);  // needs --out-dir
  CHECK(samples.exit_code == 2);
  CHECK(samples.err.find("--out-dir") != std::string::npos);
}

TEST_CASE("memory: a case over GPUs needs rank 0's shards and ring scratch on GPU 0 as well",
          "[bench]") {
  if (!context_parallel::ring_available()) {
    WARN("built without NCCL: no ring to size");
    return;
  }
  Problem p;
  p.shape = AttentionShape{2, 16, 4, 8192, 8192, 128};
  p.dtype = DType::bf16;
  p.mask = Mask::causal_bottom_right;
  for (const bool backward : {false, true}) {
    // The whole tensors, without the single-GPU workspaces (the ring's blocks bring their own).
    const DevicePasses one_gpu = context_parallel::device_passes(p);
    const double whole = cli::run_memory_need(p, backward, cli::Backend::cuda).device_bytes -
                         double(one_gpu.forward_workspace_bytes(p)) -
                         (backward ? double(one_gpu.backward_workspace_bytes(p)) : 0.0);
    for (const int gpus : {1, 2, 8}) {
      Problem over = p;
      over.gpus = gpus;
      const double ring =
          double(context_parallel::ring_rank_device_bytes(p.shape, p.dtype, gpus, backward));
      CHECK(cli::run_memory_need(over, backward, cli::Backend::cuda).device_bytes ==
            Approx(whole + ring));
      // At least the rank's shards of Q, K, V and O (two of the 2N chunks of each).
      const double shards = 2.0 * (p.shape.q_elements() + p.shape.kv_elements()) / gpus;
      CHECK(ring > shards);
    }
    // More GPUs, smaller shards.
    CHECK(context_parallel::ring_rank_device_bytes(p.shape, p.dtype, 8, backward) <
          context_parallel::ring_rank_device_bytes(p.shape, p.dtype, 2, backward));
  }
  // A forward and backward run holds the forward's scratch and besides it at least the
  // backward's shards of dO, dQ, dK and dV (bf16) and its fp32 sums of dQ and of dK and dV (two
  // being added to, two arriving with more than one rank).
  for (const int gpus : {1, 2, 8}) {
    const double forward =
        double(context_parallel::ring_rank_device_bytes(p.shape, p.dtype, gpus, false));
    const double backward =
        double(context_parallel::ring_rank_device_bytes(p.shape, p.dtype, gpus, true));
    const double q_shard = double(p.shape.q_elements()) / gpus;
    const double k_shard = double(p.shape.kv_elements()) / gpus;
    const double kv_sums = gpus > 1 ? 8 : 4;
    CHECK(backward - forward >=
          2 * (2 * q_shard + 2 * k_shard) + 4 * (q_shard + kv_sums * k_shard));
  }
}
