// The exit codes of `cuflash`, documented in --help and the README.
#pragma once

#include <stdexcept>

#include "cuflash/error.h"

namespace cuflash::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitVerificationFailed = 1,  // verify (or bench --verify) found a result outside tolerance
  kExitBadInput = 2,            // bad usage, bad option value, unreadable or malformed input file
  kExitRuntimeFailure = 3,      // CUDA error, out of memory, no GPU, I/O failure writing results
  kExitInterrupted = 130,       // Ctrl-C, SIGTERM, SIGHUP: bench keeps the cases that finished
};

// The exit codes in --help: all of them at the top, each subcommand's own in its help.
constexpr const char* kExitCodeHelp =
    "Exit codes: 0 ok, 1 verification failed (verify, bench --verify), 2 bad usage or bad input, "
    "3 runtime failure (CUDA error, out of memory, no device, results that cannot be written), "
    "130 interrupted (run, bench: Ctrl-C, SIGTERM or SIGHUP).";
constexpr const char* kRunExitCodeHelp =
    "Exit codes: 0 ok, 2 bad usage or bad input, 3 runtime failure (CUDA error, out of memory, "
    "no GPU for --backend cuda, not enough memory, results that cannot be written), 130 "
    "interrupted (Ctrl-C, SIGTERM or SIGHUP; the output folder is left as it was).";
constexpr const char* kVerifyExitCodeHelp =
    "Exit codes: 0 every case passed, 1 a case failed verification, 2 bad usage or bad input, or "
    "a case is not supported (and none failed), 3 runtime failure (CUDA error, out of memory, "
    "no GPU, results that cannot be written).";
constexpr const char* kBenchExitCodeHelp =
    "Exit codes: 0 every case ran, 1 --verify found a wrong result, 2 bad usage or an "
    "unsupported case, 3 CUDA error, out of memory or no GPU, 130 interrupted (Ctrl-C; the "
    "finished cases are kept).";
constexpr const char* kInfoExitCodeHelp =
    "Exit codes: 0 ok, 2 bad usage, 3 results that cannot be written.";
constexpr const char* kHelpExitCodeHelp =
    "Exit codes: 0 ok, 2 bad usage (an unknown subcommand), 3 help that cannot be written.";
constexpr const char* kDocsExitCodeHelp =
    "Exit codes: 0 ok, 2 bad usage, 3 a document that cannot be written.";

// The exit codes with their meaning, for the manual page.
struct ExitCodeDoc {
  int code;
  const char* meaning;
};
constexpr ExitCodeDoc kExitCodeDocs[] = {
    {kExitOk, "Success."},
    {kExitVerificationFailed,
     "Verification failed: verify, or bench --verify, found a result outside the tolerance."},
    {kExitBadInput,
     "Bad usage or bad input: an unknown subcommand or option, a bad value, an unreadable or "
     "malformed .npy file, an unsupported case."},
    {kExitRuntimeFailure,
     "Runtime failure: no GPU, a CUDA error, out of memory, results that cannot be written."},
    {kExitInterrupted,
     "Interrupted by Ctrl-C, SIGTERM or SIGHUP (run leaves its output folder as it was; bench "
     "keeps the finished cases)."},
};

// A cuflash::Error the caller can fix (a bad or unsupported request) rather than one of the
// machine (CUDA error, out of memory, no device).
constexpr bool is_caller_error(Error::Kind kind) {
  return kind == Error::Kind::invalid_argument || kind == Error::Kind::unsupported;
}

// The exit code of a cuflash::Error: 2 for a caller error, 3 otherwise.
constexpr int exit_code(Error::Kind kind) {
  return is_caller_error(kind) ? kExitBadInput : kExitRuntimeFailure;
}

// Thrown for problems the user can fix by changing the command line or the input files.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when the machine cannot do what was asked (no GPU, out of memory, unwritable output).
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when Ctrl-C (SIGINT), SIGTERM or SIGHUP stopped a command (cli/interrupt.h); exit 130.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cuflash::cli
