#include "bench/sweep.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <regex>
#include <sstream>

#include "cli/exit_codes.h"
#include "cuflash/attention.h"
#include "cuflash/io/printable.h"

// The source tree's share/sweeps, recorded by CMake so a binary in a build folder finds the
// named sweeps without being installed.
#ifndef CUFLASH_SOURCE_SWEEP_DIR
#define CUFLASH_SOURCE_SWEEP_DIR ""
#endif

namespace cuflash::bench {

namespace fs = std::filesystem;
using cli::UsageError;

namespace {

// The filter's stack (filter_cases): a base for the matcher's own frames, and per character of
// the longest name, per character of the pattern (the recursion deepens with the pattern's
// nesting as well as the name's length: 270 bytes a name character measured for ".*", over 7
// KiB for thirty nested groups), at most kFilterMaxStack.
constexpr size_t kFilterBaseStack = size_t{64} << 20;
constexpr size_t kFilterStackPerCharPair = 256;
constexpr size_t kFilterMaxStack = size_t{1} << 40;

size_t filter_stack_bytes(size_t longest_name, size_t pattern_length) {
  const double wanted = double(kFilterBaseStack) + double(longest_name) *
                                                       double(kFilterStackPerCharPair) *
                                                       double(pattern_length + 16);
  return wanted >= double(kFilterMaxStack) ? kFilterMaxStack : size_t(wanted);
}

// A thread's task for run_filter_on_stack: the work, and what it threw.
struct StackTask {
  const std::function<void()>* work;
  std::exception_ptr error;
};

void* run_stack_task(void* arg) {
  auto* task = static_cast<StackTask*>(arg);
  try {
    (*task->work)();
  } catch (...) {
    task->error = std::current_exception();
  }
  return nullptr;
}

// Runs `work` on a thread of its own with a stack of `bytes` (reserved, touched only as used)
// and rethrows what it threw (see filter_cases).
void run_filter_on_stack(size_t bytes, const std::function<void()>& work) {
  StackTask task{&work, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int failed = pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  if (failed == 0) failed = pthread_create(&thread, &attr, run_stack_task, &task);
  pthread_attr_destroy(&attr);
  if (failed != 0) {
    throw UsageError("--filter: cannot start a thread with a " + std::to_string(bytes >> 20) +
                     " MiB stack for the case names (" + std::strerror(failed) + ")");
  }
  pthread_join(thread, nullptr);  // cannot fail: a joinable thread of our own, joined once
  if (task.error) std::rethrow_exception(task.error);
}

constexpr const char* kSweepExtension = ".txt";
// At most this many bytes of a sweep file's text in a message: the messages' own words are
// shorter; a binary file's "line" may not be.
constexpr size_t kMaxQuoted = 300;

// The keys of a sweep line, in the order the product runs (outermost first).
const std::vector<std::string> kKeys{"dtype",  "d",       "mask",  "b",      "h",
                                     "hkv",    "sq",      "sk",    "seqlens", "seqlens_k",
                                     "window", "softcap", "alibi",  "layout",  "splits",
                                     "page_size", "deterministic", "ranks"};
const std::vector<std::string> kDtypes{"fp16", "bf16", "fp32"};
const std::vector<std::string> kMasks{"none", "causal", "causal-top-left"};
const std::vector<std::string> kLayouts{"bhsd", "bshd", "thd"};
// The value of seqlens and seqlens_k for a dense case.
const std::string kNoSeqlens = "none";
const std::vector<std::string> kSwitches{"0", "1"};  // alibi, deterministic

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

// One line's values per key; keys the line leaves out get their defaults.
using LineValues = std::map<std::string, std::vector<std::string>>;

class LineParser {
 public:
  explicit LineParser(std::string where) : where_(std::move(where)) {}

  LineValues parse(const std::string& line) const {
    LineValues values;
    std::istringstream tokens(line);
    std::string token;
    while (tokens >> token) {
      const size_t eq = token.find('=');
      if (eq == std::string::npos || eq == 0) fail("expected key=value, got '" + token + "'");
      const std::string key = token.substr(0, eq);
      if (!contains(kKeys, key)) {
        fail("unknown key '" + key + "' (expected one of " + join(kKeys, ", ") + ")");
      }
      if (values.count(key)) fail("key '" + key + "' given twice");
      values[key] = list(key, token.substr(eq + 1));
    }
    return values;
  }

  int64_t integer(const std::string& key, const std::string& text) const {
    try {
      size_t used = 0;
      const long long value = std::stoll(text, &used);
      if (used == text.size() && value > 0) return value;
    } catch (const std::exception&) {
    }
    fail(key + ": '" + text + "' is not a positive integer");
  }

  // splits: 0 (automatic) or more; page_size: 0 (contiguous) or more.
  int64_t non_negative(const std::string& key, const std::string& text) const {
    return text == "0" ? 0 : integer(key, text);
  }

  // ranks: 0 (the attention in one piece) or a number of ranks up to cli::kMaxRanks.
  int ranks(const std::string& text) const {
    const int64_t value = non_negative("ranks", text);
    if (value > cli::kMaxRanks) {
      fail("ranks: '" + text + "' is above " + std::to_string(cli::kMaxRanks));
    }
    return static_cast<int>(value);
  }

  Window window(const std::string& text) const {
    try {
      return cli::parse_window(text, "window");
    } catch (const UsageError&) {  // its message shows the command line's LEFT,RIGHT
      fail("window: '" + text + "' is not LEFT:RIGHT with each bound an integer >= -1 (-1: "
           "unbounded)");
    }
  }

  // A softcap: 0 (off) or within the library's bounds, [2^-100, 2^100] (within_scale_bounds()).
  double softcap(const std::string& text) const {
    try {
      size_t used = 0;
      const double value = std::stod(text, &used);
      if (used == text.size() && (value == 0 || within_scale_bounds(value))) {
        return value;
      }
    } catch (const std::exception&) {
    }
    fail("softcap: '" + text + "' is not 0 (off) or a number within [2^-100, 2^100]");
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw UsageError("--sweep " + where_ + ": " + io::printable(message, kMaxQuoted));
  }

 private:
  std::vector<std::string> list(const std::string& key, const std::string& text) const {
    const std::vector<std::string> items = split(text, ',');
    if (items.empty()) fail(key + ": empty value");
    for (const std::string& item : items) {
      if (item.empty()) fail(key + ": empty item in '" + text + "'");
      check_item(key, item);
    }
    return items;
  }

  void check_item(const std::string& key, const std::string& item) const {
    const auto check_member = [&](const std::vector<std::string>& allowed) {
      if (!contains(allowed, item)) {
        fail(key + ": unknown value '" + item + "' (expected " + join(allowed, ", ") + ")");
      }
    };
    if (key == "dtype") return check_member(kDtypes);
    if (key == "mask") return check_member(kMasks);
    if (key == "layout") return check_member(kLayouts);
    if (key == "alibi" || key == "deterministic") return check_member(kSwitches);
    if (key == "window") return (void)window(item);
    if (key == "softcap") return (void)softcap(item);
    if (key == "splits" || key == "page_size") return (void)non_negative(key, item);
    if (key == "ranks") return (void)ranks(item);
    if (key == "seqlens" || key == "seqlens_k") return (void)lengths(key, item);
    integer(key, item);
  }

 public:
  // A varlen batch's lengths, "L0+L1+..." (each a positive integer); empty for "none".
  std::vector<int64_t> lengths(const std::string& key, const std::string& item) const {
    std::vector<int64_t> values;
    if (item == kNoSeqlens) return values;
    for (const std::string& part : split(item, '+')) values.push_back(integer(key, part));
    return values;
  }

  // The tokens of the packed sequences `lengths` (of `key`), refused where the sum overflows.
  int64_t packed_tokens(const std::string& key, const std::vector<int64_t>& lengths) const {
    const std::optional<int64_t> tokens = cli::token_sum(lengths);
    if (!tokens) fail(key + ": the lengths sum past 2^63 tokens");
    return *tokens;
  }

 private:

  std::string where_;
};

// A case the command line would refuse (cli::check_case_size's rules: sizes past 2^40
// elements, forced key splits, a page size or context-parallel ranks it cannot take), as a line
// error.
void check_case(const Problem& p, const LineParser& parser) {
  try {
    cli::check_case_size(p);
  } catch (const UsageError& e) {
    parser.fail(e.what());
  }
}

// One case of a line: a value for every key of kKeys.
using CaseValues = std::map<std::string, std::string>;

// The value of a key the line does not give: the command line's default; hkv follows h, and sk
// follows sq.
std::string default_value(const std::string& key, const CaseValues& chosen) {
  if (key == "hkv") return chosen.at("h");
  if (key == "sk") return chosen.at("sq");
  static const std::map<std::string, std::string> kDefaults{
      {"dtype", "fp16"}, {"d", "64"},          {"mask", "none"},  {"b", "1"},
      {"h", "8"},        {"sq", "1024"},       {"window", "-1:-1"}, {"softcap", "0"},
      {"alibi", "0"},    {"layout", "bhsd"},   {"splits", "0"},   {"page_size", "0"},
      {"deterministic", "0"}, {"ranks", "0"}, {"seqlens", kNoSeqlens},
      {"seqlens_k", kNoSeqlens}};
  return kDefaults.at(key);
}

// Calls `emit` for every combination of the line's lists, keys in kKeys order from `key_index`
// on, the last key varying fastest.
void for_each_combination(const LineValues& values, size_t key_index, CaseValues& chosen,
                          const std::function<void(const CaseValues&)>& emit) {
  if (key_index == kKeys.size()) return emit(chosen);
  const std::string& key = kKeys[key_index];
  const auto given = values.find(key);
  const std::vector<std::string> items = given != values.end()
                                             ? given->second
                                             : std::vector<std::string>{default_value(key, chosen)};
  for (const std::string& item : items) {
    chosen[key] = item;
    for_each_combination(values, key_index + 1, chosen, emit);
  }
}

Problem case_of(const CaseValues& v, const LineParser& parser) {
  const auto num = [&](const char* key) { return parser.integer(key, v.at(key)); };
  Problem p;
  p.shape.batch = num("b");
  p.shape.heads = num("h");
  p.shape.heads_kv = num("hkv");
  p.shape.seq_q = num("sq");
  p.shape.seq_k = num("sk");
  p.shape.head_dim = num("d");
  p.mask = cli::parse_mask(v.at("mask"));
  p.dtype = cli::parse_dtype(v.at("dtype"));
  p.layout = cli::parse_layout(v.at("layout"));
  p.window = parser.window(v.at("window"));
  p.softcap = parser.softcap(v.at("softcap"));
  if (v.at("alibi") == "1") p.alibi_slopes = alibi_default_slopes(p.shape.heads);
  if (p.shape.heads % p.shape.heads_kv != 0) {
    parser.fail("hkv " + v.at("hkv") + " does not divide h " + v.at("h"));
  }
  p.splits = parser.non_negative("splits", v.at("splits"));
  p.page_size = parser.non_negative("page_size", v.at("page_size"));
  p.seqlens_q = parser.lengths("seqlens", v.at("seqlens"));
  p.seqlens_k = parser.lengths("seqlens_k", v.at("seqlens_k"));
  if (p.varlen()) {  // the packed tensors (expand_line() kept b, sq, sk out)
    if (p.seqlens_k.empty()) p.seqlens_k = p.seqlens_q;
    if (p.seqlens_k.size() != p.seqlens_q.size()) {
      parser.fail("seqlens_k " + v.at("seqlens_k") + " does not give one length per sequence "
                  "of seqlens " + v.at("seqlens"));
    }
    p.layout = Layout::thd;
    p.shape.batch = 1;
    p.shape.seq_q = parser.packed_tokens("seqlens", p.seqlens_q);
    p.shape.seq_k = parser.packed_tokens("seqlens_k", p.seqlens_k);
  } else if (!p.seqlens_k.empty()) {
    parser.fail("seqlens_k needs seqlens");
  } else if (p.layout == Layout::thd) {
    parser.fail("layout thd needs seqlens (the lengths of the packed sequences)");
  }
  p.deterministic = v.at("deterministic") == "1";
  p.ranks = parser.ranks(v.at("ranks"));
  check_case(p, parser);
  return p;
}

// The product of one line's lists, in kKeys order.
void expand_line(const LineValues& values, const LineParser& parser,
                 std::vector<Problem>& cases) {
  if (values.count("seqlens")) {
    for (const char* key : {"b", "sq", "sk"}) {
      if (values.count(key)) {
        parser.fail(std::string("seqlens gives the batch and the lengths: drop ") + key);
      }
    }
    const auto layouts = values.find("layout");
    if (layouts != values.end() &&
        (layouts->second.size() != 1 || layouts->second.front() != "thd")) {
      parser.fail("seqlens packs the sequences in layout thd; drop layout or give thd");
    }
  }
  // The product of the lists, counted before it is made: a line of a few long lists can name
  // more cases than memory holds, and no run could time them.
  size_t combinations = 1;
  for (const auto& [key, items] : values) {
    if (__builtin_mul_overflow(combinations, items.size(), &combinations) ||
        cases.size() + combinations > cli::kMaxCases) {
      parser.fail("the file's lines name more than " + std::to_string(cli::kMaxCases) +
                  " cases; split the sweep");
    }
  }
  CaseValues chosen;
  for_each_combination(values, 0, chosen,
                       [&](const CaseValues& v) { cases.push_back(case_of(v, parser)); });
}

}  // namespace

std::vector<Problem> parse_sweep(const std::string& text, const std::string& origin) {
  std::vector<Problem> cases;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const size_t comment = line.find('#');
    if (comment != std::string::npos) line.erase(comment);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const LineParser parser(origin + ":" + std::to_string(number));
    expand_line(parser.parse(line), parser, cases);
  }
  if (cases.empty()) throw UsageError("--sweep " + origin + ": the file lists no cases");
  return cases;
}

std::vector<std::string> sweep_search_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path().parent_path() / "share/cuflash/sweeps").string());
  if (std::string(CUFLASH_SOURCE_SWEEP_DIR).size() > 0) dirs.emplace_back(CUFLASH_SOURCE_SWEEP_DIR);
  dirs.erase(std::remove_if(dirs.begin(), dirs.end(),
                            [](const std::string& d) { return !fs::is_directory(d); }),
             dirs.end());
  return dirs;
}

