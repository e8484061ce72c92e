#include "cli/report.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace cuflash::cli {

namespace {

std::string format_number(double value, int precision) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
  return buffer;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double seconds) {
  char buffer[32];
  if (seconds < 120) {
    std::snprintf(buffer, sizeof buffer, "%.0f s", seconds);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1f min", seconds / 60);
  }
  return buffer;
}

// The length of the well-formed UTF-8 sequence at text[i] (1 to 4), or 0 where the bytes there
// are none (a stray continuation byte, a truncated or overlong sequence, a surrogate, a code
// point above U+10FFFF): RFC 3629's table of well-formed byte sequences.
size_t utf8_sequence_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) {
    return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u;
  };
  const unsigned lead = byte(i);
  const auto continuation = [&](size_t k, unsigned low = 0x80, unsigned high = 0xBF) {
    return byte(k) >= low && byte(k) <= high;
  };
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(i + 1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    return continuation(i + 1, low, high) && continuation(i + 2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    return continuation(i + 1, low, high) && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

// JSON strings are Unicode: a path's bytes that are not UTF-8 (a file name in another encoding)
// become U+FFFD, one for each such byte, so that every line still parses.
std::string json_escape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      const size_t length = utf8_sequence_length(text, i);
      out += length == 0 ? std::string("\\ufffd") : text.substr(i, length);
      i += length == 0 ? 1 : length;
      continue;
    }
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += ch;
        }
    }
    ++i;
  }
  return out;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

Record& Record::add(const std::string& key, const std::string& value) {
  text_.emplace_back(key, value);
  json_.push_back("\"" + json_escape(value) + "\"");
  return *this;
}

Record& Record::add(const std::string& key, double value, int precision) {
  text_.emplace_back(key, format_number(value, precision));
  json_.push_back(std::isfinite(value) ? format_number(value, 17) : "null");
  return *this;
}

Record& Record::add(const std::string& key, int64_t value) {
  text_.emplace_back(key, std::to_string(value));
  json_.push_back(std::to_string(value));
  return *this;
}

Record& Record::add(const std::string& key, bool value) {
  text_.emplace_back(key, value ? "yes" : "no");
  json_.push_back(value ? "true" : "false");
  return *this;
}

Record& Record::add(const std::string& key, const std::vector<int64_t>& values) {
  text_.emplace_back(key, format_shape(values));
  std::string json = "[";
  for (size_t i = 0; i < values.size(); ++i) json += (i ? ", " : "") + std::to_string(values[i]);
  json_.push_back(json + "]");
  return *this;
}

std::string Record::to_json() const {
  std::string s = "{";
  for (size_t i = 0; i < text_.size(); ++i) {
    s += (i ? ", \"" : "\"") + json_escape(text_[i].first) + "\": " + json_[i];
  }
  return s + "}";
}

void print_records(const std::vector<Record>& records, OutputFormat format, std::FILE* out) {
  if (format == OutputFormat::json) {
    for (const Record& r : records) std::fprintf(out, "%s\n", r.to_json().c_str());
    std::fflush(out);
    return;
  }
  if (records.empty()) return;
  const auto& header = records.front().cells();
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].first.size();
  for (const Record& r : records)
    for (size_t c = 0; c < width.size() && c < r.cells().size(); ++c)
      width[c] = std::max(width[c], r.cells()[c].second.size());
  const auto print_row = [&](auto cell_text) {
    std::string line;
    for (size_t c = 0; c < width.size(); ++c) {
      std::string text = cell_text(c);
      text.resize(width[c], ' ');
      line += (c ? "  " : "") + text;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(out, "%s\n", line.c_str());
  };
  print_row([&](size_t c) { return header[c].first; });
  for (const Record& r : records) {
    print_row([&](size_t c) { return c < r.cells().size() ? r.cells()[c].second : std::string(); });
  }
  std::fflush(out);
}

Progress::Progress(size_t total, bool enabled)
    : total_(total), enabled_(enabled && isatty(STDERR_FILENO)), start_(now_seconds()) {}

void Progress::step(size_t done, const std::string& label) {
  if (!enabled_) return;
  const double elapsed = now_seconds() - start_;
  std::string eta = "";
  if (done > 0) eta = ", ETA " + format_duration(elapsed / double(done) * double(total_ - done));
  std::fprintf(stderr, "\r\033[K[%zu/%zu] %s elapsed%s  %s", done + 1, total_,
               format_duration(elapsed).c_str(), eta.c_str(), label.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace cuflash::cli
