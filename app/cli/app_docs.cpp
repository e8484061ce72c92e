#include "cli/app_docs.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/usage_errors.h"
#include "commands/commands.h"
#include "cuflash/version.h"

namespace cuflash::cli {

const std::vector<EnvironmentVariable> kEnvironment{
    {"NO_COLOR",
     "When set to a non-empty value, the logs on stderr carry no colour (they are coloured only "
     "on a terminal anyway)."},
    {"CUFLASH_DISABLE_WGMMA",
     "When set to a non-empty value other than 0, H100/H200 run the portable mma.sync kernels "
     "instead of the wgmma ones."},
    {"CUFLASH_NCU",
     "The Nsight Compute binary for bench --profile (else ncu on PATH, /usr/local/cuda/bin/ncu, "
     "/opt/nvidia/nsight-compute/*/ncu)."},
};

const char* const kFilesHelp =
    "Inputs (run --q/--k/--v/--dout) and outputs (run --out-dir) are NumPy .npy files. "
    "bench --sweep NAME reads PREFIX/share/cuflash/sweeps/NAME.txt next to an installed "
    "PREFIX/bin/cuflash, else the source tree's share/sweeps.";

std::string environment_help() {
  std::string text;
  for (const EnvironmentVariable& v : kEnvironment) {
    text += (text.empty() ? "" : " ") + std::string(v.name) + ": " + v.meaning;
  }
  return text;
}

namespace {

// --- What the App defines ------------------------------------------------------------------------

std::vector<const CLI::Option*> visible_options(const CLI::App& app) {
  return app.get_options([](const CLI::Option* o) { return !o->get_group().empty(); });
}

// Flags expect no value (CLI11 sets expected(0) for them).
bool takes_value(const CLI::Option* o) { return o->get_expected_max() != 0; }

// The descriptions of an option's validators, e.g. "{fp16,bf16,fp32}" for CLI::IsMember, "FILE".
std::vector<std::string> validator_descriptions(const CLI::Option* o) {
  std::vector<std::string> descriptions;
  auto* option = const_cast<CLI::Option*>(o);  // CLI11 2.1 has no const accessor
  for (int i = 0;; ++i) {
    try {
      descriptions.push_back(option->get_validator(i)->get_description());
    } catch (const CLI::OptionNotFound&) {  // past the last one
      return descriptions;
    }
  }
}

// The choices of an option checked by CLI::IsMember, whose description is "{a,b,c}".
std::vector<std::string> choices_of(const CLI::Option* o) {
  std::vector<std::string> choices;
  for (const std::string& d : validator_descriptions(o)) {
    if (d.size() < 2 || d.front() != '{' || d.back() != '}') continue;
    std::istringstream items(d.substr(1, d.size() - 2));
    for (std::string item; std::getline(items, item, ',');) choices.push_back(item);
  }
  return choices;
}

bool has_validator(const CLI::Option* o, const std::string& description) {
  const std::vector<std::string> all = validator_descriptions(o);
  return std::find(all.begin(), all.end(), description) != all.end();
}

std::vector<std::string> names_of(const CLI::Option* o) {
  std::vector<std::string> names;
  for (const std::string& n : o->get_snames()) names.push_back("-" + n);
  for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  return names;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// --- roff ----------------------------------------------------------------------------------------

// Text safe in roff: backslashes and dashes escaped, a leading '.' or '\'' made literal.
std::string roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (const char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
    line_start = c == '\n';
  }
  return out;
}

// A footer or description: indented lines (examples) verbatim, other lines as paragraphs.
void roff_paragraphs(std::ostringstream& out, const std::string& text) {
  bool verbatim = false;
  for (const std::string& line : lines_of(text)) {
    const bool indented = line.rfind("  ", 0) == 0;
    if (indented && !verbatim) out << ".PP\n.nf\n";
    if (!indented && verbatim) out << ".fi\n";
    verbatim = indented;
    if (!indented) out << ".PP\n";
    out << roff(indented ? line.substr(2) : line) << "\n";
  }
  if (verbatim) out << ".fi\n";
}

void roff_option(std::ostringstream& out, const CLI::Option* o) {
  out << ".TP\n";
  if (o->get_positional()) {
    out << "\\fI" << roff(o->get_name()) << "\\fR";
  } else {
    std::vector<std::string> names;
    for (const std::string& n : names_of(o)) names.push_back("\\fB" + roff(n) + "\\fR");
    out << join(names, ", ");
    if (takes_value(o)) out << " \\fI" << roff(o->get_type_name()) << "\\fR";
  }
  out << "\n" << roff(o->get_description());
  if (!o->get_default_str().empty()) out << " (default: " << roff(o->get_default_str()) << ")";
  out << "\n";
}

// --- bash ----------------------------------------------------------------------------------------

// The completion of one command level: its option names, the words its positional arguments take
// (`positional_words` and the choices of its positional options), and what follows each option
// that takes a value.
void bash_level(std::ostringstream& out, const CLI::App& level, const std::string& indent,
                std::vector<std::string> positional_words) {
  std::vector<std::string> names;
  for (const CLI::Option* o : visible_options(level)) {
    if (o->get_positional()) {
      for (const std::string& c : choices_of(o)) positional_words.push_back(c);
      continue;
    }
    for (const std::string& n : names_of(o)) names.push_back(n);
  }
  out << indent << "options='" << join(names, " ") << "'\n";
  out << indent << "positional='" << join(positional_words, " ") << "'\n";
  out << indent << "case $prev in\n";
  for (const CLI::Option* o : visible_options(level)) {
    if (o->get_positional() || !takes_value(o)) continue;
    const std::vector<std::string> choices = choices_of(o);
    const std::string type = o->get_type_name();
    std::string action;
    if (!choices.empty()) {
      action = std::string("kind=") + (o->get_delimiter() == ',' ? "list" : "words") +
               " values='" + join(choices, " ") + "'";
    } else if (has_validator(o, "DIR")) {
      action = "kind=dirs";
    } else if (type.rfind("TEXT", 0) == 0) {
      action = "kind=files";  // paths (FILE), and text where bash would offer files anyway
    } else {
      action = "kind=none";  // a number
    }
    out << indent << "  " << join(names_of(o), "|") << ") " << action << " ;;\n";
  }
  out << indent << "esac\n";
  out << indent << ";;\n";
}

}  // namespace

std::string man_page(const CLI::App& app) {
  std::ostringstream out;
  out << ".TH CUFLASH 1 \"\" \"cuflash " << CUFLASH_VERSION << "\" \"User Commands\"\n"
      << ".SH NAME\ncuflash \\- run, verify and time FlashAttention forward and backward in CUDA\n"
      << ".SH SYNOPSIS\n\\fBcuflash\\fR [\\fIGLOBAL OPTIONS\\fR] \\fISUBCOMMAND\\fR "
         "[\\fIOPTIONS\\fR]\n.SH DESCRIPTION\n";
  roff_paragraphs(out, app.get_description());
  out << ".PP\nResults go to stdout (a table, or JSON), logs and progress to stderr. Every error "
         "is one line on stderr and a documented exit status.\n";
  out << ".SH GLOBAL OPTIONS\nGiven before or after the subcommand.\n";
  for (const CLI::Option* o : visible_options(app)) roff_option(out, o);
  out << ".SH SUBCOMMANDS\n";
  for (const CLI::App* sub : visible_subcommands(app)) {
    out << ".SS \"" << sub->get_name() << "\"\n" << roff(sub->get_description()) << "\n";
    for (const CLI::Option* o : visible_options(*sub)) {
      if (o->get_group() != kGlobalOptionsGroup && o != sub->get_help_ptr()) roff_option(out, o);
    }
    roff_paragraphs(out, sub->get_footer());
  }
  out << ".SH EXIT STATUS\n";
  for (const ExitCodeDoc& doc : kExitCodeDocs) {
    out << ".TP\n.B " << doc.code << "\n" << roff(doc.meaning) << "\n";
  }
  out << ".PP\nEach subcommand's section lists the statuses it can return.\n";
  out << ".SH ENVIRONMENT\n";
  for (const EnvironmentVariable& v : kEnvironment) {
    out << ".TP\n.B " << roff(v.name) << "\n" << roff(v.meaning) << "\n";
  }
  out << ".SH FILES\n";
  roff_paragraphs(out, kFilesHelp);
  out << ".SH SEE ALSO\nThe README of the source tree, and its share/docs/bench.md (the benchmark "
         "protocol and result packages) and share/docs/npy\\-format.md (the .npy rules).\n";
  return out.str();
}

std::string bash_completion(const CLI::App& app) {
  std::vector<std::string> subcommands;  // offered after `cuflash`
  for (const CLI::App* sub : visible_subcommands(app)) subcommands.push_back(sub->get_name());
  // Once typed, every subcommand completes its own words, the hidden ones too (`cuflash
  // completion ` offers bash, not the subcommands again).
  const std::vector<const CLI::App*> every =
      app.get_subcommands([](const CLI::App* sub) { return !sub->get_name().empty(); });
  std::vector<std::string> typed;
  for (const CLI::App* sub : every) typed.push_back(sub->get_name());
  std::vector<std::string> value_options;  // global options that take a value
  for (const CLI::Option* o : visible_options(app)) {
    if (!o->get_positional() && takes_value(o)) {
      for (const std::string& n : names_of(o)) value_options.push_back(n);
    }
  }

  std::ostringstream out;
  out << "# bash completion for cuflash " << CUFLASH_VERSION
      << ", written by `cuflash completion bash` from the\n"
         "# command line's own definition: subcommands, options and their choices.\n"
         "_cuflash() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} prev='' sub='' i\n"
         "  if ((COMP_CWORD > 0)); then prev=${COMP_WORDS[COMP_CWORD - 1]}; fi\n"
         "  # --option=value: bash splits the word at '='\n"
         "  if [[ $cur == '=' ]]; then prev=${COMP_WORDS[COMP_CWORD - 1]}; cur=''; fi\n"
         "  if [[ $prev == '=' ]] && ((COMP_CWORD > 1)); then prev=${COMP_WORDS[COMP_CWORD - 2]}; "
         "fi\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    case ${COMP_WORDS[i]} in\n";
  if (!value_options.empty()) out << "      " << join(value_options, "|") << ") ((i++)) ;;\n";
  out << "      " << join(typed, "|") << ") sub=${COMP_WORDS[i]}; break ;;\n"
      << "    esac\n"
         "  done\n"
         "  local options='' positional='' kind='' values=''\n"
         "  case $sub in\n"
         "    '')\n";
  bash_level(out, app, "      ", subcommands);
  for (const CLI::App* sub : every) {
    out << "    " << sub->get_name() << ")\n";
    bash_level(out, *sub, "      ", {});
  }
  out << "  esac\n"
         "  case $kind in\n"
         "    words) mapfile -t COMPREPLY < <(compgen -W \"$values\" -- \"$cur\"); return 0 ;;\n"
         "    list)  # a comma list: complete its last item\n"
         "      local head=''\n"
         "      if [[ $cur == *,* ]]; then head=${cur%,*},; fi\n"
         "      mapfile -t COMPREPLY < <(compgen -P \"$head\" -W \"$values\" -- \"${cur##*,}\")\n"
         "      return 0 ;;\n"
         "    files) compopt -o filenames 2>/dev/null\n"
         "      mapfile -t COMPREPLY < <(compgen -f -- \"$cur\"); return 0 ;;\n"
         "    dirs) compopt -o filenames 2>/dev/null\n"
         "      mapfile -t COMPREPLY < <(compgen -d -- \"$cur\"); return 0 ;;\n"
         "    none) COMPREPLY=(); return 0 ;;\n"
         "  esac\n"
         "  if [[ $cur == -* ]]; then\n"
         "    mapfile -t COMPREPLY < <(compgen -W \"$options\" -- \"$cur\")\n"
         "  else\n"
         "    mapfile -t COMPREPLY < <(compgen -W \"$positional\" -- \"$cur\")\n"
         "  fi\n"
         "  return 0\n"
         "}\n"
         "complete -F _cuflash cuflash\n";
  return out.str();
}

}  // namespace cuflash::cli
