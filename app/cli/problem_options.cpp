#include "cli/problem_options.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>

#include "cli/exit_codes.h"
#include "cuflash/attention.h"
#include "cuflash/context_parallel/ring.h"
#include "cuflash/io/npy.h"

namespace cuflash::cli {

namespace {

const std::vector<std::string> kDtypeNames{"fp16", "bf16", "fp32"};
const std::vector<std::string> kMaskNames{"none", "causal", "causal-top-left"};
const std::vector<std::string> kLayoutNames{"bhsd", "bshd", "thd"};

// Accepts whole numbers >= 1 with a message that says so (CLI11's PositiveNumber prints a
// 300-digit upper bound).
const CLI::Validator kPositiveInteger(
    [](std::string& text) -> std::string {
      try {
        size_t used = 0;
        const long long value = std::stoll(text, &used);
        if (used == text.size() && value > 0) return {};
      } catch (const std::exception&) {
      }
      return "'" + text + "' is not a positive integer";
    },
    "POSITIVE");

// A scale or softcap: within the library's bounds, [2^-100, 2^100] (within_scale_bounds()).
const CLI::Validator kScoreUnit(
    [](std::string& text) -> std::string {
      try {
        size_t used = 0;
        const double value = std::stod(text, &used);
        if (used == text.size() && within_scale_bounds(value)) return {};
      } catch (const std::exception&) {
      }
      return "'" + text + "' is not a number within [2^-100, 2^100] (about 7.9e-31 to 1.3e30)";
    },
    "POSITIVE");

// A whole number of `what` (ranks, GPUs) from 1 to kMaxRanks.
CLI::Validator counted_up_to_max_ranks(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        try {
          size_t used = 0;
          const long long value = std::stoll(text, &used);
          if (used == text.size() && value >= 1 && value <= kMaxRanks) return {};
        } catch (const std::exception&) {
        }
        return "'" + text + "' is not a whole number of " + what + " from 1 to " +
               std::to_string(kMaxRanks);
      },
      "N");
}

// Context-parallel ranks, and GPUs (one rank each).
const CLI::Validator kRanks = counted_up_to_max_ranks("ranks");
const CLI::Validator kGpus = counted_up_to_max_ranks("GPUs");

// A whole number >= 0 that fits in T (its upper bound `bound` in words): CLI11 reads "-1" into a
// uint64_t as 2^64 - 1, and a number past an int64_t's range as its largest value.
template <typename T>
CLI::Validator non_negative_integer(const std::string& bound) {
  return CLI::Validator(
      [bound](std::string& text) -> std::string {
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        try {
          if (digits && std::stoull(text) <= uint64_t(std::numeric_limits<T>::max())) return {};
        } catch (const std::exception&) {
        }
        return "'" + text + "' is not a non-negative integer below " + bound;
      },
      "");  // no name of its own: --help shows the type, UINT or INT
}

const CLI::Validator kNonNegativeInteger = non_negative_integer<uint64_t>("2^64");
const CLI::Validator kNonNegativeInt64 = non_negative_integer<int64_t>("2^63");

template <typename T>
std::string join(const std::vector<T>& values) {
  std::ostringstream s;
  for (size_t i = 0; i < values.size(); ++i) s << (i ? "," : "") << values[i];
  return s.str();
}

