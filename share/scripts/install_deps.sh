#!/usr/bin/env bash
# Installs cuflash's build and test dependencies from Debian/Ubuntu packages.
# The CUDA toolkit (nvcc >= 12.0) is expected to be installed already.
#   usage: share/scripts/install_deps.sh [--fuzz]   (--fuzz adds clang and its fuzzer runtime)
set -euo pipefail

# -h/--help prints the comment above; any other option is refused (an argument starting with
# "-" would otherwise be taken for a folder).
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  "" | --fuzz) ;;
  -h | --help) usage; exit 0 ;;
  *) echo "install_deps.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
packages=(cmake ninja-build g++ libcli11-dev libspdlog-dev libfmt-dev libeigen3-dev catch2
          nlohmann-json3-dev python3-numpy)
if [[ "${1:-}" == "--fuzz" ]]; then
  packages+=(clang libclang-rt-dev)
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "warning: nvcc not found; install the CUDA toolkit (12.0 or newer) and put its bin/ on PATH" >&2
fi
