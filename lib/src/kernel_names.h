// Kernel names as LaunchRecord reports them (cuflash/attention.h): plain C++, so that the host
// unit tests check it without a GPU.
#pragma once

#include <string>

namespace cuflash::detail {

// A kernel's demangled name as profilers show it ("void cuflash::detail::sm90::forward_kernel<
// __half, ...>(cuflash::detail::sm90::ForwardTmaParams<__half>)") without the return type, the
// parameter list and the namespace cuflash::detail:: ("sm90::forward_kernel<__half, ...>").
// Another name (a mangled one the runtime could not demangle) comes back as it is.
inline std::string display_kernel_name(std::string name) {
  const std::string kVoid = "void ";
  if (name.compare(0, kVoid.size(), kVoid) != 0) return name;
  name.erase(0, kVoid.size());
  // The parameter list: the parenthesis that closes the name and the one that opens it.
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.erase(i);
        break;
      }
    }
  }
  const std::string kDetail = "cuflash::detail::";
  for (size_t at = name.find(kDetail); at != std::string::npos; at = name.find(kDetail, at)) {
    name.erase(at, kDetail.size());
  }
  return name;
}

}  // namespace cuflash::detail
