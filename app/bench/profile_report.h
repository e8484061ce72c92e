// How `bench --profile`'s figures (profiler.h) appear in the outputs: a "profiles" array in the
// JSON document (results.json) and a section of results.md.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"

namespace cuflash::bench {

// One case's profile: {"name", "status", "reason", "reports", "commands", "kernels": [{"pass",
// "name", "block", "grid", the figures of kProfileMetrics (null: n/a),
// "shared_bytes_per_block", "local_bytes"}]}. Needs record.profile.
Json profile_json(const CaseRecord& record);

// The profiles of the records that have one, in order; empty when none has.
Json profiles_json(const std::vector<CaseRecord>& records);

// results.md's "Profile" section: where the reports are, then one row per kernel (or per case
// that has none, with the reason). `profile_metadata`: metadata.json's "profile"; when it is
// null and no record has a profile, the section is empty (no --profile).
std::string profile_markdown(const std::vector<CaseRecord>& records, const Json& profile_metadata);

// "void ns::kernel<Traits<64>>(Params)" -> "ns::kernel": the name without return type, template
// arguments or parameters, for tables.
std::string short_kernel_name(const std::string& name);

}  // namespace cuflash::bench