// A shape option: with `allow_lists` a comma list (repeats add to it), else one value per
// occurrence, every occurrence kept so that require_single_values() can name a repeat. When
// `given` is not null, the option's long name is recorded there once it is given.
template <typename T>
CLI::Option* add_list(CLI::App& command, const std::string& name, std::vector<T>& values,
                      const std::string& help, bool allow_lists,
                      std::vector<std::string>* given = nullptr) {
  CLI::Option* option = command.add_option(name, values, help);
  if (!values.empty()) option->default_str(join(values));
  if (allow_lists) {
    option->delimiter(',');
  } else {
    option->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  if (given != nullptr) {
    const std::string long_name = "--" + option->get_lnames().front();
    option->each([given, long_name](const std::string&) {
      if (std::find(given->begin(), given->end(), long_name) == given->end()) {
        given->push_back(long_name);
      }
    });
  }
  return option;
}

// An option that takes one comma list per call (the lengths of a batch's sequences): a second
// occurrence is refused rather than appended (CLI11 would join them into one list).
CLI::Option* add_single_list(CLI::App& command, const std::string& name,
                             std::vector<int64_t>& values, const std::string& help) {
  auto occurrences = std::make_shared<int>(0);
  CLI::Option* option = command.add_option_function<std::vector<int64_t>>(
      name,
      [&values, occurrences, name](const std::vector<int64_t>& given) {
        if (++*occurrences > 1) {
          throw UsageError(name + " given " + std::to_string(*occurrences) +
                           " times; it takes one comma list (e.g. " + name + " 512,1000,77)");
        }
        values = given;
      },
      help);
  // (the callback then runs at each occurrence, with that occurrence's values alone)
  option->delimiter(',')->trigger_on_parse();
  return option;
}

}  // namespace

std::optional<int64_t> token_sum(const std::vector<int64_t>& lengths) {
  int64_t sum = 0;
  for (const int64_t length : lengths) {
    if (__builtin_add_overflow(sum, length, &sum)) return std::nullopt;
  }
  return sum;
}

DType parse_dtype(const std::string& text) {
  if (text == "fp16") return DType::fp16;
  if (text == "bf16") return DType::bf16;
  if (text == "fp32") return DType::fp32;
  throw UsageError("--dtype: unknown value '" + text + "' (expected fp16, bf16 or fp32)");
}

Mask parse_mask(const std::string& text) {
  if (text == "none") return Mask::none;
  if (text == "causal") return Mask::causal_bottom_right;
  if (text == "causal-top-left") return Mask::causal_top_left;
  throw UsageError("--mask: unknown value '" + text +
                   "' (expected none, causal or causal-top-left)");
}

Layout parse_layout(const std::string& text) {
  if (text == "bhsd") return Layout::bhsd;
  if (text == "bshd") return Layout::bshd;
  if (text == "thd") return Layout::thd;
  throw UsageError("--layout: unknown value '" + text + "' (expected bhsd, bshd or thd)");
}

Window parse_window(const std::string& text, const std::string& option) {
  const size_t separator = text.find_first_of(",:");
  const auto bound = [&](const std::string& item) -> int64_t {
    try {
      size_t used = 0;
      const long long value = std::stoll(item, &used);
      if (used == item.size() && value >= -1) return value;
    } catch (const std::exception&) {
    }
    throw UsageError(option + ": '" + text +
                     "' is not LEFT,RIGHT with each bound an integer >= -1 (-1: unbounded)");
  };
  if (separator == std::string::npos) bound("");  // throws
  return Window{bound(text.substr(0, separator)), bound(text.substr(separator + 1))};
}

namespace {

// Slopes from a .npy file: fp32, [heads] or [batch, heads] of the case (batch: its sequences in
// a varlen batch), every value finite.
std::vector<float> read_alibi_slopes(const std::string& path, AttentionShape s) {
  io::NpyArray array;
  try {
    array = io::read_npy(path, io::ReadOptions{false});
  } catch (const io::NpyError& error) {
    throw UsageError(std::string("--alibi-slopes: ") + error.what());
  }
  const std::vector<int64_t> heads{s.heads};
  const std::vector<int64_t> batch_heads{s.batch, s.heads};
  if (array.type != io::ElementType::f32 || (array.shape != heads && array.shape != batch_heads)) {
    throw UsageError("--alibi-slopes " + path + ": expected fp32 of shape [" +
                     std::to_string(s.heads) + "] or [" + std::to_string(s.batch) + ", " +
                     std::to_string(s.heads) + "], got " + io::to_string(array.type) + " [" +
                     join(array.shape) + "]");
  }
  std::vector<float> slopes(size_t(array.element_count()));
  std::memcpy(slopes.data(), array.bytes.data(), slopes.size() * sizeof(float));
  for (const float slope : slopes) {
    if (!std::isfinite(slope)) {
      throw UsageError("--alibi-slopes " + path + ": holds a non-finite value");
    }
  }
  return slopes;
}

std::vector<float> alibi_slopes_of(const ProblemOptions& o, const Problem& p) {
  AttentionShape s = p.shape;
  s.batch = p.sequences();
  if (!o.alibi_slopes_file.empty()) return read_alibi_slopes(o.alibi_slopes_file, s);
  return o.alibi ? alibi_default_slopes(s.heads) : std::vector<float>{};
}

// The tokens of the packed sequences `lengths` (the lengths given as `option`), refused where
// the sum overflows 64 bits.
int64_t packed_tokens(const char* option, const std::vector<int64_t>& lengths) {
  const std::optional<int64_t> tokens = token_sum(lengths);
  if (!tokens) {
    throw UsageError(std::string(option) + " " + join(lengths) + " sums past 2^63 tokens");
  }
  return *tokens;
}

}  // namespace

