// Named sweeps: text files that list benchmark cases, found by name in share/sweeps (installed
// or in the source tree) or given as a path; and the names cases carry in every output.
//
// Sweep file format (share/docs/bench.md has the full description):
//   # a comment runs to the end of the line; blank lines are ignored
//   b=1 h=8 sq=1024,4096 d=64,128 dtype=fp16,bf16 mask=none,causal
// One line is one rule: whitespace-separated key=value pairs; a comma list makes the line expand
// to the product of its lists; a line with single values is one explicit case. Keys and defaults
// (the same as the command-line options): b (1), h (8), hkv (= h), sq (1024), sk (= sq),
// d (64), dtype (fp16), mask (none), window (LEFT:RIGHT, -1:-1 for none), softcap (0: none),
// alibi (0 or 1: the paper's slopes), layout (bhsd), splits (0: automatic), page_size (0:
// contiguous K/V), deterministic (0; 1: the deterministic backward), ranks (0; N: context
// parallelism on one GPU with N ranks). Cases come out in file order; within a line the product
// runs dtype, d, mask, b, h, hkv, sq, sk, window, softcap, alibi, layout, splits, page_size,
// deterministic, ranks, the last varying fastest.
#pragma once

#include <string>
#include <vector>

#include "cli/problem_options.h"
#include "cuflash/problem.h"

namespace cuflash::bench {

// Expands the text of a sweep file. `origin` names it in errors ("fa.txt:12: ..."), which are
// thrown as cli::UsageError.
std::vector<Problem> parse_sweep(const std::string& text, const std::string& origin);

// One case as a sweep line that parse_sweep() reads back as that case (every key given):
// "b=1 h=8 hkv=8 sq=1024 sk=1024 d=64 dtype=fp16 mask=causal layout=bhsd", plus window, softcap,
// alibi=1, splits, page_size, deterministic=1 and ranks when set; a varlen batch leaves out b,
// sq, sk and layout and ends in "seqlens=L0+L1+..." (and seqlens_k when the keys differ). The
// scale, cache lengths and ALiBi slopes other than the paper's are not part of it.
std::string sweep_line(const Problem& p);

// Where sweep names are looked up, in order: the folder installed next to the binary
// (<prefix>/share/cuflash/sweeps for <prefix>/bin/cuflash), then the source tree's share/sweeps
// when the build recorded it. Folders that do not exist are left out.
std::vector<std::string> sweep_search_dirs();

// A value with a '/' or a '.' is a path; anything else is a name looked up as NAME.txt in
// `search_dirs`. Throws cli::UsageError naming --sweep when nothing is found (listing the
// available names).
std::string resolve_sweep(const std::string& name_or_path,
                          const std::vector<std::string>& search_dirs);

// Reads and expands a sweep file; errors name the file.
std::vector<Problem> load_sweep(const std::string& path);

// Keeps the cases whose name (cli::case_label) matches the ECMAScript regular expression
// `pattern` (a search, not a full match). Throws cli::UsageError naming --filter for a bad
// pattern.
std::vector<Problem> filter_cases(const std::vector<Problem>& cases,
                                  const std::string& pattern);

// A benchmark's name: the pass and the case's name (cli::case_label, the name `run` and `verify`
// use too), e.g. "fwd/bf16/b:1/h:8/sq:4096/sk:4096/d:64/causal:1".
std::string run_name(const std::string& pass, const Problem& p);

}  // namespace cuflash::bench
