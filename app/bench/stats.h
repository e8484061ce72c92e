// Numbers derived from timings: summary statistics of samples and the FLOP counts that TFLOP/s
// figures divide by.
#pragma once

#include <string>
#include <vector>

#include "cuflash/problem.h"

namespace cuflash::bench {

// Summary of timing samples (milliseconds). noise is the relative standard deviation
// (stddev / mean, the coefficient of variation); stddev uses n - 1 (0 for a single sample).
struct SampleStats {
  size_t count = 0;
  double median = 0, mean = 0, min = 0, max = 0, stddev = 0, noise = 0;
};

// Throws std::invalid_argument for an empty list.
SampleStats summarize(std::vector<double> samples_ms);

// How far apart the rounds of a pass landed: (largest - smallest median of a round) / the median
// of all samples; `round_samples` counts the samples of each round, in order. 0 with fewer than
// two rounds.
double round_spread(const std::vector<double>& samples_ms, const std::vector<int>& round_samples);

// (query, key) pairs the mask lets through, summed over one (batch, head): Sq*Sk without a mask;
// for causal masks the visible part of the triangle (rows that see no key add nothing). With
// cache_seqlens, the mean over the batch entries, each with its own key length. For a varlen
// batch (batch 1 of packed tokens), the sum over its sequences, each with its own lengths.
double visible_pairs(const Problem& p);

// FLOPs credited to one call: forward 4 * B * H * D per visible pair (two matrix products of
// 2 FLOPs per multiply-add), backward 2.5x the forward (five products instead of two).
double forward_flops(const Problem& p);
double pass_flops(const Problem& p, const std::string& pass);  // "fwd" or "bwd"

double tflops(double flops, double milliseconds);

// Bytes one call must move at least: forward reads Q and, once, the K and V rows each batch
// entry has (its cache length's keys with cache_seqlens, else seq_k) and writes O; backward
// reads Q, K, V, O, dO and writes dQ, dK, dV. LSE and workspaces are left out.
double pass_bytes(const Problem& p, const std::string& pass);

double gb_per_second(double bytes, double milliseconds);  // 10^9 bytes per second

}  // namespace cuflash::bench