void apply_varlen_options(const ProblemOptions& o, Problem& p) {
  if (o.seqlens.empty()) {
    if (!o.seqlens_k.empty()) throw UsageError("--seqlens-k needs --seqlens");
    if (p.layout == Layout::thd) {
      throw UsageError("--layout thd needs --seqlens: the lengths of the packed sequences");
    }
    return;
  }
  if (p.layout != Layout::thd) {
    throw UsageError("--seqlens packs the sequences along the token axis: it needs --layout thd, "
                     "not " + std::string(to_string(p.layout)));
  }
  const std::vector<int64_t>& lengths_k = o.seqlens_k.empty() ? o.seqlens : o.seqlens_k;
  if (lengths_k.size() != o.seqlens.size()) {
    throw UsageError("--seqlens-k: " + std::to_string(lengths_k.size()) + " lengths for the " +
                     std::to_string(o.seqlens.size()) + " sequences of --seqlens");
  }
  const std::pair<const char*, const std::vector<int64_t>*> sides[] = {
      {"--seqlens", &o.seqlens}, {"--seqlens-k", &lengths_k}};
  for (const auto& [name, lengths] : sides) {
    for (const int64_t length : *lengths) {
      if (length < 1) {
        throw UsageError(std::string(name) + ": " + std::to_string(length) +
                         " is not a positive length");
      }
    }
  }
  // (The totals differ only where tensors come from files: generated ones hold the sums.)
  const auto check_total = [](const char* name, const std::vector<int64_t>& lengths,
                              const char* tensors, int64_t tokens) {
    const int64_t sum = packed_tokens(name, lengths);
    if (sum != tokens) {
      throw UsageError(std::string(name) + " " + join(lengths) + " sums to " + std::to_string(sum) +
                       " tokens, but " + tensors + " " + std::to_string(tokens));
    }
  };
  check_total("--seqlens", o.seqlens, "--q holds", p.shape.seq_q);
  check_total(o.seqlens_k.empty() ? "--seqlens" : "--seqlens-k", lengths_k, "--k and --v hold",
              p.shape.seq_k);
  p.seqlens_q = o.seqlens;
  p.seqlens_k = lengths_k;
}

void apply_variant_options(const ProblemOptions& o, Problem& p) {
  p.window = o.window.empty() ? Window{} : parse_window(o.window.front());
  p.softcap = o.softcap.empty() ? 0.0 : o.softcap.front();
  p.alibi_slopes = alibi_slopes_of(o, p);
}

