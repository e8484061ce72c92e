#!/usr/bin/env bash
# ptxas on the kernels of one instantiation file, one kernel at a time: registers, spills and
# ptxas's notes on wgmma (C7510-C7519: products serialized, or a wait or arrive it injected) for
# each. The file is compiled to PTX once with the build's own command (nvcc, seconds), then each
# entry goes through ptxas alone (about a second): a change to a kernel's schedule is checked in
# a minute, where the object file takes minutes. (A full build's log carries the same notes:
# share/scripts/check_wgmma_pipelines.py reads them there.)
#   usage: share/scripts/ptxas_kernels.sh [--build DIR] FILE [REGEX]
#   FILE: an instantiation, e.g. bwd_fp16_d128 (DIR/lib/instantiations/FILE.cu); REGEX picks
#   kernels by mangled name (default: every kernel). DIR: a configured build (default build/ci).
#   e.g. share/scripts/ptxas_kernels.sh bwd_fp16_d128 'sm9015backward_kernel'
# Exit status: 0 every kernel assembled; 1 nvcc or ptxas failed; 2 a bad argument.
set -uo pipefail
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
BUILD=build/ci
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  --build) BUILD=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
esac
FILE=${1:-}
REGEX=${2:-.}
[[ -n $FILE && $FILE != -* ]] || { usage >&2; exit 2; }
object=lib/CMakeFiles/cuflash.dir/instantiations/$FILE.cu.o
command=$(ninja -C "$BUILD" -t commands "$object" 2>/dev/null | tail -1)
[[ $command == *nvcc* ]] || {
  echo "ptxas_kernels.sh: no build command for $FILE in $BUILD (configured? the file's name?)" >&2
  exit 2
}
work=$(mktemp -d "${TMPDIR:-/tmp}/ptxas_kernels.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The build's command, to PTX: its dependency-file and object flags dropped, and -lineinfo,
# whose debug sections an entry taken alone would refer to without holding them.
read -ra words <<<"$command"
nvcc=()
for ((i = 0; i < ${#words[@]}; ++i)); do
  case ${words[i]} in
    -MD | -c | -lineinfo) ;;
    -MT | -MF | -o) ((++i)) ;;
    *) nvcc+=("${words[i]}") ;;
  esac
done
if ! (cd "$BUILD" && "${nvcc[@]}" -ptx -o "$work/all.ptx"); then
  echo "ptxas_kernels.sh: nvcc failed" >&2
  exit 1
fi

# Each entry with everything before the first entry (version, target, shared declarations).
awk -v dir="$work" '
  /^\.(visible )?\.entry / {
    n++; file = sprintf("%s/entry%04d.ptx", dir, n); system("cp " dir "/head.ptx " file)
  }
  n == 0 { print > (dir "/head.ptx"); next }
  { print >> file }' "$work/all.ptx"
status=0
for entry in "$work"/entry*.ptx; do
  name=$(grep -m1 -oE '\.entry [A-Za-z0-9_]+' "$entry" | cut -d' ' -f2)
  [[ $name =~ $REGEX ]] || continue
  shown=$name
  command -v c++filt >/dev/null && shown=$(c++filt -- "$name")
  echo "== $shown"
  if ! ptxas -arch=sm_90a -O3 -v "$entry" -o "$work/entry.cubin" >"$work/ptxas.log" 2>&1; then
    status=1
  fi
  wanted='Used [0-9]+ registers|[0-9]+ bytes spill stores, [0-9]+ bytes spill loads'
  wanted+='|\(C75[0-9][0-9]\)[^'"'"']*|error.*'
  grep -oE "$wanted" "$work/ptxas.log" | sed 's/^/   /'
done
exit "$status"
