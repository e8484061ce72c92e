#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace cuflash::bench {

SampleStats summarize(std::vector<double> ms) {
  if (ms.empty()) throw std::invalid_argument("summarize: no samples");
  std::sort(ms.begin(), ms.end());
  SampleStats s;
  const size_t n = ms.size();
  s.count = n;
  s.median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.min = ms.front();
  s.max = ms.back();
  s.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / double(n);
  double squares = 0;
  for (const double x : ms) squares += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(squares / double(n - 1)) : 0.0;
  s.noise = s.mean > 0 ? s.stddev / s.mean : 0.0;
  return s;
}

namespace {

double visible_pairs_of(const Problem& p) {
  const double sq = double(p.shape.seq_q), sk = double(p.shape.seq_k);
  if (p.mask == Mask::none) return sq * sk;
  // Row i sees min(max(i + offset + 1, 0), Sk) keys. Summed in closed form over three ranges:
  // rows that see nothing, rows on the diagonal band (1..Sk-1 keys), rows that see every key.
  const double offset = double(causal_offset(p.mask, p.shape.seq_q, p.shape.seq_k));
  const double first_seeing = std::clamp(-offset, 0.0, sq);           // first row with >= 1 key
  const double first_full = std::clamp(sk - 1 - offset, 0.0, sq);     // first row with all Sk
  const double band_rows = std::max(0.0, first_full - first_seeing);
  // Keys seen by rows first_seeing .. first_full-1: an arithmetic series.
  const double first_count = first_seeing + offset + 1;
  const double band = band_rows * (2 * first_count + band_rows - 1) / 2;
  return band + (sq - std::max(first_full, first_seeing)) * sk;
}

}  // namespace

double visible_pairs(const Problem& p) {
  if (p.cache_seqlens.empty()) return visible_pairs_of(p);
  double sum = 0;
  for (const int64_t length : p.cache_seqlens) {
    Problem entry = p;
    entry.shape.seq_k = length;
    sum += visible_pairs_of(entry);
  }
  return sum / double(p.cache_seqlens.size());
}

double forward_flops(const Problem& p) {
  const AttentionShape& s = p.shape;
  return 4.0 * double(s.batch) * double(s.heads) * double(s.head_dim) * visible_pairs(p);
}

double pass_flops(const Problem& p, const std::string& pass) {
  return pass == "bwd" ? 2.5 * forward_flops(p) : forward_flops(p);
}

double pass_bytes(const Problem& p, const std::string& pass) {
  const AttentionShape& s = p.shape;
  const double element = dtype_size(p.dtype);
  const double q_bytes = double(s.q_elements()) * element;
  double keys = double(s.batch) * double(s.seq_k);  // summed over the batch entries
  if (!p.cache_seqlens.empty()) {
    keys = 0;
    for (const int64_t length : p.cache_seqlens) keys += double(length);
  }
  const double kv_bytes = keys * double(s.heads_kv) * double(s.head_dim) * element;  // K or V
  if (pass == "bwd") return 4 * q_bytes + 4 * kv_bytes;
  return 2 * q_bytes + 2 * kv_bytes;
}

double gb_per_second(double bytes, double milliseconds) {
  return milliseconds > 0 ? bytes / (milliseconds * 1e-3) / 1e9 : 0.0;
}

double tflops(double flops, double milliseconds) {
  return milliseconds > 0 ? flops / (milliseconds * 1e-3) / 1e12 : 0.0;
}

}  // namespace cuflash::bench
