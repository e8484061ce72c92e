#include "bench/results.h"

#include <cmath>
#include <optional>
#include <sstream>

#include "cli/exit_codes.h"

namespace cuflash::bench {

const char* to_string(FailureKind kind) {
  switch (kind) {
    case FailureKind::unsupported: return "unsupported";
    case FailureKind::out_of_memory: return "out_of_memory";
    case FailureKind::cuda_error: return "cuda_error";
    case FailureKind::verification_failed: return "verification_failed";
    case FailureKind::error: return "error";
  }
  return "error";
}

std::optional<double> percent_of_peak(const RunSettings& settings, DType dtype, double tflops) {
  const auto it = settings.peak_tflops.find(std::string(cuflash::to_string(dtype)));
  if (it == settings.peak_tflops.end() || it->second <= 0) return std::nullopt;
  return 100.0 * tflops / it->second;
}

std::optional<double> percent_of_peak_gbps(const RunSettings& settings, double gbps) {
  if (!settings.peak_gbps || *settings.peak_gbps <= 0) return std::nullopt;
  return 100.0 * gbps / *settings.peak_gbps;
}

namespace {

// `text` as a positive, finite number (all of it), or nullopt.
std::optional<double> positive_number(const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value > 0 && std::isfinite(value)) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// One peak of --peak-tflops `whole`.
double peak_tflops(const std::string& text, const std::string& whole) {
  if (const std::optional<double> value = positive_number(text)) return *value;
  throw cli::UsageError("--peak-tflops '" + whole + "': '" + text +
                        "' is not a positive number (expected 989 or fp16=989,bf16=989,fp32=67)");
}

}  // namespace

double parse_peak_gbps(const std::string& text) {
  if (const std::optional<double> value = positive_number(text)) return *value;
  throw cli::UsageError("--peak-gbps '" + text + "': not a positive number (e.g. 4800)");
}

std::map<std::string, double> parse_peak_tflops(const std::string& text) {
  std::map<std::string, double> peaks;
  if (text.find('=') == std::string::npos) {
    const double all = peak_tflops(text, text);
    for (const char* dtype : {"fp16", "bf16", "fp32"}) peaks[dtype] = all;
    return peaks;
  }
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    const std::string dtype = item.substr(0, eq);
    if (eq == std::string::npos || (dtype != "fp16" && dtype != "bf16" && dtype != "fp32")) {
      throw cli::UsageError("--peak-tflops '" + text + "': '" + item +
                            "' is not DTYPE=TFLOPS with DTYPE one of fp16, bf16, fp32");
    }
    peaks[dtype] = peak_tflops(item.substr(eq + 1), text);
  }
  return peaks;
}

const Json* find_member(const Json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

Json failure_json(const CaseRecord& record) {
  Json j = Json::object();
  j["name"] = cli::case_label(record.spec);
  j["pass"] = record.failure ? record.failure->pass : "";
  j["kind"] = record.failure ? to_string(record.failure->kind) : "";
  j["reason"] = record.failure ? record.failure->reason : "";
  j["fatal"] = record.failure ? record.failure->fatal : false;
  j["passes_timed"] = static_cast<int64_t>(record.passes.size());
  return j;
}

}  // namespace cuflash::bench
