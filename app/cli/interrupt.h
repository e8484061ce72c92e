// Ctrl-C, SIGTERM and SIGHUP (the terminal closed, an ssh session dropped) for commands that
// stop cleanly (`run`, `bench`): while an InterruptScope is alive, SIGINT, SIGTERM and SIGHUP
// set a flag (the first one also prints the scope's notice on stderr; SIGHUP not where it was
// ignored, as under nohup), and the command polls it
// between steps (run: also the CPU reference between blocks of work; bench: between cases),
// then undoes or finishes what it started and exits with 130. With
// SecondSignal::flag the process is never killed half-way by these signals, so no temporary
// file or folder is left behind (run); with SecondSignal::default_action the first signal resets
// the handlers, so a second Ctrl-C ends the process at once (bench, whose package is consistent
// after every case). SIGKILL or SIGQUIT still end it at once.
#pragma once

#include <string>

namespace cuflash::cli {

enum class SecondSignal { flag, default_action };

class InterruptScope {
 public:
  // `notice`: a string literal (it is read by the signal handler), printed at the first signal.
  explicit InterruptScope(
      const char* notice = "\ninterrupted: stopping and removing what this run started\n",
      SecondSignal second = SecondSignal::flag);
  ~InterruptScope();  // restores the previous handlers
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// Whether SIGINT, SIGTERM or SIGHUP arrived since the live scope began (false without one).
bool interrupt_requested();

// Throws Interrupted (exit_codes.h) saying what was stopped, e.g. "interrupted while computing".
void throw_if_interrupted(const std::string& during);

}  // namespace cuflash::cli
