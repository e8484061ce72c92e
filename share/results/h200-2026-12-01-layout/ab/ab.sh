#!/usr/bin/env bash
# A/B timing of two cuflash builds in one session: old (.ab/old) and new (this tree), interleaved.
set -uo pipefail
OUT=$1; shift
S=$SECONDS
(cd .ab/old && cmake --preset gpu -DCMAKE_PREFIX_PATH=$PWD/../../.deps -DCUFLASH_BUILD_TESTS=OFF -DCUFLASH_BUILD_EXAMPLES=OFF >/dev/null && cmake --build build/gpu -j16 --target cuflash_app >/dev/null) &
cmake --preset gpu -DCMAKE_PREFIX_PATH=$PWD/.deps -DCUFLASH_BUILD_TESTS=OFF -DCUFLASH_BUILD_EXAMPLES=OFF >/dev/null && cmake --build build/gpu -j16 --target cuflash_app >/dev/null
wait
echo "built in $((SECONDS-S)) s"
for round in 1 2; do
  for side in old new; do
    bin=build/gpu/app/cuflash; [[ $side == old ]] && bin=.ab/old/build/gpu/app/cuflash
    "$bin" bench --sweep "$@" --format json > "$OUT/$side-$round.json" 2> "$OUT/$side-$round.log" || echo "$side $round failed"
  done
done
echo "benched in $((SECONDS-S)) s"
