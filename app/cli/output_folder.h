// An output folder written all or nothing (`run --out-dir`).
//
// Before any computation, the constructor creates the folder (and its missing parents) if
// needed, then a hidden staging folder inside it, `.cuflash-staging-XXXXXX`: creating it proves
// the folder writable, and being inside the folder it is on the same file system, where a rename
// is atomic (a sibling folder would not be when the output folder is a mount point). It refuses
// a name to be written that exists but is not a regular file or a symbolic link (e.g. a
// directory), and a file system with less free space than the files need.
//
// write() puts each new file into the staging folder. commit() then moves them in:
//   1. an existing file of a name being written is hard-linked into the staging folder's
//      `previous/` (moved there on a file system without hard links), so it can be put back;
//   2. the new file is renamed onto its name (atomic per file: a reader sees the earlier file
//      or the new one, never a partial one);
//   3. once every file is in place, the folder is synced and the staging folder, with the
//      earlier files, removed.
// A failure, or SIGINT/SIGTERM/SIGHUP (cli/interrupt.h), before step 3 undoes steps 1-2 in
// reverse: every earlier file is renamed back onto its name and every new one removed. Without a
// successful commit() (an error or an interrupt anywhere), the destructor removes the staging
// folder and the folders the constructor created.
//
// So the folder ends with every new file in place and nothing else changed, or exactly as it
// was: the same names, each the same file (same inode and content); only the folder's
// modification time changes. Not covered: SIGKILL, a crash or a power loss, which can leave the
// staging folder behind (during step 2 with some earlier files in its previous/), a rollback
// rename that fails (then the error names the staging folder that keeps the earlier files), and
// another process writing the same names at the same time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cuflash/io/npy.h"

namespace cuflash::cli {

class OutputFolder {
 public:
  // `names`: the files this run will write (e.g. "o.npy"), in the order commit() moves them in;
  // `bytes`: their total size. Throws RuntimeFailure naming `dir` (exit 3).
  OutputFolder(const std::string& dir, std::vector<std::string> names, uint64_t bytes);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  // Writes one of the names into the staging folder. Throws RuntimeFailure on an I/O error and
  // Interrupted when SIGINT/SIGTERM/SIGHUP arrived.
  void write(const std::string& name, const io::NpyArray& array);

  // Moves every written file into the folder, all or nothing (see above). Throws RuntimeFailure
  // or Interrupted after undoing what it did.
  void commit();

  const std::filesystem::path& staging() const { return staging_; }

 private:
  struct Move {
    std::string name;
    bool backed_up = false;   // the earlier file is in previous/
    bool moved_away = false;  // ... by a rename, not a hard link: it left its name
    bool placed = false;      // the new file is on its name
  };
  // Puts back what `moves` did; returns the names it could not restore.
  std::vector<std::string> roll_back(const std::vector<Move>& moves);
  void remove_created();

  std::string label_;  // "--out-dir DIR" for messages
  std::filesystem::path dir_, staging_;
  std::vector<std::filesystem::path> created_;  // folders this run made, deepest first
  std::vector<std::string> names_;
  std::set<std::string> written_;
  bool committed_ = false;
  bool keep_staging_ = false;  // a failed rollback left earlier files in it
};

}  // namespace cuflash::cli
