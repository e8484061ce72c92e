// cuflash: run, verify and time FlashAttention from the shell.
//
// Results go to stdout (table or JSON), logs to stderr through spdlog. Every error ends in one
// line on stderr and a documented exit code (cli/exit_codes.h).
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <string>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/app_docs.h"
#include "cli/exit_codes.h"
#include "cli/usage_errors.h"
#include "commands/commands.h"
#include "cuflash/error.h"
#include "cuflash/io/npy.h"
#include "cuflash/io/printable.h"
#include "cuflash/version.h"

namespace {

using namespace cuflash::cli;

// Logs go to stderr (stdout carries results only), coloured only on a terminal, and not when
// NO_COLOR is set to a non-empty value (no-color.org: an empty one does not count).
void create_logger() {
  const char* no_color = std::getenv("NO_COLOR");
  const bool color = (no_color == nullptr || *no_color == '\0') && isatty(fileno(stderr));
  auto logger = spdlog::stderr_color_mt(
      "cuflash", color ? spdlog::color_mode::automatic : spdlog::color_mode::never);
  logger->set_pattern("%^%l%$: %v");
  spdlog::set_default_logger(logger);
}

void set_log_level(const GlobalOptions& global) {
  spdlog::set_level(global.quiet ? spdlog::level::warn
                    : global.verbose > 0 ? spdlog::level::debug
                                         : spdlog::level::info);
}

int report_error(const std::string& what, int code) {
  spdlog::error("{}", cuflash::io::on_one_line(what));
  return code;
}

// The global options again in each subcommand (under their own heading), so that its --help
// lists them; they set the same variables as the top-level ones. `bench` has its own --format.
void add_global_options(CLI::App& sub, GlobalOptions& global) {
  if (sub.get_option_no_throw("--format") == nullptr) {
    sub.add_option("--format", global.format, "Output on stdout: table or json (one object a line)")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str()
        ->group(kGlobalOptionsGroup);
  }
  sub.add_flag("-q,--quiet", global.quiet, "Only warnings and errors on stderr")
      ->group(kGlobalOptionsGroup);
  sub.add_flag("-v,--verbose", global.verbose, "More detail on stderr")->group(kGlobalOptionsGroup);
}

// Results that never reached stdout (a full disk, /dev/full) are a failure: exit 3 instead of 0.
int check_stdout(int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && !std::ferror(stdout) && !std::cout.fail()) return code;
  spdlog::error("cannot write the results to stdout{}",
                !flushed && error != 0 ? std::string(": ") + std::strerror(error) : std::string());
  return code == kExitOk ? kExitRuntimeFailure : code;
}

}  // namespace

int main(int argc, char** argv) {
  // A reader that closed its end of stdout (`cuflash ... | head -1`) must not kill the process
  // before it can roll its output folder back: ignored, SIGPIPE leaves the write failing
  // (EPIPE), which check_stdout() and `run`'s folder commit handle as for a full disk.
  std::signal(SIGPIPE, SIG_IGN);
  create_logger();
  CLI::App app{"cuflash " CUFLASH_VERSION ": FlashAttention forward and backward in CUDA.\n"
               "Run it, check it against a float64 CPU reference, and time it.",
               "cuflash"};
  app.footer(std::string(kExitCodeHelp) + "\nEnvironment: " + environment_help() +
             "\nFiles: " + kFilesHelp +
             "\nMore: cuflash help SUBCOMMAND (or cuflash SUBCOMMAND --help), man cuflash.");
  app.set_version_flag("-V,--version", "cuflash " CUFLASH_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand

  GlobalOptions global;
  // Before the subcommand --format takes bench's formats too; the others refuse them below.
  app.add_option("--format", global.format,
                 "Output on stdout: table or json (one object a line); bench also markdown or csv")
      ->check(CLI::IsMember({"table", "json", "markdown", "csv"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", global.quiet, "Only warnings and errors on stderr");
  app.add_flag("-v,--verbose", global.verbose, "More detail on stderr");

  CommandResult result;
  setup_run(app, global, result);
  setup_verify(app, global, result);
  setup_bench(app, global, result);
  setup_info(app, global, result);
  setup_profile_target(app, result);
  for (CLI::App* sub : app.get_subcommands({})) add_global_options(*sub, global);
  setup_help(app);
  setup_docs(app);
  app.parse_complete_callback([&] {
    set_log_level(global);
    // Before and after the subcommand (fallthrough) CLI11 counts --format apart and keeps the last.
    for (const CLI::App* sub : app.get_subcommands()) {
      const CLI::Option* own = sub->get_option_no_throw("--format");
      const size_t given = app.count("--format") + (own != nullptr ? own->count() : 0);
      if (given > 1) {
        throw UsageError(sub->get_name() + ": --format given " + std::to_string(given) +
                         " times; it takes one value");
      }
    }
    if (global.format != "table" && global.format != "json" && !app.got_subcommand("bench")) {
      throw UsageError("--format " + global.format +
                       ": only bench writes markdown and csv; give table or json");
    }
  });

  const std::string empty_item = empty_list_item_error(app, {argv + 1, argv + argc});
  if (!empty_item.empty()) return report_error(empty_item, kExitBadInput);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return check_stdout(app.exit(e));  // help or version
    return report_error(explain_parse_error(app, {argv + 1, argv + argc}, e), kExitBadInput);
  } catch (const Interrupted& e) {
    return report_error(e.what(), kExitInterrupted);
  } catch (const UsageError& e) {
    return report_error(e.what(), kExitBadInput);
  } catch (const cuflash::io::NpyError& e) {
    return report_error(e.what(), kExitBadInput);
  } catch (const RuntimeFailure& e) {
    return report_error(e.what(), kExitRuntimeFailure);
  } catch (const cuflash::Error& e) {
    return report_error(e.what(), exit_code(e.kind()));
  } catch (const std::bad_alloc&) {
    return report_error("out of host memory", kExitRuntimeFailure);
  } catch (const std::exception& e) {
    return report_error(e.what(), kExitRuntimeFailure);
  }
  return check_stdout(result.exit_code);
}
