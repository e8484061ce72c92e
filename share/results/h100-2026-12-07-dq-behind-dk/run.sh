#!/usr/bin/env bash
# One GPU call: the two candidates of the 80-row backward against the checkout (ab_patch.sh, `fa`
# head_dim 128 from 2k rows, both masks), then the checkout's backward at `seed`'s 4k shape with
# 8 and 64 heads, warm and with L2 flushed (--cold), and with 8 heads sustained 20x longer,
# the SM clock and power logged meanwhile (heads.tgz).
#   share/results/h100-2026-12-07-dq-behind-dk/run.sh OUT_DIR
set -uo pipefail
HERE=share/results/h100-2026-12-07-dq-behind-dk
O=$1
share/scripts/ab_patch.sh share/results/h100-2026-12-06-bwd-rows-async/next/dq-behind-dk.patch \
  "$O/ab" --patch "$HERE/dq-behind-dk-early-slot.patch" --sweep fa --pass bwd --rounds 3 \
  --group 'd:128/.*causal:0' --group 'd:128/.*causal:1' \
  --filter 'sq:(2048|4096|8192|16384)/sk:[0-9]+/d:128/' --deadline 380 >"$O/ab.log" 2>&1
echo "ab_patch.sh: rc $?"
cuflash=build/main-src/build/gpu/app/cuflash
mkdir -p "$O/heads"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 >"$O/heads/clocks.csv" 2>&1 &
logger=$!
for heads in 8 64; do
  "$cuflash" bench -b 1 --heads $heads -s 4096 -d 128 --dtype bf16 --pass bwd --rounds 3 \
    >"$O/heads/heads-$heads.txt" 2>&1
  "$cuflash" bench -b 1 --heads $heads -s 4096 -d 128 --dtype bf16 --pass bwd --rounds 3 --cold \
    >"$O/heads/heads-$heads-cold.txt" 2>&1
done
"$cuflash" bench -b 1 --heads 8 -s 4096 -d 128 --dtype bf16 --pass bwd --rounds 3 --iters 600 \
  >"$O/heads/heads-8-sustained.txt" 2>&1
kill $logger
tail -n 4 "$O"/heads/heads-*.txt
tar -czf "$O/heads.tgz" -C "$O" heads && rm -rf "$O/heads"
tail -30 "$O/ab/summary.txt"