std::string case_label(const Problem& p) {
  const AttentionShape& s = p.shape;
  // Top-left is the bottom-right mask when every sequence is square.
  const bool square = p.varlen() ? p.seqlens_q == p.seqlens_k : s.seq_q == s.seq_k;
  const char* causal = p.mask == Mask::none                  ? "0"
                       : p.mask == Mask::causal_bottom_right ? "1"
                       : square                              ? "1"   // top-left, square: the same
                                                             : "tl";
  std::ostringstream out;
  out << to_string(p.dtype) << "/b:" << s.batch << "/h:" << s.heads;
  if (s.heads_kv != s.heads) out << "/hkv:" << s.heads_kv;
  out << "/sq:" << s.seq_q << "/sk:" << s.seq_k << "/d:" << s.head_dim << "/causal:" << causal;
  if (p.window.bounded()) out << "/win:" << p.window.left << ":" << p.window.right;
  if (p.softcap > 0) out << "/softcap:" << p.softcap;
  if (!p.alibi_slopes.empty()) {
    const bool paper = p.alibi_slopes == alibi_default_slopes(s.heads);
    out << "/alibi:" << (paper ? "1" : "file");
  }
  if (p.layout == Layout::bshd) out << "/bshd";
  if (p.layout == Layout::thd) out << "/thd";
  for (size_t i = 0; i < p.seqlens_q.size(); ++i) {
    out << (i == 0 ? "/seqlens:" : "+") << p.seqlens_q[i];
  }
  if (p.seqlens_k != p.seqlens_q) {
    for (size_t i = 0; i < p.seqlens_k.size(); ++i) {
      out << (i == 0 ? "/seqlens-k:" : "+") << p.seqlens_k[i];
    }
  }
  if (p.splits != 0) out << "/splits:" << p.splits;
  if (p.page_size != 0) out << "/page:" << p.page_size;
  for (size_t i = 0; i < p.cache_seqlens.size(); ++i) {
    out << (i == 0 ? "/cache:" : "+") << p.cache_seqlens[i];
  }
  if (p.deterministic) out << "/deterministic";
  if (p.ranks != 0) out << "/ranks:" << p.ranks;
  if (p.gpus != 0) out << "/gpus:" << p.gpus;
  return out.str();
}

CLI::Validator non_empty_value(const std::string& kind) {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "an empty value is not accepted" : std::string();
      },
      kind);
}

