// Byte counts for people: "512 B", "3.2 KiB", "48.3 GiB", "1.1 TiB".
#pragma once

#include <cstdio>
#include <string>

namespace cuflash::cli {

inline std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return buffer;
}

}  // namespace cuflash::cli
