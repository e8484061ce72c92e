// `cuflash help [SUBCOMMAND]`, and two hidden subcommands that print documents generated from the
// command line's definition: `cuflash man` (the manual page) and `cuflash completion bash`.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/app_docs.h"
#include "cli/exit_codes.h"
#include "cli/usage_errors.h"
#include "commands/commands.h"

namespace cuflash::cli {

namespace {

void print(const std::string& text) { std::fputs(text.c_str(), stdout); }

}  // namespace

void setup_help(CLI::App& app) {
  std::vector<std::string> topics;
  for (const CLI::App* sub : visible_subcommands(app)) topics.push_back(sub->get_name());
  auto topic = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("help", "This help, or a subcommand's: cuflash help run");
  cmd->footer(kHelpExitCodeHelp);
  std::string choices;  // "{run,verify,...}": how --help and the completion show choices
  for (const std::string& t : topics) choices += (choices.empty() ? "{" : ",") + t;
  cmd->add_option("subcommand", *topic, "The subcommand to describe")
      ->check(CLI::Validator([](std::string&) { return std::string(); }, choices + "}"));
  cmd->callback([&app, topic, topics] {
    // Any subcommand: those --help lists, `help` itself and the hidden `man` and `completion`.
    const CLI::App& cuflash = app;
    const std::vector<const CLI::App*> every = cuflash.get_subcommands(
        [&](const CLI::App* sub) { return !topic->empty() && sub->get_name() == *topic; });
    if (!topic->empty() && every.empty()) {
      const std::string near = closest_name(*topic, topics);
      throw UsageError("help: unknown subcommand '" + *topic + "' (" +
                       (near.empty() ? "see cuflash --help" : "did you mean '" + near + "'?") +
                       ")");
    }
    // App::help() would describe `help` itself, the subcommand being run: ask the formatter.
    const CLI::App* target = topic->empty() ? &app : every.front();
    const std::string name = topic->empty() ? "cuflash" : "cuflash " + *topic;
    print(target->get_formatter()->make_help(target, name, CLI::AppFormatMode::Normal));
  });
}

void setup_docs(CLI::App& app) {
  CLI::App* man = app.add_subcommand("man", "Print the manual page (roff) and exit");
  man->group("");  // hidden: for packaging (the build installs its output as cuflash.1)
  man->footer(kDocsExitCodeHelp);
  man->callback([&app] { print(man_page(app)); });

  auto shell = std::make_shared<std::string>();
  CLI::App* completion =
      app.add_subcommand("completion", "Print a shell completion script and exit");
  completion->group("");  // hidden: the build installs the bash script
  completion->footer(kDocsExitCodeHelp);
  completion->add_option("shell", *shell, "The shell (bash)")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  completion->callback([&app] { print(bash_completion(app)); });
}

}  // namespace cuflash::cli
