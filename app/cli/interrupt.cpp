#include "cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include "cli/exit_codes.h"

namespace cuflash::cli {

namespace {

volatile sig_atomic_t g_requested = 0;
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

void on_signal(int) {
  if (g_requested == 0) {
    static const char message[] = "\ninterrupted: stopping and removing what this run started\n";
    if (write(STDERR_FILENO, message, sizeof message - 1) < 0) {
      // nothing else is safe to do in a signal handler
    }
  }
  g_requested = 1;
}

}  // namespace

InterruptScope::InterruptScope() {
  g_requested = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  g_requested = 0;
}

bool interrupt_requested() { return g_requested != 0; }

void throw_if_interrupted(const std::string& during) {
  if (interrupt_requested()) throw Interrupted("interrupted " + during);
}

}  // namespace cuflash::cli
