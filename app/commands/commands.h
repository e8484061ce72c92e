// One setup function per subcommand: it registers the subcommand, its options and a callback
// that runs it and stores the exit code.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/report.h"

namespace cuflash::cli {

// Options of the top-level command, visible to every subcommand.
struct GlobalOptions {
  std::string format = "table";
  bool quiet = false;
  int verbose = 0;

  OutputFormat output_format() const {
    return format == "json" ? OutputFormat::json : OutputFormat::table;
  }
};

// The heading under which every subcommand's --help lists the global options (--format, -q, -v).
inline constexpr const char* kGlobalOptionsGroup = "Global options";

// Each callback writes the command's exit code here (0 unless it has something to report).
struct CommandResult {
  int exit_code = 0;
};

void setup_run(CLI::App& app, const GlobalOptions& global, CommandResult& result);
void setup_verify(CLI::App& app, const GlobalOptions& global, CommandResult& result);
void setup_bench(CLI::App& app, const GlobalOptions& global, CommandResult& result);
void setup_info(CLI::App& app, const GlobalOptions& global, CommandResult& result);
// The hidden `profile-target`: the child process `bench --profile` runs under Nsight Compute.
void setup_profile_target(CLI::App& app, CommandResult& result);

// `help [SUBCOMMAND]`; call after the other subcommands are set up.
void setup_help(CLI::App& app);
// The hidden `man` and `completion bash`, which print documents generated from `app`.
void setup_docs(CLI::App& app);

}  // namespace cuflash::cli
