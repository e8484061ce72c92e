// Inputs of one attention case, generated or read from .npy files. Tensors stay in their stored
// form (elements of the case's dtype in its layout, as in the files and on the device), so that
// the GPU path moves them from file to device and back without a float64 copy or a reordering;
// only the CPU reference gets float64 values in [batch, heads, seq, head_dim] order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/problem_options.h"
#include "cuflash/io/npy.h"

namespace cuflash::cli {

// Stored tensors: shape [batch, heads, seq, head_dim] (bhsd) or [batch, seq, heads, head_dim]
// (bshd), elements of the case's dtype.
struct CaseInputs {
  io::NpyArray q, k, v;
  io::NpyArray dout;  // no bytes unless the backward pass needs it
};

// The inputs as the CPU reference takes them: float64 in bhsd order, one copy of each.
struct ReferenceInputs {
  std::vector<double> q, k, v, dout;
};
ReferenceInputs reference_inputs(const Problem& p, const CaseInputs& in);

// Called before each tensor is generated or read, e.g. to stop on Ctrl-C by throwing.
using BeforeTensor = std::function<void()>;

// Seeded standard-normal inputs (never zeros), rounded to the dtype: io::random_input_bytes(),
// the generator `bench` and the tests use too. Each tensor draws from its own stream, so Q is the
// same with and without --backward.
CaseInputs generate_inputs(const Problem& p, uint64_t seed, bool with_dout,
                           const BeforeTensor& before = {});

// The problem --q/--k/--v (and --dout when given) describe, from their headers alone (no data is
// read): shape and dtype come from the files, mask/scale/layout from `options`. Throws
// UsageError naming the file when a file is unreadable, malformed, of the wrong rank, or
// disagrees with the others, and naming the option when a shape or dtype option was given too
// (the files decide those).
Problem describe_inputs(const ProblemOptions& options, bool with_dout);

// Reads the files describe_inputs() described (dO generated from --seed when --dout is not
// given); throws UsageError when a file no longer matches that description.
CaseInputs load_inputs(const ProblemOptions& options, const Problem& p, bool with_dout,
                       const BeforeTensor& before = {});

// The stored shape of a 4-D tensor of `heads` heads in `layout`.
std::vector<int64_t> layout_shape(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                  Layout layout);

}  // namespace cuflash::cli
