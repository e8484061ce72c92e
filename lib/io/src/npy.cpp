// NumPy .npy reading and writing. The rules implemented here are summarized in
// share/docs/npy-format.md.
//
// A file is: magic "\x93NUMPY", major and minor version bytes, the header length (uint16 for
// version 1.0, uint32 for 2.0 and 3.0, little-endian), the header (a Python dict literal padded
// with spaces and a newline), then the raw element data.
#include "cuflash/io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <random>
#include <string_view>
#include <utility>

#include "cuflash/io/printable.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "NpyArray bytes are little-endian and copied with memcpy: little-endian hosts only");

namespace cuflash::io {
namespace {

constexpr unsigned char kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kMagicSize = sizeof kMagic;
constexpr size_t kVersionedMagicSize = kMagicSize + 2;  // magic + major + minor
// NumPy refuses headers over 10000 characters by default; ours only guards against absurd ones.
constexpr size_t kMaxHeaderBytes = size_t(1) << 20;
// NumPy aligns the data to 64 bytes and leaves room in the header to grow the first axis to 21
// digits; we write the same bytes as np.save.
constexpr size_t kDataAlignment = 64;
constexpr size_t kGrowthAxisDigits = 21;

[[noreturn]] void fail(const std::string& name, const std::string& problem) {
  throw NpyError(name + ": " + problem);
}

// Untrusted header text shown in an error message: one line, printable, bounded.
std::string header_excerpt(std::string_view text) { return printable(text, 40); }

// Python's repr of a shape tuple: (), (5,), (2, 3).
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

// A shape for an error message: a header may hold a huge number of dimensions.
std::string shown_shape(const std::vector<int64_t>& shape) {
  constexpr size_t kMaxShown = 8;
  if (shape.size() <= kMaxShown) return shape_text(shape);
  const std::vector<int64_t> head(shape.begin(), shape.begin() + kMaxShown);
  const std::string text = shape_text(head);
  return text.substr(0, text.size() - 1) + ", ...) of " + std::to_string(shape.size()) +
         " dimensions";
}

// Number of elements and of bytes of an array; fails when a dimension is negative or when the
// byte count of the non-empty dimensions overflows int64 or size_t (the rule NumPy applies, so
// strides computed from any subset of the dimensions cannot overflow either).
struct ArraySize {
  int64_t elements = 1;
  size_t bytes = 0;
};

ArraySize measure(const std::vector<int64_t>& shape, int element_bytes, const std::string& name) {
  constexpr uint64_t kLimit = std::min<uint64_t>(std::numeric_limits<int64_t>::max(),
                                                 std::numeric_limits<size_t>::max());
  const uint64_t width = static_cast<uint64_t>(element_bytes);
  uint64_t nonzero_bytes = width;
  bool empty = false;
  for (const int64_t dim : shape) {
    if (dim < 0) fail(name, "negative dimension in shape " + shown_shape(shape));
    if (dim == 0) {
      empty = true;
      continue;
    }
    if (nonzero_bytes > kLimit / static_cast<uint64_t>(dim)) {
      fail(name, "shape " + shown_shape(shape) + " is too large (byte count overflows)");
    }
    nonzero_bytes *= static_cast<uint64_t>(dim);
  }
  ArraySize size;
  size.bytes = empty ? 0 : static_cast<size_t>(nonzero_bytes);
  size.elements = empty ? 0 : static_cast<int64_t>(nonzero_bytes / width);
  return size;
}

// --- Reading: the fixed-size preamble ----------------------------------------------------------

struct Preamble {
  int major_version = 1;
  size_t header_offset = 0;  // where the header dict starts
  size_t header_size = 0;
};

uint32_t read_le(const unsigned char* bytes, size_t count) {
  uint32_t value = 0;
  for (size_t i = count; i-- > 0;) value = (value << 8) | bytes[i];
  return value;
}

// `data` holds the first `available` bytes of a file of `file_size` bytes; 12 are enough.
Preamble read_preamble(const unsigned char* data, size_t available, uint64_t file_size,
                       const std::string& name) {
  if (available < kMagicSize || std::memcmp(data, kMagic, kMagicSize) != 0) {
    fail(name, "not a .npy file (bad magic)");
  }
  if (available < kVersionedMagicSize) fail(name, "file ends inside the format version");
  const int major = data[kMagicSize];
  const int minor = data[kMagicSize + 1];
  if (major < 1 || major > 3 || minor != 0) {
    fail(name, "unknown .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (available < kVersionedMagicSize + length_bytes) {
    fail(name, "file ends inside the header length");
  }
  Preamble preamble;
  preamble.major_version = major;
  preamble.header_offset = kVersionedMagicSize + length_bytes;
  preamble.header_size = read_le(data + kVersionedMagicSize, length_bytes);
  if (preamble.header_size > kMaxHeaderBytes) {
    fail(name, "header length " + std::to_string(preamble.header_size) +
                   " is absurdly long (limit " + std::to_string(kMaxHeaderBytes) + " bytes)");
  }
  if (preamble.header_offset + preamble.header_size > file_size) {
    fail(name, "header length " + std::to_string(preamble.header_size) +
                   " is longer than the file (" + std::to_string(file_size) + " bytes)");
  }
  return preamble;
}

// --- Reading: the header dict ------------------------------------------------------------------

// What the three keys hold, before the descr is interpreted.
struct HeaderDict {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Recursive-descent parser for the subset of Python literal syntax NumPy headers use:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Strings in single or double quotes without escapes, True/False, tuples of decimal integers
// (an 'L' suffix is allowed in versions 1.0 and 2.0, as Python 2 wrote it). Exactly the three
// keys, in any order, each once; only whitespace after the closing brace.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, int major_version, const std::string& name)
      : text_(text), allow_long_suffix_(major_version <= 2), name_(name) {}

  HeaderDict parse() {
    skip_space();
    if (!consume('{')) malformed("header is not a dict");
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    HeaderDict dict;
    skip_space();
    while (!consume('}')) {
      const std::string key = parse_key();
      if (key == "descr") {
        mark_seen(seen_descr, key);
        dict.descr = parse_descr();
      } else if (key == "fortran_order") {
        mark_seen(seen_fortran, key);
        dict.fortran_order = parse_bool(key);
      } else if (key == "shape") {
        mark_seen(seen_shape, key);
        dict.shape = parse_shape();
      } else {
        malformed("unexpected key '" + header_excerpt(key) + "' in header");
      }
      skip_space();
      if (consume(',')) {
        skip_space();
      } else if (peek() != '}') {
        malformed("expected ',' or '}' in header dict");
      }
    }
    skip_space();
    if (pos_ != text_.size()) malformed("unexpected text after the header dict");
    if (!seen_descr) malformed("header is missing key 'descr'");
    if (!seen_fortran) malformed("header is missing key 'fortran_order'");
    if (!seen_shape) malformed("header is missing key 'shape'");
    return dict;
  }

 private:
  [[noreturn]] void malformed(const std::string& problem) const {
    fail(name_, "malformed header: " + problem);
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  void mark_seen(bool& seen, const std::string& key) {
    if (seen) malformed("duplicate key '" + key + "'");
    seen = true;
  }

  std::string parse_key() {
    if (peek() != '\'' && peek() != '"') malformed("expected a quoted key");
    std::string key = parse_string();
    skip_space();
    if (!consume(':')) malformed("expected ':' after key '" + header_excerpt(key) + "'");
    skip_space();
    return key;
  }

  std::string parse_string() {
    const char quote = text_[pos_++];
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') malformed("escape sequences are not supported in strings");
      if (text_[pos_] == '\n') malformed("unterminated string");
      ++pos_;
    }
    if (pos_ == text_.size()) malformed("unterminated string");
    return std::string(text_.substr(start, pos_++ - start));
  }

  std::string parse_descr() {
    if (peek() == '[') fail(name_, "structured dtypes (descr is a list) are not supported");
    if (peek() != '\'' && peek() != '"') malformed("'descr' is not a string");
    return parse_string();
  }

  bool parse_bool(const std::string& key) {
    if (consume_word("True")) return true;
    if (consume_word("False")) return false;
    malformed("'" + key + "' is not True or False");
  }

  bool consume_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t end = pos_ + word.size();
    if (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) ||
                               text_[end] == '_')) {
      return false;
    }
    pos_ = end;
    return true;
  }

