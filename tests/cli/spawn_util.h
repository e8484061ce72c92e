// Helpers of the tests that spawn the built binary: a scratch folder and a shell command whose
// exit code, stdout and stderr come back as strings.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

namespace spawn_test {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

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

inline int count_lines(const std::string& text) {
  int n = 0;
  for (const char c : text) n += c == '\n';
  return n;
}

}  // namespace spawn_test
