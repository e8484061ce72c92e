#include "cli/usage_errors.h"

#include <algorithm>
#include <cctype>

namespace cuflash::cli {

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring characters, each one edit.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

bool is_number(const std::string& word) {
  return word.size() > 1 && word[0] == '-' &&
         (std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.');
}

bool looks_like_option(const std::string& word) {
  return word.size() > 1 && word[0] == '-' && !is_number(word);
}

// "--seq=64" -> "--seq"; "-s64" -> "-s".
std::string option_part(const std::string& word) {
  if (word.rfind("--", 0) == 0) return word.substr(0, word.find('='));
  return word.substr(0, 2);
}

// Every name of the options --help shows: "--seq", "-s", ...
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  return names;
}

bool has_option(const CLI::App& app, const std::string& name) {
  const std::vector<std::string> names = option_names(app);
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string join_names(const std::vector<std::string>& names, const std::string& last) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " " + last + " " : ", ") + names[i];
  }
  return out;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : visible_subcommands(app)) names.push_back(sub->get_name());
  return names;
}

// Why a subcommand lacks an option that users reach for.
std::string known_hint(const std::string& subcommand, const std::string& option) {
  if (subcommand == "verify" && option == "--backend") {
    return "verify always compares the GPU kernels with the float64 CPU reference, so it has no "
           "--backend; `cuflash run --backend cpu` computes on the CPU alone";
  }
  return {};
}

// What to say after "unknown option 'NAME'": the subcommands that have it, else the closest name.
std::string option_hint(const CLI::App& app, const CLI::App* context, const std::string& name) {
  if (context != nullptr) {
    const std::string hint = known_hint(context->get_name(), name);
    if (!hint.empty()) return hint;
  }
  std::vector<std::string> owners;
  for (const CLI::App* sub : visible_subcommands(app)) {
    if (sub != context && has_option(*sub, name)) owners.push_back(sub->get_name());
  }
  if (!owners.empty()) {
    return "it is an option of " + join_names(owners, "and") +
           (context == nullptr ? ": give it after the subcommand" : "");
  }
  const std::string near = closest_name(name, option_names(context ? *context : app));
  if (!near.empty()) return "did you mean '" + near + "'?";
  return "see " + std::string(context ? "cuflash " + context->get_name() + " --help"
                                      : "cuflash --help");
}

// CLI11's "--seed: At Most 1 required but received 2" for a one-value option given twice, in
// the words the tool uses for the shape options (require_single_values()); empty for any other
// error.
std::string repeated_option_message(const CLI::ParseError& error) {
  const std::string what = error.what();
  const std::string marker = ": At Most 1 required but received ";
  const size_t at = what.find(marker);
  if (error.get_name() != "ArgumentMismatch" || at == std::string::npos) return {};
  const std::string count = what.substr(at + marker.size());
  return what.substr(0, at) + " given " + count + " times; it takes one value";
}

bool has_empty_item(const std::string& list) {
  return list.empty() || list.front() == ',' || list.back() == ',' ||
         list.find(",,") != std::string::npos;
}

}  // namespace

std::string empty_list_item_error(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* command = &app;
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    const std::string& word = args[i];
    if (!looks_like_option(word)) {
      if (command == &app) {
        for (const CLI::App* sub : app.get_subcommands({})) {
          if (sub->get_name() == word) command = sub;
        }
      }
      continue;
    }
    const std::string name = option_part(word);
    const CLI::Option* option = command->get_option_no_throw(name);
    if (option == nullptr && command != &app) option = app.get_option_no_throw(name);
    if (option == nullptr || option->get_delimiter() != ',') continue;
    // The value in the word ("--seqlens=3,4", "-s64"), else the words up to the next option.
    std::vector<std::string> values;
    if (word.size() > name.size()) {
      values.push_back(word.substr(name.size() + (word[name.size()] == '=' ? 1 : 0)));
    } else {
      for (size_t j = i + 1; j < args.size() && !looks_like_option(args[j]); ++j) {
        values.push_back(args[j]);
      }
    }
    for (const std::string& value : values) {
      if (has_empty_item(value)) {
        return (command != &app ? command->get_name() + ": " : std::string()) + name + " '" +
               value + "': an empty item in the list (a comma too many?)";
      }
    }
  }
  return {};
}