  std::vector<int64_t> parse_shape() {
    if (!consume('(')) malformed("'shape' is not a tuple");
    std::vector<int64_t> shape;
    skip_space();
    bool saw_comma = false;
    while (!consume(')')) {
      shape.push_back(parse_dimension());
      skip_space();
      saw_comma = consume(',');
      skip_space();
      if (!saw_comma && peek() != ')') malformed("expected ',' or ')' in 'shape'");
    }
    // (5) is the integer 5 in Python; a one-element tuple needs its comma.
    if (shape.size() == 1 && !saw_comma) malformed("'shape' is not a tuple");
    return shape;
  }

  int64_t parse_dimension() {
    const bool negative = consume('-');
    if (negative) skip_space();
    if (!std::isdigit(static_cast<unsigned char>(peek()))) {
      malformed("'shape' holds something other than integers");
    }
    uint64_t value = 0;
    bool overflow = false;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const uint64_t digit = static_cast<uint64_t>(text_[pos_++] - '0');
      if (value > (uint64_t(std::numeric_limits<int64_t>::max()) - digit) / 10) overflow = true;
      value = value * 10 + digit;
    }
    if (allow_long_suffix_ && (peek() == 'L' || peek() == 'l')) ++pos_;
    if (negative && value != 0) fail(name_, "negative dimension in 'shape'");
    if (overflow) fail(name_, "dimension in 'shape' does not fit in 64 bits");
    return static_cast<int64_t>(value);
  }

  std::string_view text_;
  size_t pos_ = 0;
  bool allow_long_suffix_;
  const std::string& name_;
};

