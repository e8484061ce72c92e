// One-line explanations of command-line mistakes that CLI11 reports vaguely or not at all: an
// unknown subcommand ("A subcommand is required"), an unknown option of a subcommand ("The
// following argument was not expected: cpu --backend"), with the closest name when one is near.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace cuflash::cli {

// The message for a failed parse of `args` (argv without the program name) by `app`: what is
// wrong, naming the word the user typed; CLI11's own message when nothing better is known.
std::string explain_parse_error(const CLI::App& app, const std::vector<std::string>& args,
                                const CLI::ParseError& error);

// The error for a comma list with an empty item in `args` (argv without the program name):
// "--seqlens 512,,77" or "--page-size 16," name the option and the value. CLI11 drops empty items
// without a word, so a doubled or trailing comma would quietly change the case. Empty when every
// list is whole.
std::string empty_list_item_error(const CLI::App& app, const std::vector<std::string>& args);

// The candidate nearest to `word` when it is close enough to be a typo (one or two edits, a swap
// of neighbours counting as one); empty otherwise.
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);

// The subcommands `--help` lists (hidden ones, of group "", left out), in definition order.
std::vector<const CLI::App*> visible_subcommands(const CLI::App& app);

}  // namespace cuflash::cli
