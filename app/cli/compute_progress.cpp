#include "cli/compute_progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cli/interrupt.h"

namespace cuflash::cli {

namespace {

constexpr int64_t kFirstDrawNs = 500'000'000;
constexpr int64_t kRedrawNs = 250'000'000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string duration_text(double seconds) {
  char buffer[32];
  if (seconds < 120) {
    std::snprintf(buffer, sizeof buffer, "%.0f s", seconds);
  } else if (seconds < 2 * 3600) {
    std::snprintf(buffer, sizeof buffer, "%.1f min", seconds / 60);
  } else if (seconds < 2 * 86400) {
    std::snprintf(buffer, sizeof buffer, "%.1f h", seconds / 3600);
  } else if (seconds < 2 * 365 * 86400.0) {
    std::snprintf(buffer, sizeof buffer, "%.1f days", seconds / 86400);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1f years", seconds / (365 * 86400.0));
  }
  return buffer;
}

}  // namespace

ComputeProgress::ComputeProgress(bool show)
    : show_(show && isatty(STDERR_FILENO)), next_draw_ns_(now_ns() + kFirstDrawNs) {}

ComputeProgress::~ComputeProgress() {
  const std::lock_guard<std::mutex> lock(draw_);
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

StageProgress ComputeProgress::callback() {
  return [this](const char* stage, int64_t done, int64_t total) {
    return report(stage, done, total);
  };
}

bool ComputeProgress::report(const char* stage, int64_t done, int64_t total) {
  if (interrupt_requested()) return false;
  if (!show_) return true;
  const int64_t now = now_ns();
  const char* current = stage_.load(std::memory_order_relaxed);
  if (current != stage && stage_.compare_exchange_strong(current, stage)) {
    stage_start_ns_.store(now);  // the stage's first report (done = 0) starts its clock
  }
  if (now < next_draw_ns_.load(std::memory_order_relaxed)) return true;
  const std::unique_lock<std::mutex> lock(draw_, std::try_to_lock);
  if (!lock.owns_lock()) return true;
  const double elapsed = double(now - stage_start_ns_.load()) * 1e-9;
  std::string left;
  if (done > 0 && elapsed > 0) {
    left = ", about " + duration_text(elapsed / double(done) * double(total - done)) + " left";
  }
  std::fprintf(stderr, "\r\033[KCPU reference, %s: %.1f%% (%lld/%lld blocks), %s elapsed%s",
               stage, 100.0 * double(done) / double(total), static_cast<long long>(done),
               static_cast<long long>(total), duration_text(elapsed).c_str(), left.c_str());
  std::fflush(stderr);
  drawn_ = true;
  next_draw_ns_.store(now + kRedrawNs, std::memory_order_relaxed);
  return true;
}

}  // namespace cuflash::cli