void add_problem_options(CLI::App& command, ProblemOptions& o, bool allow_lists,
                         bool reads_input_files) {
  const std::string list = allow_lists ? " (comma list allowed)" : "";
  const CLI::Validator& positive = kPositiveInteger;
  std::vector<std::string>* shape = &o.shape_options_given;  // refused with input files
  CLI::Option* batch =
      add_list(command, "-b,--batch", o.batch, "Batch size" + list, allow_lists, shape);
  batch->check(positive);
  add_list(command, "--heads", o.heads, "Query heads" + list, allow_lists, shape)
      ->check(positive);
  add_list(command, "--heads-kv", o.heads_kv,
           "Key/value heads, dividing --heads (default: = heads)" + list, allow_lists, shape)
      ->check(positive);
  CLI::Option* seq =
      add_list(command, "-s,--seq", o.seq, "Query sequence length" + list, allow_lists, shape);
  seq->check(positive);
  CLI::Option* seq_k = add_list(command, "--seq-k", o.seq_k,
                                "Key/value sequence length (default: = seq)" + list, allow_lists,
                                shape);
  seq_k->check(positive);
  add_list(command, "-d,--head-dim", o.head_dim,
           "Head dimension (GPU: a multiple of 8 from 8 to 256; CPU: any)" + list, allow_lists,
           shape)
      ->check(positive);
  add_list(command, "--dtype", o.dtype, "Element type: fp16, bf16, fp32" + list, allow_lists,
           shape)->check(CLI::IsMember(kDtypeNames));
  CLI::Option* mask = add_list(command, "--mask", o.mask,
      "Mask: none, causal (bottom-right aligned, as FlashAttention), causal-top-left (as "
      "PyTorch is_causal)" + list, allow_lists);
  mask->check(CLI::IsMember(kMaskNames));
  command.add_flag("--causal", o.causal, "Shorthand for --mask causal")->excludes(mask);
  command.add_option("--scale", o.scale, "Softmax scale (default: 1/sqrt(head_dim))")
      ->check(kScoreUnit);
  CLI::Option* window = command.add_option(
      "--window", o.window,
      "Sliding window LEFT,RIGHT: query i sees keys i+off-LEFT .. i+off+RIGHT (off: the "
      "diagonal's offset, bottom-right unless causal-top-left); -1 leaves a side unbounded; under "
      "a causal mask RIGHT is 0" + std::string(allow_lists ? " (repeat for several)" : ""));
  window->type_name("LEFT,RIGHT")->expected(1);
  window->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_list(command, "--softcap", o.softcap,
           "Soft cap C > 0 of the scores: s -> C * tanh(s / C)" + list, allow_lists)
      ->check(kScoreUnit);
  CLI::Option* alibi =
      command.add_flag("--alibi", o.alibi, "ALiBi bias with the paper's slopes for the heads");
  command.add_option("--alibi-slopes", o.alibi_slopes_file,
                     "ALiBi bias with slopes from a .npy file: fp32 [heads] or [batch, heads]")
      ->check(CLI::ExistingFile)
      ->excludes(alibi);
  command.add_option("--seed", o.seed, "Seed of the generated standard-normal inputs")
      ->check(kNonNegativeInteger)
      ->capture_default_str();
  add_list(command, "--layout", o.layout,
           "Memory layout of tensors and files: bhsd = [batch, heads, seq, head_dim], "
           "bshd = [batch, seq, heads, head_dim], thd = [tokens, heads, head_dim] (the "
           "sequences of --seqlens packed one after another)" + list, allow_lists)
      ->check(CLI::IsMember(kLayoutNames));
  CLI::Option* seqlens =
      add_single_list(command, "--seqlens", o.seqlens,
                      "A variable-length batch in --layout thd: the query length of each "
                      "sequence (e.g. 512,1000,77), packed along the token axis; each "
                      "sequence is its own attention (masks, window and ALiBi align to its "
                      "lengths). Gives the batch and lengths: not with --batch, --seq, "
                      "--seq-k");
  seqlens->check(positive)->excludes(batch)->excludes(seq)->excludes(seq_k);
  add_single_list(command, "--seqlens-k", o.seqlens_k,
                  "Key lengths of the --seqlens sequences, one each (default: = --seqlens)")
      ->check(positive)
      ->needs(seqlens);
  add_list(command, "--splits", o.splits,
           "Key splits of the GPU forward (flash-decoding): 0 = automatic, 1 = none, N = "
           "exactly N, at most one per 64 keys; fp16 and bf16" +
               list,
           allow_lists)
      ->check(kNonNegativeInt64);
  command.add_flag("--deterministic", o.deterministic,
                   "GPU backward with dQ summed in a fixed order: dQ, dK, dV the same bits on "
                   "every run, at some speed (default: the faster arrival order)");
  command.add_option("--ranks", o.ranks,
                     "Context parallelism on one GPU: compute each case as N ranks of ring "
                     "attention would (2N zig-zag chunks of the sequences), their blocks one "
                     "after another on the library's kernels and their partial results merged; "
                     "the same attention, to check the partitioning and the merges. Dense cases "
                     "only: not with --seqlens, --page-size, --cache-seqlens or --splits above "
                     "1; the CPU backend computes the attention in one piece")
      ->check(kRanks);
  command.add_option("--gpus", o.gpus,
                     "Context parallelism over GPUs 0 to N-1 (ring attention through NCCL, one "
                     "rank per GPU): the inputs are copied into each rank's chunks, the K/V "
                     "shards pass around the ring while each GPU computes, the results are "
                     "copied back. Dense cases only, as --ranks; needs a build with NCCL")
      ->check(kGpus)
      ->excludes("--ranks");
  add_list(command, "--page-size", o.page_size,
           "Forward only: K and V in a paged cache of this many keys per page (a power of two "
           ">= 16: 16, 32, 64, 128, 256, ...), the pages in a shuffled order; the results equal "
           "the contiguous run's bit for bit where that run takes the split kernel too (decoding "
           "shapes, or --splits >= 2). 0 = contiguous; fp16 and bf16" +
               list,
           allow_lists)
      ->check(kNonNegativeInt64);
  add_single_list(command, "--cache-seqlens", o.cache_seqlens,
                  "Forward only: the keys of each batch entry, one per entry, each 1..seq_k "
                  "(keys past an entry's length do not exist for it; the causal mask aligns "
                  "to it); fp16 and bf16")
      ->check(positive);
  CLI::Option* files[] = {
      command.add_option("--q", o.q_file,
                         "Q from a .npy file (shape and dtype then come from files)"),
      command.add_option("--k", o.k_file, "K from a .npy file"),
      command.add_option("--v", o.v_file, "V from a .npy file"),
      command.add_option("--dout", o.dout_file,
                         "dO from a .npy file (backward; default: generated)")};
  for (CLI::Option* file : files) {
    if (reads_input_files) {
      file->check(CLI::ExistingFile);
    } else {
      // Out of the help, and unchecked: refuse_input_files() names them. (CLI11 gives a hidden
      // option no name in its own errors.)
      file->group("");
    }
  }
}

