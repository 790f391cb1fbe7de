#!/usr/bin/env bash
# Checks the GPU path of `trainer train` against the CPU path on a machine
# with an NVIDIA GPU (this project's CI has none: scripts/gpu-toolchain is
# what CI proves without one). Made for one GPU machine (an H100 or H200,
# 16 cores) with no internet; run it on a GPU instance by hand.
#
# Prerequisites on the GPU machine: the NVIDIA driver (libcuda.so.1,
# nvidia-smi) and cuBLAS, NVRTC and NCCL for CUDA 12 or later where cudarc
# finds them (LD_LIBRARY_PATH, or --lib-dir: NCCL as libnccl.so; a directory
# with only libnccl.so.2, as NVIDIA's wheel has, gets the link made here).
# Either a Rust toolchain with the crates in ~/.cargo (it builds), or
# binaries built elsewhere: on any x86-64 Linux machine with Rust and the
# internet, `scripts/gpu-check.sh --build-only DIR` puts the release
# `trainer`, the `gpu_kernels` checks and the MNIST fixture into DIR; copy
# DIR over and pass `--bin-dir DIR`.
#
# What it checks, one PASS or FAIL line each:
#   1. the kernel checks (trainer/examples/gpu_kernels.rs): every kernel of
#      trainer/src/train/cuda/kernels.cu alone against the CPU model's
#      arithmetic (bias, ReLU, max-pool, im2col/col2im, softmax
#      cross-entropy, SGD), so a failure names the kernel; then three
#      training steps of each model on the same device buffers (a batch of
#      64, a partial one of 32, a larger one of 80), layer by layer (the
#      cuBLAS GEMMs);
#   2. for the MLP and LeNet on the MNIST fixture: trains with --device cpu
#      and --device cuda (same seed, epochs and batch) and compares the last
#      epoch's loss (within LOSS_TOL, relative), test accuracy (ACC_TOL
#      points) and final weights from the last checkpoints (relative L2 within
#      WEIGHT_TOL). Float sums on a GPU run in another order, and training is
#      chaotic: a last-bit difference can send a run onto a nearby path (on
#      the fixture, a CPU run with the learning rate 3 roundings off ends
#      2 % away in weights after one epoch of batch 64, and matches the GPU
#      run's numbers exactly). So three more CPU runs, with the learning
#      rate a few roundings off, measure the drift a last bit causes, and a
#      quantity also passes within twice the largest. Prints both runs'
#      images/s;
#   3. with more than one GPU (a node of a formed cluster: ranks started by
#      `trainer launch` read the agent's node config and state, and `ssh
#      localhost` must work in BatchMode), trains through `trainer launch` on
#      one GPU and on all of them (NCCL all-reduce) with the same global batch
#      and compares the two the same way; then `trainer bench --device cuda`
#      over all of them prints NCCL's all-reduce table. With one GPU it says
#      SKIP: the multi-GPU part needs a node with several GPUs.
#
# Usage: scripts/gpu-check.sh [--data DIR] [--epochs N] [--batch-size N] [--bin-dir DIR] [--lib-dir DIR]...
#        scripts/gpu-check.sh --build-only DIR
# Exit codes: 0 every check passed, 1 some check failed, 2 no GPU here, or a
# usage or setup error.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

EPOCHS=3
BATCH=64
SEED=7
LR=0.05
# The same learning rate a few float roundings away (0.05 is 0x3D4CCCCD in
# f32; these are 3 ULPs above, 3 below and 5 above): CPU runs with them
# show how far runs drift apart from a last-bit difference alone (see
# compare, below).
LR_NUDGED=(0.05000001 0.04999999 0.05000002)
LOSS_TOL=0.02   # relative difference of the last epoch's mean training loss
ACC_TOL=1.0     # test accuracy, percentage points
WEIGHT_TOL=0.02 # |w_gpu - w_cpu| / |w_cpu|, L2 over the flat parameter vector

