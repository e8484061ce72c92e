#!/usr/bin/env bash
# The kernels walk-landing.patch leaves one key block a CTA (deterministic, variants) read 1.5 %
# (variants) and 1.7 % (deterministic `seed`, head_dim 128 up to 8.6 %) slower with the patch in
# `measure.sh short` (landed-h100/call1-short), where each tree's runs came one after the other.
# This times them again interleaved, two rounds, and lists every kernel whose registers, stack
# or spills differ between the two builds (cuobjdump -res-usage). About 6 minutes.
#
#   share/results/h200-2026-12-05-backward-walk/next/recheck.sh [OUT_DIR]   (default: out)
set -uo pipefail
ROOT=$(pwd)
NEXT=share/results/h200-2026-12-05-backward-walk/next
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, tree, build, cli, ratio, pack
T="timeout 120"

tree base && tree short "$NEXT/walk-landing.patch" || exit 1
build base 8 OFF cuflash_app &
build short 8 OFF cuflash_app &
wait
for t in base short; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

for r in 1 2; do
  for t in base short; do
    $T $(cli $t) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16)' \
      --out-dir "$O/$t-det-r$r" >"$O/logs/$t-det-r$r.log" 2>&1
    $T $(cli $t) bench --sweep variants --pass bwd --out-dir "$O/$t-variants-r$r" \
      >"$O/logs/$t-variants-r$r.log" 2>&1
    $T $(cli $t) bench --sweep seed --pass bwd --filter 'd:128' --out-dir "$O/$t-seed128-r$r" \
      >"$O/logs/$t-seed128-r$r.log" 2>&1
  done
  ratio "short/base deterministic r$r" base-det-r$r short-det-r$r . 'd:64' 'd:128'
  ratio "short/base variants r$r" base-variants-r$r short-variants-r$r .
  ratio "short/base seed d128 r$r" base-seed128-r$r short-seed128-r$r .
done
PER_CASE=1 python3 $RATIOS "$O/base-det-r2" "$O/short-det-r2" >"$O/per-case-det-r2.txt"

# Registers, stack and spills of every kernel in each build.
for t in base short; do
  cuobjdump -res-usage $(cli $t) >"$O/res-$t.txt" 2>&1
done
python3 - "$O/res-base.txt" "$O/res-short.txt" >"$O/res-diff.txt" <<'PY'
import re, sys
def usage(path):
    out, name = {}, None
    for line in open(path):
        m = re.match(r"\s*Function (\S+):", line)
        if m: name = m.group(1); continue
        if name and "REG:" in line: out[name] = line.split(); name = None
    return out
a, b = usage(sys.argv[1]), usage(sys.argv[2])
print(f"kernels: base {len(a)}, short {len(b)}, in both {len(set(a) & set(b))}")
for k in sorted(set(a) & set(b)):
    if a[k] != b[k]: print(k[:160], "\n   base ", " ".join(a[k]), "\n   short", " ".join(b[k]))
PY
say "res-usage: $(head -1 "$O/res-diff.txt"), $(grep -c '^   base' "$O/res-diff.txt") differ"
pack