// --- Reading: the dtype ------------------------------------------------------------------------

struct Header {
  ElementType type = ElementType::f32;
  bool big_endian = false;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

struct DescrInfo {
  ElementType type;
  bool big_endian;
};

// descr = byte-order mark + kind + size, e.g. '<f4'. Accepted:
//   '<' or '=' (native, little-endian here) or no mark: f2 f4 f8, and i2 u2 as bf16 bits;
//   '>': the same, byte-swapped on read;
//   V2 with '|' (NumPy's void), '<' or '=' (ml_dtypes' bfloat16): bf16 bits, never swapped.
DescrInfo interpret_descr(const std::string& descr, const std::string& name,
                          const ReadOptions& options) {
  const std::string shown = "'" + header_excerpt(descr) + "'";
  std::string_view code = descr;
  char order = '=';
  if (!code.empty() && std::string_view("<>=|").find(code.front()) != std::string_view::npos) {
    order = code.front();
    code.remove_prefix(1);
  }
  if (code.empty()) fail(name, "dtype " + shown + " is not a valid dtype");
  switch (code.front()) {
    case 'O': fail(name, "object arrays (dtype " + shown + ") are not supported");
    case 'U':
    case 'S':
    case 'a': fail(name, "string arrays (dtype " + shown + ") are not supported");
    default: break;
  }
  const bool two_byte_bits = code == "i2" || code == "u2" || code == "V2";
  if (two_byte_bits && !options.two_byte_as_bf16) {
    fail(name, "unsupported dtype " + shown +
                   " (2-byte integer and void arrays are read as bf16 only when allowed)");
  }
  if (code == "V2") {
    if (order == '>') fail(name, "dtype " + shown + ": big-endian opaque bf16 is ambiguous");
    return {ElementType::bf16, false};
  }
  ElementType type;
  if (code == "f2") {
    type = ElementType::f16;
  } else if (code == "f4") {
    type = ElementType::f32;
  } else if (code == "f8") {
    type = ElementType::f64;
  } else if (two_byte_bits) {
    type = ElementType::bf16;
  } else {
    fail(name, "unsupported dtype " + shown +
                   " (expected <f2, <f4, <f8, or bf16 bits as |V2, <i2, <u2)");
  }
  if (order == '|') fail(name, "byte-order mark '|' is not valid for dtype " + shown);
  return {type, order == '>'};
}

Header parse_header(const unsigned char* data, const Preamble& preamble, const std::string& name,
                    const ReadOptions& options) {
  const std::string_view text(reinterpret_cast<const char*>(data + preamble.header_offset),
                              preamble.header_size);
  HeaderDict dict = HeaderParser(text, preamble.major_version, name).parse();
  const DescrInfo descr = interpret_descr(dict.descr, name, options);
  Header header;
  header.type = descr.type;
  header.big_endian = descr.big_endian;
  header.fortran_order = dict.fortran_order;
  header.shape = std::move(dict.shape);
  return header;
}

// Byte count of the data section, checked against what the file holds before anything is
// allocated.
size_t checked_data_bytes(const Header& header, uint64_t remaining, const std::string& name,
                          const ReadOptions& options) {
  const size_t bytes = measure(header.shape, element_size(header.type), name).bytes;
  if (bytes > remaining) {
    fail(name, "truncated data: shape " + shown_shape(header.shape) + " of " +
                   to_string(header.type) + " needs " + std::to_string(bytes) +
                   " bytes, the file holds " + std::to_string(remaining));
  }
  if (bytes < remaining) {
    fail(name, "trailing garbage: " + std::to_string(remaining - bytes) +
                   " bytes after the data");
  }
  if (bytes > options.max_bytes) {
    fail(name, "data section of " + std::to_string(bytes) + " bytes exceeds the limit of " +
                   std::to_string(options.max_bytes) + " bytes");
  }
  return bytes;
}

// --- Reading: to little-endian C order ---------------------------------------------------------

void swap_bytes(std::vector<unsigned char>& bytes, size_t width) {
  const auto step = static_cast<std::ptrdiff_t>(width);
  for (auto element = bytes.begin(); element != bytes.end(); element += step) {
    std::reverse(element, element + step);
  }
}

// Fortran order stores the first index fastest. Walk the C-order index (last index fastest)
// with an odometer and keep the matching Fortran offset up to date. Needs a non-empty array:
// then every dimension is positive and no stride can overflow (see measure()).
std::vector<unsigned char> fortran_to_c_order(const std::vector<unsigned char>& fortran,
                                              const std::vector<int64_t>& shape, size_t width) {
  const size_t rank = shape.size();
  std::vector<size_t> extent(shape.begin(), shape.end());
  std::vector<size_t> fortran_stride(rank);  // in elements
  size_t stride = 1;
  for (size_t d = 0; d < rank; ++d) {
    fortran_stride[d] = stride;
    stride *= extent[d];
  }
  std::vector<unsigned char> c_order(fortran.size());
  std::vector<size_t> index(rank, 0);
  size_t source = 0;  // Fortran element offset of `index`
  const size_t count = fortran.size() / width;
  for (size_t target = 0; target < count; ++target) {
    std::memcpy(&c_order[target * width], &fortran[source * width], width);
    for (size_t d = rank; d-- > 0;) {  // advance the odometer, last index fastest
      if (++index[d] < extent[d]) {
        source += fortran_stride[d];
        break;
      }
      source -= (extent[d] - 1) * fortran_stride[d];
      index[d] = 0;
    }
  }
  return c_order;
}

void to_little_endian_c_order(NpyArray& array, const Header& header) {
  if (array.bytes.empty()) return;
  const size_t width = static_cast<size_t>(element_size(array.type));
  if (header.big_endian) swap_bytes(array.bytes, width);
  if (!header.fortran_order) return;
  // Dimensions of extent 1 do not move anything; dropping them keeps the odometer short (a header
  // may list thousands of them).
  std::vector<int64_t> moving;
  std::copy_if(array.shape.begin(), array.shape.end(), std::back_inserter(moving),
               [](int64_t extent) { return extent > 1; });
  if (moving.size() > 1) array.bytes = fortran_to_c_order(array.bytes, moving, width);
}

NpyArray empty_array(const Header& header) {
  NpyArray array;
  array.type = header.type;
  array.shape = header.shape;
  return array;
}

// --- Reading: files ----------------------------------------------------------------------------

std::string system_error_text() { return std::strerror(errno); }

class InputFile {
 public:
  // O_NONBLOCK: opening a named pipe must not wait for a writer (a wait that no signal ends, as
  // the open restarts); what is not a regular file is refused here, before any read.
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) fail(path, "cannot open: " + system_error_text());
    struct stat info {};
    if (::fstat(fd_, &info) != 0) {
      const std::string error = system_error_text();
      ::close(fd_);
      fail(path, "cannot stat: " + error);
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd_);
      fail(path,
           S_ISDIR(info.st_mode) ? "is a directory, not a .npy file" : "is not a regular file");
    }
    size_ = static_cast<uint64_t>(info.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, unsigned char* out, size_t count) const {
    while (count > 0) {
      const ssize_t got = ::pread(fd_, out, count, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(path_, "cannot read: " + system_error_text());
      if (got == 0) fail(path_, "file shrank while being read");
      out += got;
      offset += static_cast<uint64_t>(got);
      count -= static_cast<size_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// --- Writing -----------------------------------------------------------------------------------

const char* descr_of(ElementType type) {
  switch (type) {
    case ElementType::f16: return "<f2";
    case ElementType::bf16: return "|V2";  // np.load gives void; .view(np.int16) or ml_dtypes
    case ElementType::f32: return "<f4";
    case ElementType::f64: return "<f8";
  }
  return "?";
}

void check_writable(const NpyArray& array, const std::string& name) {
  const ArraySize size = measure(array.shape, element_size(array.type), name);
  if (array.bytes.size() != size.bytes) {
    fail(name, "array holds " + std::to_string(array.bytes.size()) + " bytes but shape " +
                   shown_shape(array.shape) + " of " + to_string(array.type) + " needs " +
                   std::to_string(size.bytes));
  }
}

// The magic, version, length and padded header dict, byte for byte what np.save writes.
std::string make_header(const NpyArray& array) {
  std::string dict = std::string("{'descr': '") + descr_of(array.type) +
                     "', 'fortran_order': False, 'shape': " + shape_text(array.shape) + ", }";
  if (!array.shape.empty()) {
    const size_t first_axis_digits = std::to_string(array.shape.front()).size();
    dict.append(kGrowthAxisDigits - std::min(first_axis_digits, kGrowthAxisDigits), ' ');
  }
  for (const int major : {1, 2}) {
    const size_t length_bytes = major == 1 ? 2 : 4;
    const size_t prefix = kVersionedMagicSize + length_bytes;
    const size_t with_newline = dict.size() + 1;
    const size_t padding = kDataAlignment - (prefix + with_newline) % kDataAlignment;
    const size_t header_size = with_newline + padding;
    if (major == 1 && header_size > 0xffff) continue;  // does not fit a uint16: version 2.0
    std::string out(reinterpret_cast<const char*>(kMagic), kMagicSize);
    out += static_cast<char>(major);
    out += '\0';
    for (size_t i = 0; i < length_bytes; ++i) {
      out += static_cast<char>((header_size >> (8 * i)) & 0xff);
    }
    out += dict;
    out.append(padding, ' ');
    out += '\n';
    return out;
  }
  return {};  // unreachable: version 2.0 takes any header below 4 GiB
}

void write_fully(int fd, const unsigned char* data, size_t count, const std::string& path) {
  while (count > 0) {
    const ssize_t put = ::write(fd, data, count);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail(path, "cannot write: " + system_error_text());
    data += put;
    count -= static_cast<size_t>(put);
  }
}

// A uniquely named file beside the target, removed again unless committed by a rename.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::string& target) : target_(target) {
    const std::filesystem::path target_path(target);
    const std::filesystem::path directory =
        target_path.has_parent_path() ? target_path.parent_path() : std::filesystem::path(".");
    std::random_device random;
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      char suffix[24];
      std::snprintf(suffix, sizeof suffix, ".tmp%08x%08x", random(), random());
      path_ = (directory / ("." + target_path.filename().string() + suffix)).string();
      // 0666 before the umask, like any newly created file.
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) {
      fail(target, "cannot create a temporary file in '" + directory.string() +
                       "': " + system_error_text());
    }
  }

  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  void write(const void* data, size_t count) {
    write_fully(fd_, static_cast<const unsigned char*>(data), count, target_);
  }

  // Flushes to disk and renames over the target, so readers see the old file or the new one.
  void commit() {
    if (::fsync(fd_) != 0) fail(target_, "cannot write: " + system_error_text());
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0) fail(target_, "cannot write: " + system_error_text());
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      fail(target_, "cannot replace: " + system_error_text());
    }
    committed_ = true;
  }

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// The header of an open file, checked, and where its data starts and how many bytes it has
// (the file holds exactly those bytes after the header).
Header read_checked_header(const InputFile& file, const std::string& path,
                           const ReadOptions& options, size_t& data_offset, size_t& bytes) {
  const uint64_t file_size = file.size();
  std::vector<unsigned char> start(std::min<uint64_t>(file_size, 12));  // magic to header length
  file.read_at(0, start.data(), start.size());
  const Preamble preamble = read_preamble(start.data(), start.size(), file_size, path);

  std::vector<unsigned char> head(preamble.header_offset + preamble.header_size);
  file.read_at(0, head.data(), head.size());
  Header header = parse_header(head.data(), preamble, path, options);
  data_offset = head.size();
  bytes = checked_data_bytes(header, file_size - head.size(), path, options);
  return header;
}

}  // namespace

