// Reading what Nsight Compute prints with `ncu --import REPORT --csv --page raw`: one row per
// profiled kernel, a column per metric, preceded by a row of units. Kept apart from the profiler
// (profiler.h) so that it can be tested on text alone, without ncu or a GPU.
//
// What the parser copes with, since ncu's output varies between versions and settings:
// - lines of ncu's own log ("==PROF== ...", "==WARNING== ...") before or between the CSV lines;
// - quoted fields with commas (template arguments in kernel names), doubled quotes and line
//   breaks; CRLF line ends;
// - numbers with thousands separators ("1,048,576") and scaled units ("usecond", "Gbyte/second")
//   where --print-units base was not in force;
// - values ncu could not collect ("n/a", empty), and metrics absent from the output: no value;
// - the long layout (one row per kernel and metric: "Metric Name", "Metric Unit",
//   "Metric Value"), which other pages and versions print, as well as the wide one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cuflash::bench {

// The fields of each record of CSV `text`, in order. Lines that start with "==" outside a
// quoted field are ncu's log and are skipped; so are empty lines.
std::vector<std::vector<std::string>> parse_csv(const std::string& text);

// A metric's value as ncu printed it, and its unit ("" when none was printed).
struct NcuValue {
  std::string text;
  std::string unit;
};

// One profiled kernel launch.
struct NcuKernel {
  std::string id;     // ncu's launch ID, in launch order
  std::string name;   // the kernel's (demangled) name
  std::string block;  // "(128, 1, 1)", when ncu printed it
  std::string grid;
  std::map<std::string, NcuValue> metrics;  // by ncu metric name
};

// The kernels of `--page raw --csv` output, in the order printed (wide or long layout). Text
// without a header row that names "Kernel Name" gives none.
std::vector<NcuKernel> parse_ncu_kernels(const std::string& text);

// A printed value in base units (seconds, bytes, bytes/second, %, or the unit as printed):
// "1,048,576" byte -> 1048576, "5.5" usecond -> 5.5e-6, "2.1" Tbyte/second -> 2.1e12. Nothing for
// "n/a", "", or text that is not a number.
std::optional<double> ncu_number(const NcuValue& value);

}  // namespace cuflash::bench
