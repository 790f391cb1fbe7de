#!/usr/bin/env bash
# Checks the GPU path of `trainer train` against the CPU path, on a machine
# with NVIDIA GPUs (this project's CI has none; run it by hand on a GPU
# instance, e.g. a g5.xlarge, or p3.8xlarge for the multi-GPU part).
#
# Prerequisites: the NVIDIA driver (libcuda.so.1, nvidia-smi), the CUDA 12.x
# libraries cuBLAS, NVRTC and NCCL (e.g. `apt-get install cuda-libraries-12-8
# libnccl2`), a Rust toolchain, python3; for the multi-GPU part, a node of a
# formed cluster (ranks started by `trainer launch` read the agent's node
# config and state) with `ssh localhost` working in BatchMode, as on the
# cluster's master.
#
# What it does, for the MLP and LeNet on the MNIST fixture (scripts/mnist-fixture,
# or --data DIR with the four idx files):
#   1. trains with --device cpu and --device cuda, same seed, epochs and batch;
#   2. compares the last epoch's loss (within LOSS_TOL, relative) and test
#      accuracy (within ACC_TOL points), and the final weights from the two
#      runs' last checkpoints (relative L2 distance within WEIGHT_TOL): float
#      sums on a GPU run in another order, so the runs drift apart slowly but
#      must not diverge;
#   3. with more than one GPU, trains through `trainer launch` on one GPU
#      (--nproc-per-node 1) and on all of them (--nproc-per-node auto, one
#      rank per GPU, NCCL all-reduce) with the same global batch, and compares
#      the two the same way (both launched: the agent's generation seeds the
#      shuffle, so a run outside `trainer launch` sees another sample order).
#
# Usage: scripts/gpu-check.sh [--data DIR] [--epochs N]
# Exit codes: 0 every comparison within tolerance, 1 some comparison failed,
# 2 no GPU here, or a usage or setup error.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

EPOCHS=3
BATCH=64
SEED=7
LR=0.05
LOSS_TOL=0.02   # relative difference of the last epoch's mean training loss
ACC_TOL=1.0     # test accuracy, percentage points
WEIGHT_TOL=0.02 # |w_gpu - w_cpu| / |w_cpu|, L2 over the flat parameter vector

data=
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --epochs) EPOCHS=${2:?--epochs needs a number}; shift 2 ;;
    *) echo "gpu-check: unknown argument $1 (usage: scripts/gpu-check.sh [--data DIR] [--epochs N])" >&2; exit 2 ;;
  esac
done

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' || [ "${gpus:-0}" -eq 0 ]; then
  echo "gpu-check: no GPU on this host (no libcuda.so.1 or nvidia-smi lists no GPU): run it on a GPU instance with the NVIDIA driver and CUDA 12 libraries" >&2
  exit 2
fi
echo "gpu-check: $gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

if [ -z "$data" ]; then
  data=$(scripts/mnist-fixture)
fi
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -s "$data/$f" ] || { echo "gpu-check: $data/$f is missing: pass --data DIR with the four MNIST idx files" >&2; exit 2; }
done

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${HOME:?}/.cache/deeplearning-cluster/target}
cargo build --quiet --release --locked -p trainer
trainer=$CARGO_TARGET_DIR/release/trainer

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

# train NAME MODEL DEVICE [launch...]: one run; its epoch lines go to $work/NAME.out.
train() {
  local name=$1 model=$2 device=$3
  shift 3
  "$@" "$trainer" train --model "$model" --data "$data" --epochs "$EPOCHS" --batch-size "$BATCH" \
    --lr "$LR" --seed "$SEED" --device "$device" --checkpoint-dir "$work/$name/checkpoints" \
    --tb-dir "$work/$name/tb" >"$work/$name.out"
  tail -1 "$work/$name.out"
}

# compare A B: the last epoch lines and the newest checkpoints of runs A and B.
compare() {
  python3 - "$work" "$1" "$2" "$LOSS_TOL" "$ACC_TOL" "$WEIGHT_TOL" <<'EOF'
import glob, json, math, os, re, struct, sys
from array import array

work, a, b = sys.argv[1:4]
loss_tol, acc_tol, weight_tol = map(float, sys.argv[4:7])

def last_epoch(name):
    # `epoch 3/10 loss 0.1234 train-acc 96.10% test-acc 97.20% samples/s 8123`, maybe
    # after `trainer launch`'s host/rank prefix.
    line = [l for l in open(os.path.join(work, name + ".out")) if re.search(r"epoch \d+/\d+ loss ", l)][-1]
    return float(re.search(r"loss (\S+)", line).group(1)), float(re.search(r"test-acc (\S+)%", line).group(1))

def params(name):
    # trainer/src/train/checkpoint.rs: 24-byte header, meta, epoch, step, params, momentum.
    path = sorted(glob.glob(os.path.join(work, name, "checkpoints", "checkpoint-epoch-*.ckpt")))[-1]
    raw = open(path, "rb").read()
    at = 24
    (meta_len,) = struct.unpack_from("<I", raw, at)
    at += 4 + meta_len + 16
    (n,) = struct.unpack_from("<Q", raw, at)
    values = array("f")
    values.frombytes(raw[at + 8 : at + 8 + 4 * n])
    return values

(la, aa), (lb, ab) = last_epoch(a), last_epoch(b)
wa, wb = params(a), params(b)
dist = math.sqrt(sum((x - y) ** 2 for x, y in zip(wa, wb))) / math.sqrt(sum(x * x for x in wa))
checks = [
    ("loss", abs(la - lb) / max(abs(la), 1e-12), loss_tol, f"{la:.4f} vs {lb:.4f}"),
    ("test accuracy", abs(aa - ab), acc_tol, f"{aa:.2f}% vs {ab:.2f}%"),
    ("weights", dist if len(wa) == len(wb) else math.inf, weight_tol, f"{len(wa)} parameters"),
]
bad = 0
for what, diff, tol, detail in checks:
    ok = diff <= tol
    bad += not ok
    print(f"  {a} vs {b}: {what}: {detail}: difference {diff:.5f} (tolerance {tol}) {'ok' if ok else 'FAILED'}")
sys.exit(1 if bad else 0)
EOF
}

for model in mlp lenet; do
  echo "== $model: cpu"
  train "$model-cpu" "$model" cpu
  echo "== $model: cuda, 1 GPU"
  train "$model-cuda" "$model" cuda env CUDA_VISIBLE_DEVICES=0
  compare "$model-cpu" "$model-cuda" || failed=1
  if [ "$gpus" -gt 1 ]; then
    echo localhost >"$work/hosts"
    echo "== $model: cuda, 1 GPU through trainer launch"
    train "$model-cuda-launched" "$model" cuda "$trainer" launch --hosts "$work/hosts" \
      --nproc-per-node 1 --job "gpu-check-$model-1" --
    echo "== $model: cuda, $gpus GPUs through trainer launch (NCCL)"
    train "$model-cuda-$gpus" "$model" cuda "$trainer" launch --hosts "$work/hosts" --nproc-per-node auto \
      --job "gpu-check-$model" --
    compare "$model-cuda-launched" "$model-cuda-$gpus" || failed=1
  fi
done

if [ "$failed" -ne 0 ]; then
  echo "gpu-check: some GPU results differ from the reference beyond the tolerance (above)" >&2
  exit 1
fi
echo "gpu-check: the GPU runs match the CPU runs within tolerance"
