#include "cli/output_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "cli/byte_size.h"
#include "cli/exit_codes.h"
#include "cli/interrupt.h"

namespace cuflash::cli {

namespace fs = std::filesystem;

namespace {

std::string error_text(int error) { return std::strerror(error); }

// Whether `path` exists (a dangling symbolic link counts); throws for other lstat failures.
bool entry_exists(const fs::path& path, struct stat& info, const std::string& label) {
  if (::lstat(path.c_str(), &info) == 0) return true;
  if (errno == ENOENT) return false;
  throw RuntimeFailure(label + ": cannot inspect " + path.string() + ": " + error_text(errno));
}

bool replaceable(const struct stat& info) { return S_ISREG(info.st_mode) || S_ISLNK(info.st_mode); }

// Flushes a folder's entries (the renames) to disk.
int sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int result = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return result;
}

constexpr const char* kStagingPrefix = ".cuflash-staging-";

// A staging folder that an earlier run left in `dir` when it was killed (kill -9, a crash): its
// previous/ may hold that run's earlier files, which the user would otherwise never hear of.
void warn_about_leftover_staging(const fs::path& dir, const std::string& label) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(kStagingPrefix, 0) != 0) continue;
    std::error_code empty_ec;
    const bool holds_files = !fs::is_empty(entry.path() / "previous", empty_ec) && !empty_ec;
    spdlog::warn(
        "{}: {} was left by a run that was stopped while writing{}; remove it once "
        "nothing in it is needed",
        label, entry.path().string(),
        holds_files ? " (its previous/ holds files that folder had before it)" : "");
  }
}

}  // namespace

OutputFolder::OutputFolder(const std::string& dir, std::vector<std::string> names, uint64_t bytes)
    : label_("--out-dir " + dir), dir_(dir), names_(std::move(names)) {
  // Remember which folders of the path do not exist yet, deepest first.
  for (fs::path p = fs::absolute(dir_); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(p, ec))) break;
    created_.push_back(p);
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    remove_created();
    throw RuntimeFailure(label_ + ": cannot create directory" +
                         (ec ? ": " + ec.message() : std::string(": not a directory")));
  }
  try {
    for (const std::string& name : names_) {
      struct stat info {};
      if (entry_exists(dir_ / name, info, label_) && !replaceable(info)) {
        throw RuntimeFailure(label_ + ": " + (dir_ / name).string() + " exists and is " +
                             (S_ISDIR(info.st_mode) ? "a directory" : "not a regular file") +
                             "; remove it or choose another --out-dir");
      }
    }
    warn_about_leftover_staging(dir_, label_);
    std::string pattern = (dir_ / (std::string(kStagingPrefix) + "XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw RuntimeFailure(label_ + ": cannot write into the folder: " + error_text(errno));
    }
    staging_ = pattern;
    if (::mkdir((staging_ / "previous").c_str(), 0700) != 0) {
      throw RuntimeFailure(label_ + ": cannot write into the folder: " + error_text(errno));
    }
    struct statvfs fs_info {};
    if (::statvfs(staging_.c_str(), &fs_info) == 0) {
      const double free = double(fs_info.f_bavail) * double(fs_info.f_frsize);
      if (double(bytes) > free) {
        throw RuntimeFailure(label_ + ": the output files need " + format_bytes(double(bytes)) +
                             ", the file system has " + format_bytes(free) + " free");
      }
    }
  } catch (...) {
    if (!staging_.empty()) fs::remove_all(staging_, ec);
    remove_created();
    throw;
  }
}

OutputFolder::~OutputFolder() {
  if (committed_ || keep_staging_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
  remove_created();
}

void OutputFolder::remove_created() {
  std::error_code ec;
  for (const fs::path& p : created_) fs::remove(p, ec);  // removes empty folders only
}

void OutputFolder::write(const std::string& name, const io::NpyArray& array) {
  throw_if_interrupted("while writing the output files");
  const fs::path path = staging_ / name;
  try {
    io::write_npy(path.string(), array);
  } catch (const io::NpyError& e) {
    // NpyError starts with the file's path; name the file as the user knows it.
    std::string reason = e.what();
    const std::string prefix = path.string() + ": ";
    if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
    throw RuntimeFailure(label_ + ": " + name + ": " + reason + "; the folder is left as it was");
  }
  written_.insert(name);
}

std::vector<std::string> OutputFolder::roll_back(const std::vector<Move>& moves) {
  std::vector<std::string> failed;
  for (auto m = moves.rbegin(); m != moves.rend(); ++m) {
    const fs::path target = dir_ / m->name, backup = staging_ / "previous" / m->name;
    bool ok = true;
    if (m->placed && m->backed_up) {
      ok = ::rename(backup.c_str(), target.c_str()) == 0;  // the earlier file over the new one
    } else if (m->placed) {
      ok = ::unlink(target.c_str()) == 0 || errno == ENOENT;
    } else if (m->moved_away) {
      ok = ::rename(backup.c_str(), target.c_str()) == 0;
    }
    if (!ok) failed.push_back(m->name);
  }
  return failed;
}

void OutputFolder::commit() {
  for (const std::string& name : names_) {
    if (written_.count(name) == 0) throw std::logic_error("OutputFolder: " + name + " not written");
  }
  throw_if_interrupted("before moving the output files into place");
  std::vector<Move> moves;
  try {
    for (const std::string& name : names_) {
      const fs::path target = dir_ / name, backup = staging_ / "previous" / name;
      Move move{name};
      struct stat info {};
      if (entry_exists(target, info, label_)) {
        if (!replaceable(info)) {
          throw RuntimeFailure(label_ + ": " + target.string() +
                               " is no longer a regular file; remove it or choose another "
                               "--out-dir");
        }
        if (::link(target.c_str(), backup.c_str()) == 0) {
          move.backed_up = true;
        } else if (::rename(target.c_str(), backup.c_str()) == 0) {
          move.backed_up = move.moved_away = true;
        } else {
          throw RuntimeFailure(label_ + ": cannot keep the earlier " + name + ": " +
                               error_text(errno));
        }
      }
      moves.push_back(move);
      if (::rename((staging_ / name).c_str(), target.c_str()) != 0) {
        throw RuntimeFailure(label_ + ": cannot move " + name + " into place: " +
                             error_text(errno));
      }
      moves.back().placed = true;
    }
    throw_if_interrupted("while moving the output files into place");
    if (const int error = sync_folder(dir_); error != 0) {
      throw RuntimeFailure(label_ + ": cannot sync the folder: " + error_text(error));
    }
  } catch (const std::exception& e) {
    const std::vector<std::string> failed = roll_back(moves);
    if (failed.empty()) {
      sync_folder(dir_);
      if (dynamic_cast<const Interrupted*>(&e) != nullptr) throw;  // the caller says the rest
      throw RuntimeFailure(std::string(e.what()) + "; the folder is left as it was");
    }
    keep_staging_ = true;
    std::string names;
    for (const std::string& name : failed) names += (names.empty() ? "" : ", ") + name;
    throw RuntimeFailure(std::string(e.what()) + "; could not undo the move of " + names +
                         " (the earlier files are kept in " + (staging_ / "previous").string() +
                         ")");
  }
  committed_ = true;
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (ec) spdlog::warn("{}: could not remove {}: {}", label_, staging_.string(), ec.message());
}

}  // namespace cuflash::cli