void refuse_input_files(const ProblemOptions& o, const std::string& command) {
  if (o.has_any_input_file()) {
    throw UsageError(command + " generates its inputs; --q/--k/--v/--dout belong to `cuflash run`");
  }
}

namespace {

// --page-size and --cache-seqlens against the case (check_case_size()).
void check_paging(const Problem& p) {
  if (p.varlen() && (p.page_size != 0 || !p.cache_seqlens.empty() || p.splits > 1)) {
    throw UsageError("--seqlens does not combine with --page-size, --cache-seqlens or "
                     "--splits > 1 (a varlen batch runs on the tiled kernels)");
  }
  const int64_t page = p.page_size;
  if (page != 0 && (page < 16 || (page & (page - 1)) != 0)) {
    throw UsageError("--page-size " + std::to_string(page) +
                     ": not supported; a page holds a power of two of at least 16 keys (16, 32, "
                     "64, 128, 256, ...)");
  }
  // A page beyond the next power of two of seq_k only adds unused rows (and, far beyond, sizes
  // that overflow).
  int64_t largest_page = 16;
  while (largest_page < p.shape.seq_k) largest_page *= 2;
  if (page > largest_page) {
    throw UsageError("--page-size " + std::to_string(page) + ": larger than the cache needs; at "
                     "most " + std::to_string(largest_page) + " for seq_k " +
                     std::to_string(p.shape.seq_k));
  }
  const std::vector<int64_t>& lengths = p.cache_seqlens;
  if (!lengths.empty() && static_cast<int64_t>(lengths.size()) != p.shape.batch) {
    throw UsageError("--cache-seqlens: " + std::to_string(lengths.size()) +
                     " lengths for batch " + std::to_string(p.shape.batch) +
                     "; give one per batch entry");
  }
  for (const int64_t length : lengths) {
    if (length < 1 || length > p.shape.seq_k) {
      throw UsageError("--cache-seqlens: " + std::to_string(length) + " is outside 1..seq_k (" +
                       std::to_string(p.shape.seq_k) + ") for " + case_label(p));
    }
  }
  const bool variants = p.window.bounded() || p.softcap > 0 || !p.alibi_slopes.empty();
  if (variants && (page != 0 || !lengths.empty() || p.splits > 1)) {
    const char* split_option = page != 0            ? "--page-size"
                               : !lengths.empty()   ? "--cache-seqlens"
                                                    : "--splits";
    throw UsageError(std::string(split_option) + " does not combine with --window, --softcap or "
                     "--alibi yet: the split-KV kernel applies none of them");
  }
  if ((page != 0 || !lengths.empty()) && p.dtype == DType::fp32) {
    throw UsageError(std::string(page != 0 ? "--page-size" : "--cache-seqlens") +
                     ": fp16 and bf16 only (the split kernel); not fp32");
  }
}

// The option of a case that context parallelism (--ranks, --gpus) cannot take, or null: it
// splits one dense sequence per batch entry, each block unsplit on contiguous K/V.
const char* not_context_parallel(const Problem& p) {
  return p.varlen()                  ? "--seqlens (layout thd)"
         : p.page_size != 0          ? "--page-size"
         : !p.cache_seqlens.empty()  ? "--cache-seqlens"
         : p.splits > 1              ? "--splits above 1"
                                     : nullptr;
}

// --ranks against the case (check_case_size()).
void check_ranks(const Problem& p) {
  if (p.ranks == 0) return;
  if (p.ranks < 1 || p.ranks > kMaxRanks) {
    throw UsageError("--ranks " + std::to_string(p.ranks) + ": not a number of ranks from 1 to " +
                     std::to_string(kMaxRanks));
  }
  if (const char* other = not_context_parallel(p)) {
    throw UsageError("--ranks does not combine with " + std::string(other) +
                     ": context parallelism on one GPU takes one dense sequence per batch "
                     "entry, each block unsplit on contiguous K/V");
  }
}

// --gpus against the case and the machine: a dense sequence as for --ranks, a build with NCCL,
// and no more GPUs than there are (where the driver can count them; without a GPU the
// computation itself fails, exit 3).
void check_gpus(const Problem& p) {
  if (p.gpus == 0) return;
  const char* other = p.ranks != 0 ? "--ranks (or the sweep key ranks)" : not_context_parallel(p);
  if (other != nullptr) {
    throw UsageError("--gpus does not combine with " + std::string(other) +
                     ": context parallelism takes one dense sequence per batch entry, each "
                     "block unsplit on contiguous K/V");
  }
  if (!context_parallel::ring_available()) {
    throw UsageError("--gpus: this build has no NCCL (configure with -DCUFLASH_NCCL=ON, NCCL "
                     "installed or NCCL_ROOT pointing at it)");
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && p.gpus > count) {
    throw UsageError("--gpus " + std::to_string(p.gpus) + ": this machine has " +
                     std::to_string(count) + (count == 1 ? " GPU" : " GPUs"));
  }
}

// --splits against the case, after check_paging(), which refuses it with --seqlens (whose
// packed seq_k would otherwise be counted here as one sequence's keys).
void check_splits(const Problem& p) {
  const int64_t most = max_forward_splits(p.shape);
  if (p.splits > most) {
    throw UsageError("--splits " + std::to_string(p.splits) + ": " + case_label(p) + " has " +
                     std::to_string(most) + (most == 1 ? " key block" : " key blocks") +
                     " of 64 keys (seq_k " + std::to_string(p.shape.seq_k) +
                     "), the most splits it takes");
  }
  if (p.splits > 1 && p.dtype == DType::fp32) {
    throw UsageError("--splits " + std::to_string(p.splits) +
                     ": fp32 runs unsplit; key splits take fp16 or bf16");
  }
}

}  // namespace

