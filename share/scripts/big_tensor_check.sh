#!/usr/bin/env bash
# The host path at scale, on a GPU machine: `cuflash run --backend cuda --backward` on bf16
# tensors of more than 2^31 elements each, its peak host memory against the bound
# 1.2 x (bytes of its input and output tensors) + 256 MiB, and its outputs against the same
# batch entries run alone (first and last), which must agree.
#
#   usage: share/scripts/big_tensor_check.sh WORK_DIR [CUFLASH]
#
# WORK_DIR needs about 45 GB of disk (the big case's inputs and outputs); they are removed at
# the end unless KEEP=1 (the logs stay in WORK_DIR). Shape: BATCH (17) x HEADS (16) x SEQ (65536) x 128, causal: 2.28e9 elements
# a tensor, 4.6 GB each. A summary table comes last; exit 1 when a check failed.
set -uo pipefail

# -h/--help prints the comment above; any other option is refused (an argument starting with
# "-" would otherwise be taken for a folder).
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  -*) echo "big_tensor_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac
WORK=${1:?usage: big_tensor_check.sh WORK_DIR [CUFLASH]}
CLI=${2:-build/gpu/app/cuflash}
BATCH=${BATCH:-17}
HEADS=${HEADS:-16}
SEQ=${SEQ:-65536}
DIM=128
BACKEND=${BACKEND:-cuda}  # cpu: a dry run of the script itself on a small shape
PYTHON=${PYTHON:-python3}  # with numpy
mkdir -p "$WORK" || exit 2
SHAPE=(--heads "$HEADS" -s "$SEQ" -d "$DIM" --dtype bf16 --causal)

# measure NAME COMMAND...: runs COMMAND, logs its output to WORK/NAME.cuflash.log, prints
# "NAME rc=.. wall_s=.. peak_rss_bytes=..": the peak resident set of the child, from the kernel's
# own accounting (getrusage), as /usr/bin/time -v reports it.
measure() {
  local name=$1
  shift
  "$PYTHON" - "$WORK/$name.cuflash.log" "$@" <<'PY'
import resource, subprocess, sys, time
log, command = sys.argv[1], sys.argv[2:]
start = time.time()
with open(log, "w") as out:
    rc = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(f"rc={rc} wall_s={time.time() - start:.1f} peak_rss_bytes={peak}")
PY
}

failed=0
tensor_bytes=$((BATCH * HEADS * SEQ * DIM * 2))
lse_bytes=$((BATCH * HEADS * SEQ * 4))
all_bytes=$((8 * tensor_bytes + lse_bytes))  # q, k, v, dout in; o, dq, dk, dv, lse out
bound=$(python3 -c "print(int(1.2 * $all_bytes + 256 * 2**20))")

echo "== big case: -b $BATCH ${SHAPE[*]} --backward (generated, inputs saved)"
big=$(measure big "$CLI" run --backend "$BACKEND" --backward -b "$BATCH" "${SHAPE[@]}" --seed 7 -v \
        --save-inputs --out-dir "$WORK/big")
echo "$big"
big_rss=$(sed -n 's/.*peak_rss_bytes=//p' <<<"$big")
[[ $big == rc=0* && $big_rss -le $bound ]] || failed=1

echo "== the same inputs read from the files (no output folder)"
files=$(measure from_files "$CLI" run --backend "$BACKEND" --backward --causal -v \
          --q "$WORK/big/q.npy" --k "$WORK/big/k.npy" --v "$WORK/big/v.npy" \
          --dout "$WORK/big/dout.npy")
echo "$files"
files_rss=$(sed -n 's/.*peak_rss_bytes=//p' <<<"$files")
[[ $files == rc=0* && $files_rss -le $bound ]] || failed=1

echo "== batch entries 0 and $((BATCH - 1)) run alone, compared with the big run's"
"$PYTHON" - "$WORK" "$CLI" "$BATCH" "$BACKEND" <<'PY' || failed=1
import subprocess, sys
import numpy as np
work, cli, batch, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def load(path):
    return np.load(path, mmap_mode="r")
def as_float(x):
    x = np.asarray(x)
    if x.dtype.itemsize == 2 and x.dtype.kind in "Viu":
        return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)
ok = True
for b in (0, batch - 1):
    d = f"{work}/slice{b}"
    subprocess.run(["mkdir", "-p", d], check=True)
    for name in ("q", "k", "v", "dout"):
        np.save(f"{d}/in_{name}.npy", np.ascontiguousarray(load(f"{work}/big/{name}.npy")[b:b + 1]))
    subprocess.run([cli, "run", "--backend", backend, "--backward", "--causal", "-q",
                    "--q", f"{d}/in_q.npy", "--k", f"{d}/in_k.npy", "--v", f"{d}/in_v.npy",
                    "--dout", f"{d}/in_dout.npy", "--out-dir", f"{d}/out"],
                   check=True, stdout=subprocess.DEVNULL)
    for name in ("o", "lse", "dq", "dk", "dv"):
        alone = as_float(load(f"{d}/out/{name}.npy"))
        big = as_float(load(f"{work}/big/{name}.npy")[b:b + 1])
        finite = bool(np.isfinite(alone).all() and np.isfinite(big).all())
        err = float(np.abs(alone - big).max()) / max(1.0, float(np.abs(big).max()))
        same = bool(np.array_equal(alone, big))
        # dQ sums over key blocks with atomics, so its order (and last bit) may differ.
        good = finite and (same or (name == "dq" and err <= 2 ** -7))
        ok &= good
        print(f"batch {b} {name}: {'bitwise equal' if same else f'max rel diff {err:.2e}'}"
              f"{'' if finite else ', NON-FINITE'} -> {'ok' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
PY

echo
echo "tensor bytes $tensor_bytes x 8 + lse $lse_bytes = $all_bytes; bound $bound bytes"
echo "generated + saved: peak $big_rss bytes ($(python3 -c "print(f'{$big_rss / $all_bytes:.3f}')")x the tensors)"
echo "from files:        peak $files_rss bytes ($(python3 -c "print(f'{$files_rss / $all_bytes:.3f}')")x the tensors)"
[[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK/big" "$WORK"/slice*
if ((failed)); then echo "big tensor check: FAIL"; exit 1; fi
echo "big tensor check: PASS"
