// Ctrl-C and SIGTERM for commands that must clean up after themselves (`run`): while an
// InterruptScope is alive, SIGINT and SIGTERM only set a flag, every time they arrive, and the
// command polls it between steps (and the CPU reference between blocks of work), then undoes
// what it started and exits with 130. The process is never killed half-way by these two
// signals, so no temporary file or folder is left behind; SIGKILL or SIGQUIT still end it at once.
#pragma once

#include <string>

namespace cuflash::cli {

class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();  // restores the previous handlers
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// Whether SIGINT or SIGTERM arrived since the live scope began (false without one).
bool interrupt_requested();

// Throws Interrupted (exit_codes.h) saying what was stopped, e.g. "interrupted while computing".
void throw_if_interrupted(const std::string& during);

}  // namespace cuflash::cli
