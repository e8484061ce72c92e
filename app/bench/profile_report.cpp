#include "bench/profile_report.h"

#include <cstdio>

#include "bench/profiler.h"

namespace cuflash::bench {

namespace {

std::optional<double> figure(const KernelProfile& k, const std::string& key) {
  for (const auto& [name, value] : k.metrics) {
    if (name == key) return value;
  }
  return std::nullopt;
}

// a + b, or nothing when either is missing (a partial sum would read as a whole one).
std::optional<double> sum(const KernelProfile& k, const char* a, const char* b) {
  const std::optional<double> x = figure(k, a), y = figure(k, b);
  if (!x || !y) return std::nullopt;
  return *x + *y;
}

Json number_or_null(const std::optional<double>& value) { return value ? Json(*value) : Json(); }

Json kernel_json(const KernelProfile& k) {
  Json j{{"pass", k.pass}, {"name", k.name}, {"block", k.block}, {"grid", k.grid}};
  for (const auto& [key, value] : k.metrics) j[key] = number_or_null(value);
  j["shared_bytes_per_block"] =
      number_or_null(sum(k, "shared_static_bytes", "shared_dynamic_bytes"));
  j["local_bytes"] = number_or_null(sum(k, "local_load_bytes", "local_store_bytes"));
  return j;
}

std::string fixed(const std::optional<double>& value, const char* format, double scale = 1.0) {
  if (!value) return "n/a";
  char text[48];
  std::snprintf(text, sizeof text, format, *value * scale);
  return text;
}

std::string escape(std::string cell) {
  for (size_t at = cell.find('|'); at != std::string::npos; at = cell.find('|', at + 2)) {
    cell.replace(at, 1, "\\|");
  }
  return cell;
}

std::string row(const std::vector<std::string>& cells) {
  std::string text = "|";
  for (const std::string& c : cells) text += " " + escape(c) + " |";
  return text + "\n";
}

std::string kernel_row(const std::string& case_name, const KernelProfile& k) {
  const auto f = [&](const char* key) { return figure(k, key); };
  return row({k.pass, case_name, short_kernel_name(k.name), k.grid, k.block,
              fixed(f("duration_us"), "%.1f"), fixed(f("sm_throughput_pct"), "%.1f"),
              fixed(f("tensor_mma_pct"), "%.1f") + " / " + fixed(f("tensor_wgmma_pct"), "%.1f"),
              fixed(f("dram_bytes"), "%.1f", 1e-6), fixed(f("dram_gb_per_s"), "%.0f"),
              fixed(f("dram_pct_of_peak"), "%.1f"), fixed(f("achieved_occupancy_pct"), "%.1f"),
              fixed(f("registers_per_thread"), "%.0f"),
              fixed(sum(k, "shared_static_bytes", "shared_dynamic_bytes"), "%.1f", 1.0 / 1024),
              fixed(sum(k, "local_load_bytes", "local_store_bytes"), "%.0f")});
}

std::string text_member(const Json& object, const char* key, const char* fallback) {
  const Json* value = find_member(object, key);
  return value && value->is_string() ? value->get<std::string>() : fallback;
}

std::string profile_header(const Json& meta) {
  std::string out = "\n## Profile (Nsight Compute)\n\n";
  out += "- ncu: " + text_member(meta, "ncu", "not found") + " (" +
         text_member(meta, "ncu_version", "version unknown") + ")\n";
  const std::string unavailable = text_member(meta, "unavailable_reason", "");
  if (!unavailable.empty()) out += "- **not profiled**: " + unavailable + "\n";
  out += "- raw reports (`.ncu-rep`, beside the package, not in it): `" +
         text_member(meta, "reports_dir", "?") +
         "`; each case's command that writes its reports again is in `results.json` "
         "(`profiles[].commands`); read one back with `" +
         text_member(meta, "read_back", "ncu --import REPORT --page raw") + "`\n";
  if (const Json* missing = find_member(meta, "metrics_not_offered");
      missing && missing->is_array() && !missing->empty()) {
    out += "- metrics this ncu does not offer for this GPU (n/a below):";
    for (const Json& m : *missing) out += " `" + m.get<std::string>() + "`";
    out += "\n";
  }
  out += "- one replay of each kernel of one call, clocks as ncu sets them (locked to base by "
         "default): durations differ from the timings above, which are the measurement\n\n";
  return out;
}

}  // namespace

std::string short_kernel_name(const std::string& name) {
  std::string text = name.rfind("void ", 0) == 0 ? name.substr(5) : name;
  return text.substr(0, text.find_first_of("<("));
}

Json profile_json(const CaseRecord& record) {
  const CaseProfile& p = *record.profile;
  Json kernels = Json::array();
  for (const KernelProfile& k : p.kernels) kernels.push_back(kernel_json(k));
  return Json{{"name", cli::case_label(record.spec)},
              {"status", p.status},
              {"reason", p.reason.empty() ? Json() : Json(p.reason)},
              {"reports", p.reports},
              {"commands", p.commands},
              {"kernels", kernels}};
}

Json profiles_json(const std::vector<CaseRecord>& records) {
  Json profiles = Json::array();
  for (const CaseRecord& r : records) {
    if (r.profile) profiles.push_back(profile_json(r));
  }
  return profiles;
}

std::string profile_markdown(const std::vector<CaseRecord>& records,
                             const Json& profile_metadata) {
  bool any = false;
  for (const CaseRecord& r : records) any = any || r.profile.has_value();
  if (!any && profile_metadata.is_null()) return "";
  std::string out = profile_header(profile_metadata);
  out += row({"pass", "case", "kernel", "grid", "block", "time_us", "SM_%",
              "tensor_% mma.sync / wgmma", "DRAM_MB", "DRAM_GB/s", "DRAM_%", "occupancy_%",
              "registers", "smem_KiB/block", "local_bytes"});
  out += "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
         "| ---: | ---: |\n";
  for (const CaseRecord& r : records) {
    if (!r.profile) continue;
    const std::string name = cli::case_label(r.spec);
    for (const KernelProfile& k : r.profile->kernels) out += kernel_row(name, k);
    if (r.profile->status != "ok" || !r.profile->reason.empty()) {
      std::vector<std::string> cells(15, "-");
      cells[1] = name;
      cells[2] = r.profile->status + ": " + r.profile->reason;
      out += row(cells);
    }
  }
  return out;
}

}  // namespace cuflash::bench
