// Reading and writing NumPy .npy files (host only, no CUDA).
//
// Read: format versions 1.0, 2.0 and 3.0, any header padding, little-endian C-order data of
// '<f2', '<f4', '<f8'. bfloat16 has no NumPy dtype; a 2-byte opaque ('|V2', as ml_dtypes writes)
// or 2-byte integer ('<i2', '<u2', as torch's `t.view(torch.int16).numpy()` gives) array is read
// as bf16 bits when the caller allows it (ReadOptions::two_byte_as_bf16). Write: version 1.0
// (2.0 when the header does not fit), bf16 as '|V2'.
//
// Every problem is reported as NpyError with a one-line message naming the file. A lying header
// never drives an allocation larger than the file itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuflash::io {

enum class ElementType { f16, bf16, f32, f64 };

int element_size(ElementType t);
const char* to_string(ElementType t);  // "f16", "bf16", "f32", "f64"

struct NpyArray {
  ElementType type = ElementType::f32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // little-endian, C order

  int64_t element_count() const;
};

struct ReadOptions {
  bool two_byte_as_bf16 = true;  // accept '|V2', '<i2', '<u2' as bf16 bits
  size_t max_bytes = size_t(1) << 40;  // refuse larger data sections
};

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

NpyArray read_npy(const std::string& path, const ReadOptions& options = {});
// Parses a whole file image already in memory; `name` is used in error messages.
NpyArray parse_npy(const unsigned char* data, size_t size, const std::string& name,
                   const ReadOptions& options = {});

// Writes atomically: to a temporary file beside `path`, then renamed, so a failure leaves no
// half-written file.
void write_npy(const std::string& path, const NpyArray& array);
std::vector<unsigned char> serialize_npy(const NpyArray& array);

}  // namespace cuflash::io