std::vector<const CLI::App*> visible_subcommands(const CLI::App& app) {
  return app.get_subcommands(
      [](const CLI::App* sub) { return !sub->get_name().empty() && !sub->get_group().empty(); });
}

// Whether `word` is `candidate` with characters left out (a typo that dropped some).
bool is_subsequence(const std::string& word, const std::string& candidate) {
  size_t at = 0;
  for (const char c : candidate) at += at < word.size() && word[at] == c;
  return at == word.size();
}

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;  // at most two edits
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    // Two edits only for longer words: "ab" is two edits from any two-letter name.
    if (distance > 2 || (distance == 2 && word.size() <= 4)) continue;
    // On a tie, a name the word is an abbreviation of ("--seqk": "--seq-k" over "--seq").
    if (distance < best_distance ||
        (distance == best_distance && !is_subsequence(word, best) &&
         is_subsequence(word, candidate))) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string explain_parse_error(const CLI::App& app, const std::vector<std::string>& args,
                                const CLI::ParseError& error) {
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  const CLI::App* sub = parsed.empty() ? nullptr : parsed.front();
  const std::string fallback = std::string(error.what()) + " (see cuflash " +
                               (sub ? sub->get_name() + " " : std::string()) + "--help)";

  // The first word the parse left over, where the user typed it, and whether that was after the
  // subcommand; an unknown option before any other word (its value is left over too, and may
  // repeat an earlier word: "-s 7 --hedas 7" is about --hedas, not the second 7).
  std::vector<std::string> leftover = app.remaining(/*recurse=*/true);
  if (leftover.empty()) {
    if (sub == nullptr && error.get_name() == "RequiredError") {
      return "a subcommand is required: " + join_names(subcommand_names(app), "or") +
             " (see cuflash --help)";
    }
    const std::string repeated = repeated_option_message(error);
    if (!repeated.empty()) return (sub ? sub->get_name() + ": " : std::string()) + repeated;
    return fallback;
  }
  const auto first_at = [&](const std::string& word) {
    return std::find(args.begin(), args.end(), word) - args.begin();
  };
  std::sort(leftover.begin(), leftover.end(), [&](const std::string& a, const std::string& b) {
    if (looks_like_option(a) != looks_like_option(b)) return looks_like_option(a);
    return first_at(a) < first_at(b);
  });
  const std::string& word = leftover.front();
  const CLI::App* context =
      sub != nullptr && first_at(word) > first_at(sub->get_name()) ? sub : nullptr;
  const std::string prefix = context ? context->get_name() + ": " : "";

  // After "--" every word is an argument: "-s" left over there is no unknown option (run has
  // one), it is out of place.
  const auto dashes = std::find(args.begin(), args.end(), std::string("--"));
  if (dashes != args.end() && std::find(dashes + 1, args.end(), word) != args.end()) {
    return prefix + "unexpected argument '" + word + "' after '--' (options go before '--')";
  }
  if (looks_like_option(word)) {
    const std::string name = option_part(word);
    return prefix + "unknown option '" + name + "' (" + option_hint(app, context, name) + ")";
  }
  if (context == nullptr) {
    const std::vector<std::string> names = subcommand_names(app);
    const std::string near = closest_name(word, names);
    return "unknown subcommand '" + word + "' (" +
           (near.empty() ? "expected " + join_names(names, "or") : "did you mean '" + near + "'?") +
           ")";
  }
  return prefix + "unexpected argument '" + word + "' (see cuflash " + context->get_name() +
         " --help)";
}

}  // namespace cuflash::cli
