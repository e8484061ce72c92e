// Reading and writing NumPy .npy files (host only, no CUDA). share/docs/npy-format.md has the
// rules in full.
//
// Read: format versions 1.0, 2.0 and 3.0, any header padding, data of '<f2', '<f4', '<f8'.
// bfloat16 has no NumPy dtype; a 2-byte opaque ('|V2' as NumPy writes it, '<V2' as ml_dtypes
// does) or 2-byte integer ('<i2', '<u2', as torch's `t.view(torch.int16).numpy()` gives) array is
// read as bf16 bits when the caller allows it (ReadOptions::two_byte_as_bf16). Big-endian data
// is byte-swapped and Fortran-order data transposed, so an NpyArray is always little-endian and
// C order. Write: version 1.0 (2.0 when the header does not fit), bf16 as '|V2', byte for byte
// what np.save writes.
//
// Every problem is reported as NpyError with a one-line message that starts with the file name.
// A lying header never drives an allocation larger than the file itself. Rank and cross-file
// shape checks are the caller's.
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
  std::vector<int64_t> shape;        // () is a scalar: one element
  std::vector<unsigned char> bytes;  // little-endian, C order

  // Product of the shape. Throws NpyError for a negative dimension or a byte count that
  // overflows (parse_npy has already refused both).
  int64_t element_count() const;
};

struct ReadOptions {
  bool two_byte_as_bf16 = true;  // accept '|V2', '<V2', '<i2', '<u2' as bf16 bits
  size_t max_bytes = size_t(1) << 40;  // refuse larger data sections
};

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

NpyArray read_npy(const std::string& path, const ReadOptions& options = {});
// What a file's header says, checked as read_npy checks it (the file must hold exactly the data
// the header describes), without reading the data.
struct NpyInfo {
  ElementType type = ElementType::f32;
  std::vector<int64_t> shape;
};
NpyInfo read_npy_info(const std::string& path, const ReadOptions& options = {});
// Parses a whole file image already in memory; `name` starts every error message.
NpyArray parse_npy(const unsigned char* data, size_t size, const std::string& name,
                   const ReadOptions& options = {});

// Writes atomically: to a temporary file beside `path`, then renamed, so a failure leaves no
// half-written file. Throws NpyError naming `path` when the bytes do not match the shape or the
// file cannot be written.
void write_npy(const std::string& path, const NpyArray& array);
std::vector<unsigned char> serialize_npy(const NpyArray& array);

}  // namespace cuflash::io