int element_size(ElementType t) {
  switch (t) {
    case ElementType::f16:
    case ElementType::bf16: return 2;
    case ElementType::f32: return 4;
    case ElementType::f64: return 8;
  }
  return 0;
}

const char* to_string(ElementType t) {
  switch (t) {
    case ElementType::f16: return "f16";
    case ElementType::bf16: return "bf16";
    case ElementType::f32: return "f32";
    case ElementType::f64: return "f64";
  }
  return "?";
}

int64_t NpyArray::element_count() const {
  return measure(shape, element_size(type), "element_count").elements;
}

NpyArray parse_npy(const unsigned char* data, size_t size, const std::string& name,
                   const ReadOptions& options) {
  const Preamble preamble = read_preamble(data, size, size, name);
  const Header header = parse_header(data, preamble, name, options);
  const size_t data_offset = preamble.header_offset + preamble.header_size;
  const size_t bytes = checked_data_bytes(header, size - data_offset, name, options);
  NpyArray array = empty_array(header);
  array.bytes.assign(data + data_offset, data + data_offset + bytes);
  to_little_endian_c_order(array, header);
  return array;
}

// Same steps as parse_npy, but the data is read straight into the array (no second copy of a
// large file in memory) and only after its size has been checked against the file's.
NpyArray read_npy(const std::string& path, const ReadOptions& options) {
  const InputFile file(path);
  size_t data_offset = 0, bytes = 0;
  const Header header = read_checked_header(file, path, options, data_offset, bytes);
  NpyArray array = empty_array(header);
  array.bytes.resize(bytes);
  file.read_at(data_offset, array.bytes.data(), bytes);
  to_little_endian_c_order(array, header);
  return array;
}

NpyInfo read_npy_info(const std::string& path, const ReadOptions& options) {
  const InputFile file(path);
  size_t data_offset = 0, bytes = 0;
  const Header header = read_checked_header(file, path, options, data_offset, bytes);
  return NpyInfo{header.type, header.shape};
}

std::vector<unsigned char> serialize_npy(const NpyArray& array) {
  check_writable(array, "serialize_npy");
  const std::string header = make_header(array);
  std::vector<unsigned char> image(header.begin(), header.end());
  image.insert(image.end(), array.bytes.begin(), array.bytes.end());
  return image;
}

void write_npy(const std::string& path, const NpyArray& array) {
  check_writable(array, path);
  const std::string header = make_header(array);
  TemporaryFile file(path);
  file.write(header.data(), header.size());
  file.write(array.bytes.data(), array.bytes.size());
  file.commit();
}

}  // namespace cuflash::io
