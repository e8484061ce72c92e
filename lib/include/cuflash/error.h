// The one exception type the library throws. Library code never calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace cuflash {

class Error : public std::runtime_error {
 public:
  enum class Kind {
    invalid_argument,  // a caller error: bad shape, dtype, stride, pointer (CLI exit code 2)
    unsupported,       // a valid request this build cannot serve, e.g. head_dim 512 (exit code 2)
    cuda,              // a CUDA runtime error, with its text (exit code 3)
    out_of_memory,     // device allocation failed (exit code 3)
    no_device,         // no usable GPU (exit code 3)
  };

  Error(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

}  // namespace cuflash