void require_forward_only(const Problem& p, const std::string& what) {
  if (p.page_size != 0) {
    throw UsageError("--page-size: forward only; " + what + " asks for the backward pass");
  }
  if (!p.cache_seqlens.empty()) {
    throw UsageError("--cache-seqlens: forward only; " + what + " asks for the backward pass");
  }
}

void check_case_size(const Problem& p) {
  // 2^40 elements is 8 TiB as float64: beyond any host or device this tool runs on, and far
  // below int64 overflow in every product the tool forms later.
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  const AttentionShape& s = p.shape;
  const auto elements = [&](int64_t heads, int64_t seq) {
    int64_t n = 1;
    for (const int64_t factor : {s.batch, heads, seq, s.head_dim}) {
      if (__builtin_mul_overflow(n, factor, &n) || n > kMaxElements) return kMaxElements + 1;
    }
    return n;
  };
  if (elements(s.heads, s.seq_q) > kMaxElements || elements(s.heads_kv, s.seq_k) > kMaxElements) {
    throw UsageError("shape " + case_label(p) +
                     " is too large: more than 2^40 elements per tensor");
  }
  check_ranks(p);
  check_gpus(p);
  check_paging(p);
  check_splits(p);
}

void require_single_values(const ProblemOptions& o, const std::string& command) {
  const auto check = [&](const auto& values, const char* name) {
    if (values.size() > 1) {
      // A window is itself two numbers: several are given by repeating the option.
      const std::string how = std::string(name) == "--window"
                                  ? "repeat --window with verify or bench"
                                  : "use a comma list with verify or bench: " +
                                        std::string(name) + " " + join(values);
      throw UsageError(std::string(name) + " given " + std::to_string(values.size()) +
                       " times; " + command + " takes one value (for several, " + how + ")");
    }
  };
  check(o.batch, "--batch");
  check(o.heads, "--heads");
  check(o.heads_kv, "--heads-kv");
  check(o.seq, "--seq");
  check(o.seq_k, "--seq-k");
  check(o.head_dim, "--head-dim");
  check(o.dtype, "--dtype");
  check(o.mask, "--mask");
  check(o.layout, "--layout");
  check(o.splits, "--splits");
  check(o.page_size, "--page-size");
  check(o.window, "--window");
  check(o.softcap, "--softcap");
}

