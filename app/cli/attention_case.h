// Inputs of one attention case, generated or read from .npy files, and the conversions between
// the CLI's working form (float64 values in [batch, heads, seq, head_dim] order, each exactly
// representable in the case's dtype) and tensors in the user's layout and dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/problem_options.h"
#include "cuflash/io/npy.h"

namespace cuflash::cli {

// Values in bhsd order, already rounded to the case's dtype.
struct CaseInputs {
  std::vector<double> q, k, v;
  std::vector<double> dout;  // empty unless the backward pass needs it
};

// Called before each tensor is generated or read, e.g. to stop on Ctrl-C by throwing.
using BeforeTensor = std::function<void()>;

// Seeded standard-normal inputs (never zeros), rounded to the dtype: io::random_input_values(),
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

// A 4-D tensor of `heads` heads between bhsd order and the given layout.
std::vector<double> bhsd_to_layout(const std::vector<double>& bhsd, int64_t batch, int64_t heads,
                                   int64_t seq, int64_t head_dim, Layout layout);
std::vector<double> layout_to_bhsd(const std::vector<double>& in_layout, int64_t batch,
                                   int64_t heads, int64_t seq, int64_t head_dim, Layout layout);
std::vector<int64_t> layout_shape(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                  Layout layout);

// Rounds every value to the nearest value representable in `dtype`.
void round_to_dtype(std::vector<double>& values, DType dtype);

}  // namespace cuflash::cli
