#!/usr/bin/env bash
# The deterministic walk against main's deterministic backward (one key block a CTA), same GPU
# call: both trees built side by side (app only), then two interleaved rounds of `fa` backward
# at 512 and 1k rows: main deterministic, candidate deterministic, candidate default.
# det_speed.py gives each deterministic run's speed relative to the candidate's default run.
#
#   share/results/<this folder>/ab.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
HERE=$(dirname "${BASH_SOURCE[0]}")
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, checkout_tree, build_apps, cli, pack
say "$(nvidia-smi --query-gpu=name --format=csv,noheader)"
checkout_tree main HEAD && checkout_tree cand || exit 1
build_apps main cand || { pack; exit 1; }
bench() {  # bench TREE NAME [FLAGS...]
  local tree=$1 name=$2
  shift 2
  timeout 60 "$(cli "$tree")" bench --sweep fa --pass bwd --filter 'sq:(512|1024)/' --rounds 2 \
    "$@" --out-dir "$O/$name" >"$O/logs/$name.log" 2>&1
  say "$name: rc $?"
}
for round in 1 2; do
  bench main main-det-$round --deterministic
  bench cand cand-det-$round --deterministic
  bench cand cand-default-$round
done
say "main deterministic / candidate default:"
python3 "$HERE/det_speed.py" "$O/cand-default-1" "$O/main-det-1" "$O/cand-default-2" \
  "$O/main-det-2" | tee -a "$SUMMARY"
say "candidate deterministic / candidate default:"
python3 "$HERE/det_speed.py" "$O/cand-default-1" "$O/cand-det-1" "$O/cand-default-2" \
  "$O/cand-det-2" | tee -a "$SUMMARY"
pack
