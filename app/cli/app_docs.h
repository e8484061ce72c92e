// Documents generated from the command line's own definition (the CLI11 App: subcommands,
// options, their choices, help texts and footers), so they cannot drift from it: a manual page
// (`cuflash man`) and a bash completion script (`cuflash completion bash`). The build writes both
// and installs them (app/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace cuflash::cli {

// The environment variables cuflash reads, and the files it uses: `cuflash --help` and the man
// page print these.
struct EnvironmentVariable {
  const char* name;
  const char* meaning;
};
extern const std::vector<EnvironmentVariable> kEnvironment;
extern const char* const kFilesHelp;

// One line for --help: "NAME: meaning NAME: meaning".
std::string environment_help();

// cuflash(1) in roff (man macros).
std::string man_page(const CLI::App& app);

// A bash completion script: subcommands, their options, and the values of options with a fixed
// set of choices (comma lists completed item by item), files or folders for path options. It
// defines _cuflash and registers it for `cuflash`.
std::string bash_completion(const CLI::App& app);

}  // namespace cuflash::cli
