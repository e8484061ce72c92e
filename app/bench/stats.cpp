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

double round_spread(const std::vector<double>& samples_ms, const std::vector<int>& round_samples) {
  if (round_samples.size() < 2 || samples_ms.empty()) return 0;
  double lowest = INFINITY, highest = 0;
  size_t first = 0;
  for (const int count : round_samples) {
    const size_t end = std::min(samples_ms.size(), first + static_cast<size_t>(count));
    if (end > first) {
      const double median =
          summarize({samples_ms.begin() + std::ptrdiff_t(first), samples_ms.begin() + std::ptrdiff_t(end)})
              .median;
      lowest = std::min(lowest, median);
      highest = std::max(highest, median);
    }
    first = end;
  }
  const double median = summarize(samples_ms).median;
  return median > 0 && highest >= lowest ? (highest - lowest) / median : 0;
}

namespace {

double visible_pairs_of(const Problem& p) {
  const double sq = double(p.shape.seq_q), sk = double(p.shape.seq_k);
  if (!p.masked()) return sq * sk;
  // A row at a time: the band's two ends move by one key per row, clipped at 0 and Sk.
  const VisibleBand band = p.band();
  double pairs = 0;
  for (int64_t row = 0; row < p.shape.seq_q; ++row) {
    pairs += double(std::max<int64_t>(band.end(row, p.shape.seq_k) - band.begin(row), 0));
  }
  return pairs;
}

}  // namespace

double visible_pairs(const Problem& p) {
  if (p.varlen()) {  // the sum over the sequences, each its own problem (batch 1)
    double sum = 0;
    for (int64_t b = 0; b < p.sequences(); ++b) sum += visible_pairs_of(p.sequence(b));
    return sum;
  }
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
  if (p.varlen()) {  // the sum over the sequences
    double sum = 0;
    for (int64_t b = 0; b < p.sequences(); ++b) sum += pass_bytes(p.sequence(b), pass);
    return sum;
  }
  const AttentionShape& s = p.shape;
  const double element = dtype_size(p.dtype);
  const double q_bytes = double(s.q_elements()) * element;
  // The keys some query sees, from the first row's band start to the last row's band end
  // (a window or a top-left causal mask with seq_q < seq_k leaves the others unread).
  const VisibleBand band = visible_band(s, p.mask, p.window);
  const int64_t first_key = band.begin(0);
  const int64_t key_end = band.end(s.seq_q - 1, s.seq_k);
  double keys = double(s.batch) * double(std::max<int64_t>(key_end - first_key, 0));
  if (!p.cache_seqlens.empty()) {  // no window with cache lengths (check_case_size())
    keys = 0;
    for (const int64_t length : p.cache_seqlens) keys += double(length);
  }
  const double kv_bytes = keys * double(s.heads_kv) * double(s.head_dim) * element;  // K or V
  if (pass == "bwd") {
    // dK and dV are written whole, zeros where no query sees a key.
    const double kv_written = double(s.kv_elements()) * element;
    return 4 * q_bytes + 2 * kv_bytes + 2 * kv_written;
  }
  return 2 * q_bytes + 2 * kv_bytes;
}

double gb_per_second(double bytes, double milliseconds) {
  return milliseconds > 0 ? bytes / (milliseconds * 1e-3) / 1e9 : 0.0;
}

double tflops(double flops, double milliseconds) {
  return milliseconds > 0 ? flops / (milliseconds * 1e-3) / 1e12 : 0.0;
}

}  // namespace cuflash::bench
