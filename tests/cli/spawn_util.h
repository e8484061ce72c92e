// Helpers of the tests that spawn the built binary: a scratch folder and a shell command whose
// exit code, stdout and stderr come back as strings.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

namespace spawn_test {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh folder under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("cuflash-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Runs `command` in a shell with stdin from /dev/null; stdout and stderr pass through files in
// `tmp`.
inline Outcome run_shell(const std::string& command, const TempDir& tmp) {
  const fs::path out = tmp.path / "stdout.txt", err = tmp.path / "stderr.txt";
  const std::string full = command + " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int status = std::system(full.c_str());
  return Outcome{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

#ifdef CUFLASH_TEST_PYTHON
// Runs a Python script (numpy available) with `args`; returns its outcome.
inline Outcome python(const TempDir& tmp, const std::string& script,
                      const std::string& args = "") {
  const fs::path path = tmp.path / "script.py";
  std::ofstream(path) << script;
  return run_shell(std::string(CUFLASH_TEST_PYTHON) + " " + path.string() + " " + args, tmp);
}
#endif

inline int count_lines(const std::string& text);

#ifdef CUFLASH_BINARY
// Runs the built cuflash with `args`, colour off.
inline Outcome cuflash(const std::string& args, const TempDir& tmp) {
  return run_shell(std::string("NO_COLOR=1 ") + CUFLASH_BINARY + " " + args, tmp);
}

// Runs the built cuflash with `args` and stdout a pipe whose reader has already exited (started
// a second after it), so that the first write meets a closed pipe; returns cuflash's own exit
// code (-1 when a signal ended it, as SIGPIPE would) and its stderr.
struct ClosedPipeOutcome {
  int exit_code;
  std::string err;
};
inline ClosedPipeOutcome cuflash_into_closed_pipe(const std::string& args, const TempDir& tmp) {
  const fs::path code = tmp.path / "pipe-exit-code.txt", err = tmp.path / "pipe-stderr.txt";
  const std::string command = "(sleep 1; NO_COLOR=1 " + std::string(CUFLASH_BINARY) + " " + args +
                              " 2>" + err.string() + "; echo $? >" + code.string() + ") | true";
  run_shell(command, tmp);
  const std::string status = slurp(code);
  const int exit_code = status.empty() ? -2 : std::stoi(status);
  return {exit_code > 128 ? -1 : exit_code, slurp(err)};
}

// A usage error: exit 2, one line on stderr that holds `words`, nothing on stdout.
inline void require_usage_error(const std::string& args, const std::string& words) {
  TempDir tmp;
  const Outcome o = cuflash(args, tmp);
  INFO("cuflash " << args << "\nstderr: " << o.err);
  CHECK(o.exit_code == 2);
  CHECK(count_lines(o.err) == 1);
  CHECK(o.err.find(words) != std::string::npos);
  CHECK(o.out.empty());
}

// The same for a command given `--out-dir`: the folder is never written.
inline void require_usage_error_writing_nothing(const std::string& command,
                                                const std::string& words) {
  TempDir tmp;
  const fs::path dir = tmp.path / "never";
  require_usage_error(command + " --out-dir " + dir.string(), words);
  CHECK_FALSE(fs::exists(dir));
}
#endif

// Starts `command` in a shell (which execs it, so the pid is the command's) with stdout and
// stderr into `out` and `err`, and returns at once.
inline pid_t spawn_background(const std::string& command, const fs::path& out,
                              const fs::path& err) {
  const std::string full =
      "exec " + command + " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    // The command's own signal handling, whatever the test runner ignores (under nohup, SIGHUP).
    std::signal(SIGHUP, SIG_DFL);
    execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The exit code of a child, or 1000 + the signal that killed it (never confused with an exit
// code such as 130).
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

// Waits until `file` contains `text`; false after `timeout_s`.
inline bool wait_for_text(const fs::path& file, const std::string& text, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (slurp(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// FNV-1a of a file's bytes: a short, printable stand-in for its content in a snapshot.
inline std::string content_hash(const std::string& bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (const char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::ostringstream text;
  text << std::hex << hash;
  return text.str();
}

// Every entry under `root`, hidden ones included: relative path -> "dir", "link -> target" or
// "file inode <inode> size <bytes> fnv1a <hash>". Two equal snapshots mean the same names
// holding the same files with the same content.
inline std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> entries;
  if (!fs::exists(root)) return entries;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string name = fs::relative(entry.path(), root).string();
    if (entry.is_symlink()) {
      entries[name] = "link -> " + fs::read_symlink(entry.path()).string();
    } else if (entry.is_directory()) {
      entries[name] = "dir";
    } else {
      struct stat info {};
      stat(entry.path().c_str(), &info);
      const std::string bytes = slurp(entry.path());
      entries[name] = "file inode " + std::to_string(info.st_ino) + " size " +
                      std::to_string(bytes.size()) + " fnv1a " + content_hash(bytes);
    }
  }
  return entries;
}

// The names of a snapshot, for messages.
inline std::string names_of(const std::map<std::string, std::string>& entries) {
  std::string names;
  for (const auto& [name, value] : entries) names += name + " ";
  return names;
}

inline int count_lines(const std::string& text) {
  int n = 0;
  for (const char c : text) n += c == '\n';
  return n;
}

}  // namespace spawn_test
