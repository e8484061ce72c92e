#!/usr/bin/env bash
# Stages the Debian-installed header-only dependencies (CLI11, spdlog + fmt, Eigen, Catch2 v2,
# nlohmann-json) with their CMake package files into a relocatable folder (default .deps/,
# git-ignored), for a machine that has no package registry.
# There: cmake --preset gpu -DCMAKE_PREFIX_PATH=$PWD/.deps
#   usage: share/scripts/stage_deps_bundle.sh [DIR]
set -euo pipefail
# -h/--help prints the comment above; any other option is refused (an argument starting with
# "-" would otherwise be taken for a folder).
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  -*) echo "stage_deps_bundle.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac
D=${1:-.deps}
MA=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

# Refuse to clear a folder that is not an earlier bundle: DIR is deleted and made anew.
MARKER=.cuflash-deps-bundle
if [[ -e "$D" && ! -e "$D/$MARKER" && -n "$(ls -A "$D" 2>/dev/null)" ]]; then
  echo "$D exists, is not empty and is not a dependency bundle: give another folder" >&2
  exit 2
fi
rm -rf "$D"
mkdir -p "$D"/include "$D"/lib/cmake "$D"/share/cmake "$D"/share/eigen3
cp -a /usr/include/{CLI,spdlog,fmt,catch2,eigen3,nlohmann} "$D"/include/
# The reference includes only <Eigen/Core>, whose sources are src/Core and src/plugins: the
# other modules (3 MB) and Eigen's unsupported ones (3 MB more) are dropped: a smaller bundle is
# quicker to copy to a GPU machine.
rm -rf "$D"/include/eigen3/unsupported
find "$D"/include/eigen3/Eigen/src -mindepth 1 -maxdepth 1 ! -name Core ! -name plugins \
  -exec rm -rf {} +
# share/cmake/<name>/ climbs three folders to the prefix, in the bundle as in /usr: relocatable.
cp -a /usr/share/cmake/{CLI11,nlohmann_json} "$D"/share/cmake/
cp -a /usr/share/eigen3/cmake "$D"/share/eigen3/
cp -a /usr/lib/cmake/Catch2 "$D"/lib/cmake/
cp -a /usr/lib/"$MA"/cmake/{fmt,spdlog} "$D"/lib/cmake/  # out of the multiarch folder

# The multiarch configs climb one folder more than the bundle has.
sed -i 's#}/\.\./\.\./\.\./\.\./"#}/../../../"#' \
  "$D"/lib/cmake/fmt/fmt-config.cmake "$D"/lib/cmake/spdlog/spdlogConfig.cmake
sed -i '0,/^get_filename_component(_IMPORT_PREFIX "\${_IMPORT_PREFIX}" PATH)$/{//d}' \
  "$D"/lib/cmake/fmt/fmt-targets.cmake "$D"/lib/cmake/spdlog/spdlogConfigTargets.cmake
# Header-only use: drop the references to compiled libraries.
rm -f "$D"/lib/cmake/fmt/fmt-targets-none.cmake \
      "$D"/lib/cmake/spdlog/spdlogConfigTargets-none.cmake \
      "$D"/lib/cmake/Catch2/Catch2Targets-none.cmake
sed -i 's/"Threads::Threads;fmt::fmt"/"Threads::Threads;fmt::fmt-header-only"/' \
  "$D"/lib/cmake/spdlog/spdlogConfigTargets.cmake
touch "$D/$MARKER"
echo "staged $(du -sh "$D" | cut -f1) into $D" >&2
