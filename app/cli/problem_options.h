// The shape and data options shared by `run`, `verify` and `bench`, and their expansion into the
// list of attention cases to compute (the product of every comma-separated list).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cuflash/context_parallel/plan.h"
#include "cuflash/problem.h"

namespace cuflash::cli {

struct ProblemOptions {
  std::vector<int64_t> batch{1};
  std::vector<int64_t> heads{8};
  std::vector<int64_t> heads_kv;  // empty: same as heads
  std::vector<int64_t> seq{1024};
  std::vector<int64_t> seq_k;     // empty: same as seq
  std::vector<int64_t> head_dim{64};
  std::vector<std::string> dtype{"fp16"};
  std::vector<std::string> mask{"none"};
  std::vector<std::string> layout{"bhsd"};
  std::vector<int64_t> splits{0};  // the GPU forward's key splits; 0: automatic
  std::vector<int64_t> page_size{0};  // keys per page of a paged K/V cache; 0: contiguous
  std::vector<int64_t> cache_seqlens;  // keys of each batch entry (one list for every case)
  // A variable-length packed batch (layout thd): the query lengths of its sequences, and their
  // key lengths when they differ (empty: the same). One list for every case.
  std::vector<int64_t> seqlens;
  std::vector<int64_t> seqlens_k;
  bool deterministic = false;      // the GPU backward's fixed-order dQ sums, for every case
  // Context-parallel ranks run one after another on one GPU (Problem::ranks), for every case;
  // 0: not given, the attention in one piece.
  int64_t ranks = 0;
  // Context parallelism over GPUs 0 to N-1 through NCCL (Problem::gpus); 0: one GPU.
  int64_t gpus = 0;
  bool causal = false;  // shorthand for --mask causal
  std::optional<double> scale;
  std::vector<std::string> window;  // "LEFT,RIGHT" per occurrence; empty: no window
  std::vector<double> softcap;      // empty: none
  bool alibi = false;               // the ALiBi paper's slopes for the case's heads
  std::string alibi_slopes_file;    // or slopes from a .npy file: fp32 [heads] or [batch, heads]
  uint64_t seed = 0;
  // Input files; when given, shape and dtype come from them.
  std::string q_file, k_file, v_file, dout_file;
  // The shape and dtype options given on the command line (e.g. "--seq"), in the order seen:
  // with input files they are refused rather than ignored.
  std::vector<std::string> shape_options_given;

  bool has_input_files() const { return !q_file.empty() || !k_file.empty() || !v_file.empty(); }
  bool has_any_input_file() const { return has_input_files() || !dout_file.empty(); }
};

// The most cases the options' lists or a sweep file may name: far more than a run can time (the
// largest shipped sweep has 208), few enough to hold in memory.
inline constexpr size_t kMaxCases = 100000;

// The most --ranks (and sweep key ranks) taken: the library's (context_parallel::kMaxRanks).
inline constexpr int64_t kMaxRanks = context_parallel::kMaxRanks;

// The one name of a case in the outputs and messages of `run`, `verify` and `bench` (and of
// share/tools/sdpa_bench.py), e.g. "bf16/b:1/h:8/sq:4096/sk:4096/d:64/causal:1": dtype, batch,
// heads, hkv:N only when it differs from heads, sequence lengths, head_dim, the mask as causal:0
// (none), causal:1 (bottom-right, or top-left when sq == sk: the same mask) or causal:tl
// (top-left with sq != sk), then the variants when set: "/win:LEFT:RIGHT" (-1 for an unbounded
// side), "/softcap:C", "/alibi:1" (the paper's slopes) or "/alibi:file", then "/bshd" only for
// that layout, "/splits:N" only for forced key splits, "/page:N" only for a paged K/V cache,
// "/cache:L0+L1+..." only with per-sequence key lengths, "/thd/seqlens:L0+L1+..." (and
// "/seqlens-k:..." when the keys' differ) for a varlen batch, whose b, sq and sk are those of the
// packed tensors (1 and the token totals), "/deterministic" only for the deterministic
// backward, "/ranks:N" only for context parallelism on one GPU and "/gpus:N" only for context
// parallelism over N GPUs. `bench --filter` matches it.
std::string case_label(const Problem& p);

// Adds the options. With `allow_lists`, each shape option accepts comma-separated values.
// `--q/--k/--v/--dout` are listed in the help of a command that reads them (`run`) and hidden
// elsewhere, where they are accepted only to be refused with a message that says where they
// belong (refuse_input_files()).
void add_problem_options(CLI::App& command, ProblemOptions& options, bool allow_lists,
                         bool reads_input_files);

// Throws UsageError when `command`, which generates its inputs, was given input files.
void refuse_input_files(const ProblemOptions& options, const std::string& command);

// The product of all lists, in a stable order. Throws UsageError for invalid combinations
// (e.g. heads not a multiple of heads_kv), naming the option.
std::vector<Problem> expand_cases(const ProblemOptions& options);

// Throws UsageError when the tensors of the problem would hold more elements than memory can
// address (products that overflow int64, or above 2^40 elements), when its key splits do not
// fit it (more than one per 64 keys, or fp32), its page size or key lengths are not
// supported (a page size other than 0 or a power of two >= 16, lengths of the wrong count or
// outside [1, seq_k], either with fp32), or its context-parallel ranks meet what they do not
// combine with (a varlen batch, a page size, key lengths, key splits above 1).
void check_case_size(const Problem& p);

// For commands that compute one case: throws UsageError when an option was given more than once
// (there, each occurrence is one value).
void require_single_values(const ProblemOptions& options, const std::string& command);

// Throws UsageError when a forward-only option (--page-size, --cache-seqlens) meets a backward
// pass; `what` names the request (e.g. "--backward").
void require_forward_only(const Problem& p, const std::string& what);

// Non-empty text; `kind` ("DIR", "FILE", or "NUMBER" for a value that is no path) shows in
// --help and tells the shell completion what to offer.
CLI::Validator non_empty_value(const std::string& kind);

// The tokens of packed sequences of these lengths; nullopt where the sum overflows 64 bits.
std::optional<int64_t> token_sum(const std::vector<int64_t>& lengths);

// "LEFT,RIGHT" (as --window takes it) or "LEFT:RIGHT" (as the label and sweep files write it),
// each bound an integer >= -1. Throws UsageError naming `option`.
Window parse_window(const std::string& text, const std::string& option = "--window");

// --seqlens and --seqlens-k on `p`, whose packed shape (batch 1, the token totals) is known:
// throws UsageError for lengths that are not positive or do not sum to the tokens of the packed
// tensors, for --seqlens with a layout other than thd, and for thd without --seqlens.
void apply_varlen_options(const ProblemOptions& options, Problem& p);

// The window, softcap and ALiBi slopes of `options` (one value each) set on `p`, whose shape is
// known (and its sequences, for [batch, heads] slopes of a varlen batch). Throws UsageError for a bad window or a slopes file that is unreadable, not fp32, of a
// shape other than [heads] or [batch, heads], or holds a non-finite value.
void apply_variant_options(const ProblemOptions& options, Problem& p);

DType parse_dtype(const std::string& text);
Mask parse_mask(const std::string& text);
Layout parse_layout(const std::string& text);

}  // namespace cuflash::cli
