#include "bench/package.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/exit_codes.h"

namespace cuflash::bench {

namespace fs = std::filesystem;

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    throw cli::RuntimeFailure(path + ": cannot write: " + std::strerror(errno));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    throw cli::RuntimeFailure(path + ": cannot write (disk full?)");
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    throw cli::RuntimeFailure(path + ": cannot write: " + ec.message());
  }
}

ResultPackage::ResultPackage(std::string dir, JsonRows rows)
    : dir_(std::move(dir)), rows_(rows) {
  if (fs::exists(fs::path(dir_) / "metadata.json")) {
    throw cli::UsageError("--out-dir " + dir_ +
                          ": already holds a result package; choose a new folder");
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw cli::RuntimeFailure("--out-dir " + dir_ + ": cannot create the folder" +
                              (ec ? ": " + ec.message() : std::string()));
  }
}

namespace {

// A metadata value as text: strings as they are, anything else as JSON ("null", "false").
std::string text_of(const Json* value) {
  if (value == nullptr) return "unknown";
  return value->is_string() ? value->get<std::string>() : json_text(*value);
}

std::string text_at(const Json& object, const char* section, const char* key) {
  const Json* s = find_member(object, section);
  return text_of(s ? find_member(*s, key) : nullptr);
}

std::string text_at(const Json& object, const char* key) {
  return text_of(find_member(object, key));
}

// results.md: what ran where, then the table, then the failures.
std::string markdown_report(const std::vector<CaseRecord>& records, const RunSettings& settings,
                            const Json& metadata) {
  std::string command;
  if (const Json* argv = find_member(metadata, "command_line")) {
    for (const Json& arg : *argv) command += (command.empty() ? "" : " ") + text_of(&arg);
  }
  std::string out = "# cuflash bench: " + text_at(metadata, "protocol", "sweep") + "\n\n";
  out += "- GPU: " + text_at(metadata, "device", "name") + " (" +
         text_at(metadata, "device", "uuid") + ")\n";
  out += "- cuflash " + text_at(metadata, "cuflash", "version") + ", commit " +
         text_at(metadata, "cuflash", "git_commit") + " (dirty: " +
         text_at(metadata, "cuflash", "git_dirty") + "), " +
         text_at(metadata, "cuflash", "build_type") + "\n";
  out += "- CUDA driver " + text_at(metadata, "cuda", "driver_version") + ", runtime " +
         text_at(metadata, "cuda", "runtime_version") + "\n";
  out += "- command: `" + command + "`\n";
  out += "- started " + text_at(metadata, "started_utc") + ", status " +
         text_at(metadata, "status") + "\n\n";
  out += format_markdown(records, settings);
  return out;
}

}  // namespace

void ResultPackage::write(const std::vector<CaseRecord>& records, const RunSettings& settings,
                          const Json& metadata) const {
  Json failures = Json::array();
  for (const CaseRecord& r : records) {
    if (r.failure) failures.push_back(failure_json(r));
  }
  const fs::path dir(dir_);
  write_file_atomically((dir / "results.json").string(),
                        json_lines_text(benchmark_json(records, settings, metadata, rows_)));
  write_file_atomically((dir / "results.md").string(),
                        markdown_report(records, settings, metadata));
  write_file_atomically((dir / "failures.json").string(), json_text(failures, 2) + "\n");
  write_file_atomically((dir / "metadata.json").string(), json_text(metadata, 2) + "\n");
}

}  // namespace cuflash::bench
