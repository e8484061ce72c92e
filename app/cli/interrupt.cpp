#include "cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include "cli/exit_codes.h"

namespace cuflash::cli {

namespace {

volatile sig_atomic_t g_requested = 0;
const char* volatile g_notice = "";
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};
struct sigaction g_previous_hup {};

void on_signal(int) {
  if (g_requested == 0) {
    const char* notice = g_notice;
    size_t length = 0;
    while (notice[length] != '\0') ++length;  // strlen is not async-signal-safe
    if (write(STDERR_FILENO, notice, length) < 0) {
      // nothing else is safe to do in a signal handler
    }
  }
  g_requested = 1;
}

}  // namespace

InterruptScope::InterruptScope(const char* notice, SecondSignal second) {
  g_requested = 0;
  g_notice = notice;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | (second == SecondSignal::default_action ? SA_RESETHAND : 0);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
  // Under nohup SIGHUP is ignored, and stays so: closing the terminal must not stop the run.
  sigaction(SIGHUP, nullptr, &g_previous_hup);
  if (g_previous_hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &action, nullptr);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGHUP, &g_previous_hup, nullptr);
  g_requested = 0;
}

bool interrupt_requested() { return g_requested != 0; }

void throw_if_interrupted(const std::string& during) {
  if (interrupt_requested()) throw Interrupted("interrupted " + during);
}

}  // namespace cuflash::cli
