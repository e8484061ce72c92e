#!/usr/bin/env bash
# Candidate patches against the checkout in one GPU call: the trees built side by side (the
# checkout's tracked files as they are, and the same with each patch applied; app only, 16
# build jobs shared among them, at least 4 each), each candidate's `verify` on odd shapes, then
# interleaved rounds of `cuflash bench` on a sweep's cases (checkout, candidate, [second
# candidate, ...]; even rounds in the reverse order) and each candidate's time ratios to the
# checkout in each round: the geometric mean over the cases matching each --group regex, and
# per case in per-case-rN.txt (the first candidate, `cand`) or per-case-candK-rN.txt (the K-th,
# from --patch). A step that would not end by the deadline is left out. Everything but
# summary.txt ends up in OUT_DIR/all.tgz, one file to copy back from a GPU machine.
#
#   share/scripts/ab_patch.sh PATCH OUT_DIR --sweep NAME --pass fwd|bwd|all [--filter REGEX]
#       [--group REGEX]... [--rounds N] [--deadline SECONDS] [--deterministic [--default-too]]
#       [--patch PATCH]...
#
# --patch adds a candidate (cand2, cand3, ...): one call measures several patches against the
# same checkout builds and timings. Each one is its own tree: patches are not combined.
#
# OUT_DIR must be new or empty (everything in it but the summary is packed and removed at the
# end). Defaults: 2 rounds, a deadline of 400 seconds from the start, one group of every case.
# --deterministic (with --pass bwd or all) times and verifies the deterministic backward in every
# tree; --default-too also times the checkout's default mode in each round (one more run, placed
# first, last in even rounds) and gives every tree's deterministic / default speed against it, per
# --group (share/tools/mode_speed.py; per case in mode-speed-TREE-rN.txt). Exit status: 0 when
# every step ran and passed; 1 when a tree, a patch, a build, a candidate's `verify` or a bench run
# failed, or a step was left out for the deadline; 2 for a bad argument.
set -uo pipefail

usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
fail_usage() { echo "ab_patch.sh: $1 (see --help)" >&2; exit 2; }
for argument in "$@"; do
  [[ $argument == -h || $argument == --help ]] && { usage; exit 0; }
done
(($# >= 2)) || fail_usage "PATCH and OUT_DIR are needed"
PATCHES=("$(realpath -e -- "$1" 2>/dev/null)") && [[ -n ${PATCHES[0]} ]] ||
  fail_usage "no patch file $1"
OUT_ARG=$(realpath -m -- "$2") || fail_usage "bad output folder $2"
shift 2
SWEEP='' PASS='' FILTER='.' ROUNDS=2 DEADLINE=400 RATIO_GROUPS=() EXTRA=() DEFAULT_TOO=0
while (($#)); do
  case $1 in
    --deterministic) EXTRA+=(--deterministic); shift; continue ;;
    --default-too) DEFAULT_TOO=1; shift; continue ;;
    --sweep | --pass | --filter | --group | --rounds | --deadline | --patch)
      [[ -n ${2:-} && ${2:-} != --* ]] || fail_usage "$1 needs a value" ;;
    *) fail_usage "unknown argument $1" ;;
  esac
  case $1 in
    --sweep) SWEEP=$2 ;;
    --pass) PASS=$2 ;;
    --filter) FILTER=$2 ;;
    --group) RATIO_GROUPS+=("$2") ;;
    --rounds) ROUNDS=$2 ;;
    --deadline) DEADLINE=$2 ;;
    --patch)
      PATCHES+=("$(realpath -e -- "$2" 2>/dev/null)") && [[ -n ${PATCHES[-1]} ]] ||
        fail_usage "no patch file $2" ;;
  esac
  shift 2