namespace {

std::vector<std::string> available_names(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == kSweepExtension) names.push_back(entry.path().stem());
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace

std::string resolve_sweep(const std::string& name_or_path,
                          const std::vector<std::string>& search_dirs) {
  const bool is_path = name_or_path.find_first_of("/.") != std::string::npos;
  if (is_path) {
    std::error_code error;
    const fs::file_status status = fs::status(name_or_path, error);
    if (!fs::is_regular_file(status)) {
      throw UsageError("--sweep " + name_or_path + ": " +
                       (!fs::exists(status)        ? "no such file"
                        : fs::is_directory(status) ? "is a directory, not a sweep file"
                                                   : "is not a regular file"));
    }
    return name_or_path;
  }
  for (const std::string& dir : search_dirs) {
    const fs::path candidate = fs::path(dir) / (name_or_path + kSweepExtension);
    if (fs::is_regular_file(candidate)) return candidate.string();
  }
  const std::vector<std::string> names = available_names(search_dirs);
  throw UsageError("--sweep " + name_or_path + ": no sweep of that name (" +
                   (names.empty() ? std::string("no sweep folder found; give a file path")
                                  : "available: " + join(names, ", ")) +
                   ")");
}

std::vector<Problem> load_sweep(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--sweep " + path + ": cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sweep(text.str(), path);
}

namespace {

// `pattern` without a leading ".*" (or lazy ".*?"), which cannot change whether a search finds
// a match (it may match nothing, and a name holds no newline), but which the standard library's
// matcher retries from every start: ".*zzz" on a varlen case of 20,000 sequences took 70 s.
std::string search_pattern(std::string pattern) {
  const auto quantified = [&](size_t at) {
    return at < pattern.size() && std::strchr("*+?{", pattern[at]) != nullptr;
  };
  while (pattern.rfind(".*", 0) == 0) {
    const size_t end = pattern.size() > 2 && pattern[2] == '?' ? 3 : 2;
    if (quantified(end)) break;
    pattern.erase(0, end);
  }
  return pattern;
}

}  // namespace

std::vector<Problem> filter_cases(const std::vector<Problem>& cases,
                                  const std::string& pattern) {
  std::regex re;
  try {
    (void)std::regex(pattern, std::regex::ECMAScript);  // the pattern as given, for its errors
    re = std::regex(search_pattern(pattern), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError("--filter '" + pattern + "': not a valid regular expression (" + e.what() +
                     ")");
  }
  std::vector<std::string> labels;
  size_t longest = 0;
  for (const Problem& c : cases) {
    labels.push_back(cli::case_label(c));
    longest = std::max(longest, labels.back().size());
  }
  std::vector<Problem> kept;
  // The standard library's matcher recurses once or more per character: a varlen case of
  // 10,000 sequences (a name of about 50,000 characters) overflowed the main thread's 8 MiB.
  run_filter_on_stack(filter_stack_bytes(longest, pattern.size()), [&] {
    try {
      for (size_t i = 0; i < cases.size(); ++i) {
        if (std::regex_search(labels[i], re)) kept.push_back(cases[i]);
      }
    } catch (const std::regex_error& e) {  // the matcher's own limits (error_complexity)
      throw UsageError("--filter '" + pattern + "': cannot be matched (" + e.what() + ")");
    }
  });
  return kept;
}

std::string sweep_line(const Problem& p) {
  const AttentionShape& s = p.shape;
  std::ostringstream line;
  if (p.varlen()) {  // seqlens (at the end) gives the batch, the lengths and the layout
    line << "h=" << s.heads << " hkv=" << s.heads_kv << " d=" << s.head_dim
         << " dtype=" << to_string(p.dtype) << " mask=" << to_string(p.mask);
  } else {
    line << "b=" << s.batch << " h=" << s.heads << " hkv=" << s.heads_kv << " sq=" << s.seq_q
         << " sk=" << s.seq_k << " d=" << s.head_dim << " dtype=" << to_string(p.dtype)
         << " mask=" << to_string(p.mask) << " layout=" << to_string(p.layout);
  }
  if (p.window.bounded()) line << " window=" << p.window.left << ":" << p.window.right;
  if (p.softcap > 0) line << " softcap=" << std::setprecision(17) << p.softcap;
  // Only the paper's slopes have a sweep form; bench --profile refuses slopes from a file.
  if (!p.alibi_slopes.empty()) line << " alibi=1";
  if (p.splits != 0) line << " splits=" << p.splits;
  if (p.page_size != 0) line << " page_size=" << p.page_size;
  if (p.deterministic) line << " deterministic=1";
  if (p.ranks != 0) line << " ranks=" << p.ranks;
  const auto lengths = [&line](const char* key, const std::vector<int64_t>& values) {
    line << " " << key << "=";
    for (size_t i = 0; i < values.size(); ++i) line << (i ? "+" : "") << values[i];
  };
  if (p.varlen()) lengths("seqlens", p.seqlens_q);
  if (p.varlen() && p.seqlens_k != p.seqlens_q) lengths("seqlens_k", p.seqlens_k);
  return line.str();
}

std::string run_name(const std::string& pass, const Problem& p) {
  return pass + "/" + cli::case_label(p);
}

}  // namespace cuflash::bench
