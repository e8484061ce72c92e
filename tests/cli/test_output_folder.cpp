// The all-or-nothing output folder of `run --out-dir` (cli/output_folder.h), driven directly:
// failures and interrupts at the points a spawned `cuflash` cannot be made to reach on demand,
// half-way through moving the files in included. tests/cli/test_cli.cpp checks the same
// guarantees end to end.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/output_folder.h"
#include "cuflash/io/npy.h"
#include "spawn_util.h"

namespace fs = std::filesystem;
using cuflash::cli::Interrupted;
using cuflash::cli::InterruptScope;
using cuflash::cli::OutputFolder;
using cuflash::cli::RuntimeFailure;
using spawn_test::names_of;
using spawn_test::slurp;
using spawn_test::snapshot;
using spawn_test::TempDir;

namespace {

cuflash::io::NpyArray array_of(float value) {
  cuflash::io::NpyArray a;
  a.type = cuflash::io::ElementType::f32;
  a.shape = {1};
  a.bytes.resize(4);
  std::memcpy(a.bytes.data(), &value, 4);
  return a;
}

// A folder holding a.npy, b.npy and c.npy of an earlier run, and an unrelated keep.txt.
fs::path earlier_folder(const TempDir& tmp) {
  const fs::path dir = tmp.path / "out";
  fs::create_directory(dir);
  for (const char* name : {"a.npy", "b.npy", "c.npy", "keep.txt"}) {
    std::ofstream(dir / name) << "earlier " << name;
  }
  return dir;
}

const std::vector<std::string> kNames{"a.npy", "b.npy", "c.npy", "d.npy"};

}  // namespace

TEST_CASE("output folder: a commit moves every file in and leaves nothing else", "[out-dir]") {
  TempDir tmp;
  const fs::path dir = earlier_folder(tmp);
  {
    OutputFolder folder(dir.string(), kNames, 1 << 20);
    for (const std::string& name : kNames) folder.write(name, array_of(1));
    folder.commit();
  }
  const auto after = snapshot(dir);
  INFO(names_of(after));
  CHECK(after.size() == 5);  // a, b, c, d and keep.txt: no staging folder
  CHECK(slurp(dir / "keep.txt") == "earlier keep.txt");
  CHECK(cuflash::io::read_npy((dir / "a.npy").string()).bytes == array_of(1).bytes);
  CHECK(cuflash::io::read_npy((dir / "d.npy").string()).bytes == array_of(1).bytes);
}

TEST_CASE("output folder: a failure half-way through the moves puts every earlier file back",
          "[out-dir]") {
  TempDir tmp;
  const fs::path dir = earlier_folder(tmp);
  const auto before = snapshot(dir);
  {
    OutputFolder folder(dir.string(), kNames, 1 << 20);
    for (const std::string& name : kNames) folder.write(name, array_of(2));
    // After the checks, before the moves: d.npy becomes a folder, so a, b and c are replaced
    // before the move of d fails.
    fs::create_directory(dir / "d.npy");
    std::ofstream(dir / "d.npy" / "inside") << "x";
    CHECK_THROWS_AS(folder.commit(), RuntimeFailure);
  }
  fs::remove_all(dir / "d.npy");
  INFO("before: " << names_of(before) << "\nafter: " << names_of(snapshot(dir)));
  CHECK(snapshot(dir) == before);  // same names, same inodes, same bytes; no staging folder
}

TEST_CASE("output folder: an interrupt while writing or before moving changes nothing",
          "[out-dir]") {
  TempDir tmp;
  const fs::path dir = earlier_folder(tmp);
  const auto before = snapshot(dir);
  SECTION("between two files") {
    const InterruptScope scope;
    OutputFolder folder(dir.string(), kNames, 1 << 20);
    folder.write("a.npy", array_of(3));
    std::raise(SIGINT);
    CHECK_THROWS_AS(folder.write("b.npy", array_of(3)), Interrupted);
  }
  SECTION("after the last file, before the moves") {
    const InterruptScope scope;
    OutputFolder folder(dir.string(), kNames, 1 << 20);
    for (const std::string& name : kNames) folder.write(name, array_of(3));
    std::raise(SIGTERM);
    CHECK_THROWS_AS(folder.commit(), Interrupted);
  }
  INFO("before: " << names_of(before) << "\nafter: " << names_of(snapshot(dir)));
  CHECK(snapshot(dir) == before);
}

TEST_CASE("interrupts: SIGHUP stops a command unless it was ignored (nohup)", "[out-dir]") {
  struct sigaction by_default {};
  struct sigaction ignore {};
  struct sigaction previous {};
  by_default.sa_handler = SIG_DFL;
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &by_default, &previous);  // whatever the test runner was started with
  {
    const InterruptScope scope;
    std::raise(SIGHUP);
    CHECK(cuflash::cli::interrupt_requested());
  }
  sigaction(SIGHUP, &ignore, nullptr);
  {
    const InterruptScope scope;
    std::raise(SIGHUP);  // ignored: the process goes on
    CHECK_FALSE(cuflash::cli::interrupt_requested());
  }
  struct sigaction after {};
  sigaction(SIGHUP, nullptr, &after);
  CHECK(after.sa_handler == SIG_IGN);  // the scope left it ignored
  sigaction(SIGHUP, &previous, nullptr);
}

TEST_CASE("output folder: a folder it created is removed again when nothing is committed",
          "[out-dir]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "new" / "deeper";
  {
    OutputFolder folder(dir.string(), kNames, 1 << 20);
    folder.write("a.npy", array_of(4));
    CHECK(fs::is_directory(dir));
  }
  CHECK_FALSE(fs::exists(tmp.path / "new"));
}

TEST_CASE("output folder: a name that is a directory is refused before anything is written",
          "[out-dir]") {
  TempDir tmp;
  const fs::path dir = earlier_folder(tmp);
  fs::remove(dir / "b.npy");
  fs::create_directory(dir / "b.npy");
  const auto before = snapshot(dir);
  CHECK_THROWS_AS(OutputFolder(dir.string(), kNames, 1 << 20), RuntimeFailure);
  CHECK(snapshot(dir) == before);
}