usage="usage: scripts/gpu-check.sh [--data DIR] [--epochs N] [--batch-size N] [--bin-dir DIR] [--lib-dir DIR]... | --build-only DIR"
data= bin_dir= build_only= lib_dirs=()
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --epochs) EPOCHS=${2:?--epochs needs a number}; shift 2 ;;
    --batch-size) BATCH=${2:?--batch-size needs a number}; shift 2 ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
    --lib-dir) lib_dirs+=("${2:?--lib-dir needs a directory}"); shift 2 ;;
    --build-only) build_only=${2:?--build-only needs a directory}; shift 2 ;;
    *) echo "gpu-check: unknown argument $1 ($usage)" >&2; exit 2 ;;
  esac
done

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${HOME:?}/.cache/deeplearning-cluster/target}
build() {
  command -v cargo >/dev/null || {
    echo "gpu-check: no cargo here: build on another x86-64 Linux machine with \`scripts/gpu-check.sh --build-only DIR\`, copy DIR here and pass --bin-dir DIR" >&2
    exit 2
  }
  cargo build --quiet --release --locked -p trainer --bin trainer --example gpu_kernels
}

if [ -n "$build_only" ]; then
  build
  mkdir -p "$build_only/mnist"
  cp "$CARGO_TARGET_DIR/release/trainer" "$CARGO_TARGET_DIR/release/examples/gpu_kernels" "$build_only/"
  cp "$(scripts/mnist-fixture)"/*-ubyte "$build_only/mnist/"
  echo "gpu-check: built into $build_only; on the GPU machine: scripts/gpu-check.sh --bin-dir $build_only --data $build_only/mnist"
  exit 0
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -eq 0 ]; then
  echo "gpu-check: no GPU on this host (nvidia-smi lists none): run it on a GPU instance with the NVIDIA driver and CUDA 12 or later libraries" >&2
  exit 2
fi
echo "gpu-check: $gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -1)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# cudarc 0.19 (built for CUDA 12) looks for libX.so, libX.so.12 and a few
# older names, never libX.so.13: NVIDIA's wheels are runtime-only packages
# that ship only the versioned name (libnccl.so.2, and libcublas.so.13 or
# libnvrtc.so.13 for CUDA 13). A library directory with only a versioned
# name gets the unversioned link here (the first directory given wins).
mkdir "$work/lib"
for dir in "${lib_dirs[@]}"; do
  for name in cublas cublasLt nvrtc nccl; do
    [ ! -e "$dir/lib$name.so" ] && [ ! -e "$work/lib/lib$name.so" ] || continue
    versioned=$(ls "$dir/lib$name.so."[0-9]* 2>/dev/null | sort -V | tail -1 || true)
    [ -z "$versioned" ] || ln -s "$(readlink -f "$versioned")" "$work/lib/lib$name.so"
  done
done
path=$work/lib
for dir in "${lib_dirs[@]}"; do path=$path:$dir; done
export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

passed=0 failed=0
# result PASS|FAIL TEXT: one check's line, counted.
result() {
  echo "$1 $2"
  if [ "$1" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

if [ -n "$bin_dir" ]; then
  trainer=$bin_dir/trainer kernels=$bin_dir/gpu_kernels
  [ -x "$trainer" ] && [ -x "$kernels" ] || {
    echo "gpu-check: $bin_dir has no trainer and gpu_kernels: make it with --build-only" >&2
    exit 2
  }
  result PASS "build: binaries from $bin_dir"
elif build; then
  trainer=$CARGO_TARGET_DIR/release/trainer kernels=$CARGO_TARGET_DIR/release/examples/gpu_kernels
  result PASS "build: cargo build --release (trainer, gpu_kernels)"
else
  result FAIL "build: cargo build --release failed (above)"
  exit 1
fi

if [ -z "$data" ]; then
  data=$(scripts/mnist-fixture) || {
    echo "gpu-check: cannot make the MNIST fixture here (no internet?): pass --data DIR (--build-only makes one)" >&2
    exit 2
  }
fi
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -s "$data/$f" ] || { echo "gpu-check: $data/$f is missing: pass --data DIR with the four MNIST idx files" >&2; exit 2; }
done

echo "== kernel checks on GPU 0 (each kernel, then three steps of each model layer by layer, against the CPU model)"
set +e
CUDA_VISIBLE_DEVICES=0 "$kernels" 0 >"$work/kernels.out" 2>&1
status=$?
set -e
grep -E '^(PASS|FAIL|SKIP) ' "$work/kernels.out" | grep -v '^SKIP' || true
passed=$((passed + $(grep -c '^PASS ' "$work/kernels.out" || true)))
failed=$((failed + $(grep -c '^FAIL ' "$work/kernels.out" || true)))
case $status in
  0 | 1) ;;
  2) result FAIL "kernel checks could not start: $(sed -n 's/^SKIP gpu kernel checks: //p' "$work/kernels.out")" ;;
  *) result FAIL "kernel checks: gpu_kernels died (exit $status): $(tail -3 "$work/kernels.out" | tr '\n' ' ')" ;;
esac

# train NAME MODEL DEVICE [launch...]: one run; its epoch lines go to $work/NAME.out.
train() {
  local name=$1 model=$2 device=$3
  shift 3
  if "$@" "$trainer" train --model "$model" --data "$data" --epochs "$EPOCHS" --batch-size "$BATCH" \
    --lr "${RUN_LR:-$LR}" --seed "$SEED" --device "$device" --checkpoint-dir "$work/$name/checkpoints" \
    --tb-dir "$work/$name/tb" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "  $name: $(tail -1 "$work/$name.out")"
  else
    result FAIL "$name: trainer train failed: $(tail -3 "$work/$name.err" | tr '\n' ' ')"
    return 1
  fi
}

# compare A B [C...]: the last epoch lines and the newest checkpoints of runs
# A and B, one PASS or FAIL line per quantity; then both runs' images/s.
# Training is chaotic: a last-bit difference in one step (a ReLU input or a
# max-pool tie on the other side of zero) can move a run onto a nearby
# trajectory, and the gap grows with the epochs. So with runs C (A's device
# with the learning rate a few roundings off), a quantity also passes when
# B is no further from A than twice the furthest C: the GPU run differs from
# the CPU run by no more than the CPU run differs from itself.
compare() {
  TOLERANCES="$LOSS_TOL $ACC_TOL $WEIGHT_TOL" python3 "$work/compare.py" "$work" "$@" >"$work/compare.out" || true
  cat "$work/compare.out"
  passed=$((passed + $(grep -c '^PASS ' "$work/compare.out" || true)))
  failed=$((failed + $(grep -c '^FAIL ' "$work/compare.out" || true)))
}
cat >"$work/compare.py" <<'EOF'
import functools, glob, math, os, re, struct, sys
from array import array

work, a, b = sys.argv[1:4]
nudged = sys.argv[4:]
loss_tol, acc_tol, weight_tol = map(float, os.environ["TOLERANCES"].split())

# Each run's files are read once, however many comparisons use them.
@functools.lru_cache(maxsize=None)
def last_epoch(name):
    # `epoch 3/10 loss 0.1234 train-acc 96.10% test-acc 97.20% samples/s 8123`, maybe
    # after `trainer launch`'s host/rank prefix.
    line = [l for l in open(os.path.join(work, name + ".out")) if re.search(r"epoch \d+/\d+ loss ", l)][-1]
    return tuple(float(re.search(p, line).group(1)) for p in (r"loss (\S+)", r"test-acc (\S+)%", r"samples/s (\S+)"))

@functools.lru_cache(maxsize=None)
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

def dist(wa, wb):
    if len(wa) != len(wb):
        return math.inf
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(wa, wb))) / math.sqrt(sum(x * x for x in wa))

def differences(a, b):
    (la, aa, _), (lb, ab, _) = last_epoch(a), last_epoch(b)
    return [abs(la - lb) / max(abs(la), 1e-12), abs(aa - ab), dist(params(a), params(b))]

try:
    (la, aa, ra), (lb, ab, rb) = last_epoch(a), last_epoch(b)
    diffs = differences(a, b)
    drift = [max(d) for d in zip(*(differences(a, c) for c in nudged))] if nudged else None
    na, nb = len(params(a)), len(params(b))
except (OSError, IndexError, AttributeError, struct.error) as e:
    print(f"FAIL {a} vs {b}: could not read the runs' results: {e!r}")
    sys.exit(0)
checks = [
    ("loss", loss_tol, f"{la:.4f} vs {lb:.4f}"),
    ("test accuracy", acc_tol, f"{aa:.2f}% vs {ab:.2f}%"),
    ("weights", weight_tol, f"{na} vs {nb} parameters"),
]
for i, (what, tol, detail) in enumerate(checks):
    diff = diffs[i]
    allowed = tol if drift is None else max(tol, 2 * drift[i])
    also = "" if drift is None else f"; {a} vs its nudged runs: up to {drift[i]:.5f}, so up to {allowed:.5f}"
    print(f"{'PASS' if diff <= allowed else 'FAIL'} {a} vs {b}: {what}: {detail}: difference {diff:.5f} (tolerance {tol}{also})")
print(f"  images/s (last epoch): {a} {ra:.0f}, {b} {rb:.0f} ({rb / max(ra, 1e-9):.2f}x {a})")
EOF

cores=$(nproc)
for model in mlp lenet; do
  echo "== $model: cpu ($cores threads) and cuda (GPU 0)"
  train "$model-cpu" "$model" cpu || continue
  nudged=()
  for i in "${!LR_NUDGED[@]}"; do
    RUN_LR=${LR_NUDGED[$i]} train "$model-cpu-nudged$((i + 1))" "$model" cpu && nudged+=("$model-cpu-nudged$((i + 1))")
  done
  train "$model-cuda" "$model" cuda env CUDA_VISIBLE_DEVICES=0 || continue
  compare "$model-cpu" "$model-cuda" "${nudged[@]}"
  if [ "$gpus" -gt 1 ]; then
    echo localhost >"$work/hosts"
    echo "== $model: cuda, 1 GPU and $gpus GPUs through trainer launch (NCCL)"
    train "$model-cuda-launched" "$model" cuda "$trainer" launch --hosts "$work/hosts" \
      --nproc-per-node 1 --job "gpu-check-$model-1" -- || continue
    train "$model-cuda-$gpus" "$model" cuda "$trainer" launch --hosts "$work/hosts" --nproc-per-node auto \
      --job "gpu-check-$model" -- || continue
    compare "$model-cuda-launched" "$model-cuda-$gpus"
  fi
done
if [ "$gpus" -gt 1 ]; then
  echo "== trainer bench --device cuda: NCCL all-reduce bandwidth between $gpus GPUs through trainer launch"
  echo localhost >"$work/hosts"
  if "$trainer" launch --hosts "$work/hosts" --nproc-per-node auto --job gpu-check-bench -- \
    "$trainer" bench --device cuda --min-bytes 1048576 --max-bytes 268435456 >"$work/bench.out" 2>&1 &&
    grep -q '^\[[^]]*\] # all-reduce (sum, f32), NCCL' "$work/bench.out"; then
    sed -n 's/^\[[^]]*\] //p' "$work/bench.out" | grep -E '^ *(#|[0-9])' || true
    result PASS "trainer bench --device cuda: NCCL table over $gpus ranks"
  else
    tail -20 "$work/bench.out"
    result FAIL "trainer bench --device cuda (see above)"
  fi
else
  echo "SKIP multi-GPU (NCCL all-reduce across ranks, trainer launch, trainer bench --device cuda): needs a node with several GPUs; this host has $gpus"
fi

echo "gpu-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || exit 1