std::vector<Problem> expand_cases(const ProblemOptions& o) {
  std::vector<std::string> masks = o.mask;
  if (o.causal) masks = {"causal"};
  std::vector<Window> windows;
  for (const std::string& text : o.window) windows.push_back(parse_window(text));
  if (windows.empty()) windows.push_back(Window{});
  const std::vector<double> softcaps = o.softcap.empty() ? std::vector<double>{0.0} : o.softcap;
  // The product counted before it is made: a few long lists can name more cases than memory
  // holds (bench refuses sweep files past the same count).
  size_t count = 1;
  for (const size_t size :
       {o.dtype.size(), o.head_dim.size(), masks.size(), o.batch.size(), o.heads.size(),
        std::max<size_t>(o.heads_kv.size(), 1), o.seq.size(), std::max<size_t>(o.seq_k.size(), 1),
        o.layout.size(), o.splits.size(), o.page_size.size(), windows.size(), softcaps.size()}) {
    if (__builtin_mul_overflow(count, size, &count) || count > kMaxCases) {
      throw UsageError("the options' lists make more than " + std::to_string(kMaxCases) +
                       " cases; give shorter lists");
    }
  }
  std::vector<Problem> cases;
  for (const std::string& dtype : o.dtype)
    for (int64_t head_dim : o.head_dim)
      for (const std::string& mask : masks)
        for (int64_t batch : o.batch)
          for (int64_t heads : o.heads)
            for (int64_t heads_kv : o.heads_kv.empty() ? std::vector<int64_t>{heads} : o.heads_kv)
              for (int64_t seq_q : o.seq)
                for (int64_t seq_k : o.seq_k.empty() ? std::vector<int64_t>{seq_q} : o.seq_k)
                  for (const std::string& layout : o.layout)
                    for (int64_t splits : o.splits)
                    for (int64_t page_size : o.page_size) {
                    if (heads % heads_kv != 0) {
                      throw UsageError("--heads-kv: " + std::to_string(heads_kv) +
                                       " does not divide --heads " + std::to_string(heads));
                    }
                    Problem p;
                    p.shape = AttentionShape{batch, heads, heads_kv, seq_q, seq_k, head_dim};
                    if (!o.seqlens.empty()) {  // the packed tensors of a varlen batch
                      p.shape.batch = 1;
                      p.shape.seq_q = packed_tokens("--seqlens", o.seqlens);
                      p.shape.seq_k = o.seqlens_k.empty()
                                          ? p.shape.seq_q
                                          : packed_tokens("--seqlens-k", o.seqlens_k);
                    }
                    p.dtype = parse_dtype(dtype);
                    p.mask = parse_mask(mask);
                    p.scale = o.scale.value_or(0.0);
                    p.layout = parse_layout(layout);
                    p.splits = splits;
                    p.page_size = page_size;
                    p.cache_seqlens = o.cache_seqlens;
                    p.deterministic = o.deterministic;
                    p.ranks = static_cast<int>(o.ranks);  // at most kMaxRanks (kRanks)
                    p.gpus = static_cast<int>(o.gpus);    // at most kMaxRanks (kGpus)
                    apply_varlen_options(o, p);
                    p.alibi_slopes = alibi_slopes_of(o, p);
                    // The variants vary fastest.
                    for (const Window& window : windows) {
                      for (const double softcap : softcaps) {
                        p.window = window;
                        p.softcap = softcap;
                        check_case_size(p);
                        cases.push_back(p);
                      }
                    }
                  }
  return cases;
}

}  // namespace cuflash::cli