done
[[ -n $SWEEP ]] || fail_usage "--sweep is needed"
[[ $PASS == fwd || $PASS == bwd || $PASS == all ]] || fail_usage "--pass must be fwd, bwd or all"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || fail_usage "--rounds must be a positive integer"
[[ $DEADLINE =~ ^[1-9][0-9]*$ ]] || fail_usage "--deadline must be a positive integer"
((${#EXTRA[@]} == 0)) || [[ $PASS != fwd ]] || fail_usage "--deterministic needs --pass bwd or all"
((DEFAULT_TOO == 0 || ${#EXTRA[@]} > 0)) || fail_usage "--default-too needs --deterministic"
((${#RATIO_GROUPS[@]})) || RATIO_GROUPS=('.')

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# (pack() removes what the run wrote: never a folder that holds anything else, the checkout's
# files above all)
case $ROOT/ in "$OUT_ARG"/*) fail_usage "OUT_DIR $OUT_ARG holds the checkout" ;; esac
if [[ -e $OUT_ARG ]]; then
  [[ -d $OUT_ARG && -z $(ls -A -- "$OUT_ARG") ]] || fail_usage "OUT_DIR $OUT_ARG is not new or empty"
fi
mkdir -p -- "$OUT_ARG/logs" || fail_usage "cannot create $OUT_ARG"
O=$OUT_ARG
cd "$ROOT" || exit 2
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
source share/scripts/patch_trees.sh  # say, checkout_tree, build_apps, cli, ratio, pack

status=0
left_out() { say "no time left for $1"; status=1; }
# Tree names: main, then cand, cand2, cand3, ... for the patches in order.
CANDIDATES=(cand)
for ((k = 2; k <= ${#PATCHES[@]}; ++k)); do CANDIDATES+=("cand$k"); done
TREES=(main "${CANDIDATES[@]}")
say "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) |" \
  "$(for p in "${PATCHES[@]}"; do basename "$p"; done | paste -sd' ')"
# Fresh trees every time (not patch_trees.sh's tree(), which keeps a tree built by an earlier run:
# that one may hold another patch). (git apply from the checkout's root: run inside the folder it
# would look for the paths at the root and skip them without a word.)
for t in "${TREES[@]}"; do checkout_tree "$t" || { say "no tree $t"; pack; exit 1; }; done
for ((k = 0; k < ${#PATCHES[@]}; ++k)); do
  git apply --directory="build/${CANDIDATES[k]}-src" "${PATCHES[k]}" ||
    { say "the patch $(basename "${PATCHES[k]}") does not apply"; pack; exit 1; }
done
build_apps "${TREES[@]}" || { pack; exit 1; }

# The forward cases take a few seconds against the CPU reference; with the backward, ten times
# as long.
verify_flags=()
verify_seconds=40
[[ $PASS != fwd ]] && verify_flags=(--backward "${EXTRA[@]}") && verify_seconds=150
for t in "${CANDIDATES[@]}"; do
  if ((SECONDS + verify_seconds < DEADLINE)); then
    timeout "$verify_seconds" "$(cli "$t")" verify --seq 1,113,1023 --seq-k 203,1024 \
      --head-dim 40,64,128,256 --dtype fp16,bf16 --mask none,causal,causal-top-left \
      "${verify_flags[@]}" >"$O/logs/verify-$t.log" 2>&1
    result=$?
    say "verify $t: rc $result$( ((result == 124)) && echo ' (timed out)') |" \
      "$(tail -1 "$O/logs/verify-$t.log")"
    ((result == 0)) || status=1
  else
    left_out "verify $t"
  fi
done

# A run takes about as long as the one before it; the first gets the bench's own limit.
bench_limit=120
run_seconds=$bench_limit
out_of_time=0
for ((round = 1; round <= ROUNDS && !out_of_time; ++round)); do
  # Even rounds run the trees in reverse: under load the GPU's clock falls within seconds (its
  # power cap), so a tree that always ran first would be timed on a cooler GPU than the others.
  # (main-default: the checkout's default mode, with --default-too)
  runs=("${TREES[@]}")
  ((DEFAULT_TOO)) && runs=(main-default "${TREES[@]}")
  order=("${runs[@]}")
  ((round % 2)) || for ((k = 0; k < ${#runs[@]}; ++k)); do
    order[k]=${runs[${#runs[@]} - 1 - k]}
  done
  for t in "${order[@]}"; do
    # (Out of time: the round's candidates that ran still get their ratios below.)
    ((SECONDS + run_seconds < DEADLINE)) || { left_out "round $round $t"; out_of_time=1; break; }
    began=$SECONDS
    tree=$t mode=("${EXTRA[@]}")
    [[ $t == main-default ]] && tree=main mode=()
    timeout "$bench_limit" "$(cli "$tree")" bench --sweep "$SWEEP" --pass "$PASS" \
      --filter "$FILTER" "${mode[@]}" --out-dir "$O/$t-r$round" >"$O/logs/$t-r$round.log" 2>&1
    result=$?
    say "bench $t round $round: rc $result $((SECONDS - began)) s"
    ((result == 0)) || status=1
    run_seconds=$((SECONDS - began + 5))
  done
  for t in "${CANDIDATES[@]}"; do
    [[ -f $O/main-r$round/results.json && -f $O/$t-r$round/results.json ]] || continue
    for group in "${RATIO_GROUPS[@]}"; do
      ratio "$t/main round $round" "main-r$round" "$t-r$round" "$group"
    done
    per_case=$O/per-case-r$round.txt
    [[ $t == cand ]] || per_case=$O/per-case-$t-r$round.txt
    PER_CASE=1 python3 "$RATIOS" "$O/main-r$round" "$O/$t-r$round" >"$per_case" 2>&1
  done
  if ((!DEFAULT_TOO)) || [[ ! -f $O/main-default-r$round/results.json ]]; then continue; fi
  for t in "${TREES[@]}"; do
    [[ -f $O/$t-r$round/results.json ]] || continue
    for group in "${RATIO_GROUPS[@]}"; do
      mode_speed "$t deterministic / default speed round $round" "main-default-r$round" \
        "$t-r$round" "$group"
    done
    PER_CASE=1 python3 share/tools/mode_speed.py "$O/main-default-r$round" "$O/$t-r$round" \
      >"$O/mode-speed-$t-r$round.txt" 2>&1
  done
done
pack
exit "$status"
