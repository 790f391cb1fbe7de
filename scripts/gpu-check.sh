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
# `trainer`, the `gpu_kernels` checks, the PyTorch reference script and the
# MNIST fixture into DIR; copy
# DIR over and pass `--bin-dir DIR`.
#
# What it checks, one PASS or FAIL line each:
#   1. the kernel checks (trainer/examples/gpu_kernels.rs; exit 0 with no
#      PASS line, exit 1 with no FAIL line, or a crash is a FAIL): every kernel of
#      trainer/src/train/cuda/kernels.cu alone against the CPU model's
#      arithmetic (bias, ReLU, max-pool, im2col/col2im, softmax
#      cross-entropy, SGD), so a failure names the kernel; then three
#      training steps of each model on the same device buffers (a batch of
#      64, a partial one of 32, a larger one of 80), layer by layer (the
#      cuBLAS GEMMs);
#   2. for the MLP and LeNet on the MNIST fixture: trains with --device cpu
#      and --device cuda (same seed, epochs and batch) and compares, with
#      `trainer compare` (the trainer's own checkpoint and epoch-line readers;
#      trainer/tests/compare_runs.rs runs the same comparison on CPU runs in
#      CI, so a format change fails there first), the last epoch's loss
#      (within LOSS_TOL, relative), test accuracy (ACC_TOL points) and final
#      weights from the last checkpoints (relative L2 within WEIGHT_TOL). A
#      comparison that cannot run (a run that failed, a checkpoint that cannot
#      be read) is a FAIL with the reason. Float sums on a GPU run in another order, and training is
#      chaotic: a last-bit difference can send a run onto a nearby path (on
#      the fixture, a CPU run with the learning rate 3 roundings off ends
#      2 % away in weights after one epoch of batch 64, and matches the GPU
#      run's numbers exactly). So three more CPU runs, with the learning
#      rate a few roundings off, measure the drift a last bit causes, and a
#      quantity also passes within twice the largest. Prints both runs'
#      images/s;
#   3. speed, side by side: samples/s of `trainer train --device cuda` for
#      the MLP and LeNet at batch 64, 256 and 1024 on the fixture tiled to
#      60,000 images (3 epochs, the last one's figure), against the same
#      models, optimiser, batch and data in PyTorch eager on the same GPU
#      (trainer/benches/torch_reference.py) when `python3 -c 'import torch'`
#      works here (PYTHON overrides python3), timed two ways: as PyTorch's
#      users write it (the data set normalised once and resident on the GPU,
#      each step indexing a shuffled permutation: the `pytorch` column and
#      its ratio) and copying the trainer's pipeline (each batch gathered
#      and normalised on the host, then copied over: `pipeline`); a table
#      with ratios, no verdict on the speed, but a speed run or a PyTorch
#      reference that fails or prints no figure, or a fixture that cannot be
#      tiled, is a FAIL;
#   4. a profile, when Nsight Compute is here (`ncu` on PATH, in
#      /usr/local/cuda/bin, or NCU=/path/to/ncu): a few training steps of
#      LeNet and of the MLP at batch 1024 under `ncu` (the first step, where
#      cuBLAS chooses its kernels, skipped), and their top kernels by share
#      of GPU time with launch counts. ncu there but no kernel measured (no
#      permission to the GPU's counters, say) is a FAIL with its message;
#      no ncu is a SKIP line;
#   5. with more than one GPU (a node of a formed cluster: ranks started by
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
  cargo build --quiet --release --locked -p trainer --bin trainer --example gpu_kernels -p agent --bin agent
}

if [ -n "$build_only" ]; then
  build
  mkdir -p "$build_only/mnist"
  cp "$CARGO_TARGET_DIR/release/trainer" "$CARGO_TARGET_DIR/release/examples/gpu_kernels" \
    "$CARGO_TARGET_DIR/release/agent" trainer/benches/torch_reference.py "$build_only/"
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
  trainer=$bin_dir/trainer kernels=$bin_dir/gpu_kernels reference=$bin_dir/torch_reference.py agent=$bin_dir/agent
  [ -x "$trainer" ] && [ -x "$kernels" ] || {
    echo "gpu-check: $bin_dir has no trainer and gpu_kernels: make it with --build-only" >&2
    exit 2
  }
  result PASS "build: binaries from $bin_dir"
elif build; then
  trainer=$CARGO_TARGET_DIR/release/trainer kernels=$CARGO_TARGET_DIR/release/examples/gpu_kernels
  reference=trainer/benches/torch_reference.py agent=$CARGO_TARGET_DIR/release/agent
  result PASS "build: cargo build --release (trainer, gpu_kernels, agent)"
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
kernel_pass=$(grep -c '^PASS ' "$work/kernels.out" || true)
kernel_fail=$(grep -c '^FAIL ' "$work/kernels.out" || true)
passed=$((passed + kernel_pass))
failed=$((failed + kernel_fail))
# Exit 0 with no check printed, or exit 1 with no failure printed, is a run
# that did not do what it says: never a pass.
case $status in
  0) [ "$kernel_pass" -gt 0 ] || result FAIL "kernel checks: gpu_kernels exited 0 but printed no check" ;;
  1) [ "$kernel_fail" -gt 0 ] || result FAIL "kernel checks: gpu_kernels exited 1 but printed no failure: $(tail -3 "$work/kernels.out" | tr '\n' ' ')" ;;
  2) result FAIL "kernel checks could not start: $(sed -n 's/^SKIP gpu kernel checks: //p' "$work/kernels.out")" ;;
  *) result FAIL "kernel checks: gpu_kernels died (exit $status): $(tail -3 "$work/kernels.out" | tr '\n' ' ')" ;;
esac

# train NAME MODEL DEVICE [launch...]: one run into $work/NAME: its stdout
# (the epoch lines), stderr and checkpoints, as `trainer compare` reads them.
train() {
  local name=$1 model=$2 device=$3
  shift 3
  mkdir -p "$work/$name"
  if "$@" "$trainer" train --model "$model" --data "${RUN_DATA:-$data}" --epochs "$EPOCHS" \
    --batch-size "${RUN_BATCH:-$BATCH}" --lr "${RUN_LR:-$LR}" --seed "$SEED" --device "$device" \
    --checkpoint-dir "$work/$name/checkpoints" --tb-dir "$work/$name/tb" \
    >"$work/$name/stdout" 2>"$work/$name/stderr"; then
    echo "  $name: $(tail -1 "$work/$name/stdout")"
  else
    result FAIL "$name: trainer train failed: $(tail -3 "$work/$name/stderr" | tr '\n' ' ')"
    return 1
  fi
}

# compare A B [C...]: `trainer compare` of runs A and B (C: A's device with
# the learning rate a few roundings off, see trainer/src/train/compare.rs),
# one PASS or FAIL line per quantity, then both runs' samples/s. Anything
# but its report (it died, printed no verdict) is a FAIL: a check that
# cannot run is never a pass.
compare() {
  local a=$1 b=$2
  shift 2
  local drift=()
  for c in "$@"; do drift+=(--drift "$work/$c"); done
  set +e
  "$trainer" compare "$work/$a" "$work/$b" "${drift[@]}" --loss-tol "$LOSS_TOL" --acc-tol "$ACC_TOL" \
    --weight-tol "$WEIGHT_TOL" >"$work/compare.out" 2>&1
  local status=$?
  set -e
  cat "$work/compare.out"
  local pass fail
  pass=$(grep -c '^PASS ' "$work/compare.out" || true)
  fail=$(grep -c '^FAIL ' "$work/compare.out" || true)
  passed=$((passed + pass))
  failed=$((failed + fail))
  if [ "$status" -gt 1 ] || [ $((pass + fail)) -eq 0 ] || { [ "$status" -eq 1 ] && [ "$fail" -eq 0 ]; }; then
    result FAIL "$a vs $b: trainer compare gave no verdict (exit $status)"
  fi
}

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
# The speed table: the fixture tiled to 60,000 images (as many as MNIST's
# training split), so that an epoch at batch 1024 is 59 steps.
echo "== speed on GPU 0: samples/s, last of 3 epochs, fixture tiled to 60,000 images"
tiled=$work/tiled
mkdir -p "$tiled"
PYTHON=${PYTHON:-python3}
if "$PYTHON" - "$data" "$tiled" 60000 <<'PY'
import shutil, struct, sys
src, dst, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
for kind in ("images-idx3", "labels-idx1"):
    raw = open(f"{src}/train-{kind}-ubyte", "rb").read()
    dims = raw[3]
    shape = list(struct.unpack(">" + "I" * dims, raw[4 : 4 + 4 * dims]))
    body = raw[4 + 4 * dims :]
    per = len(body) // shape[0]
    reps = -(-count // shape[0])
    shape[0] = count
    with open(f"{dst}/train-{kind}-ubyte", "wb") as f:
        f.write(raw[:4] + struct.pack(">" + "I" * dims, *shape) + (body * reps)[: count * per])
for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
    shutil.copy(f"{src}/{name}", f"{dst}/{name}")
PY
then
  speed_data=$tiled
else
  # The table would not be the issue's (60,000 images): a failure, though
  # the figures on the fixture as it is are still printed.
  result FAIL "speed: could not tile the fixture to 60,000 images with $PYTHON; the table below is on the fixture as it is"
  speed_data=$data
fi
torch=no
if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  torch=yes
  if CUDA_VISIBLE_DEVICES=0 "$PYTHON" "$reference" "$speed_data" 3 64,256,1024 "$cores" cuda \
    >"$work/torch.out" 2>"$work/torch.err"; then
    echo "  PyTorch $(sed -n 's/^torch_version //p' "$work/torch.out") on $(sed -n 's/^device //p' "$work/torch.out")"
  else
    result FAIL "speed: the PyTorch reference failed: $(tail -3 "$work/torch.err" | tr '\n' ' ')"
  fi
else
  echo "  no PyTorch with CUDA for $PYTHON here: the trainer's column only"
  : >"$work/torch.out"
fi
# Every run first (a failed one prints its FAIL line here), then the table
# in one piece, so that no FAIL line lands between two of its rows.
table=$(printf '  %-6s %6s %14s %14s %7s %14s %7s' model batch trainer pytorch ratio pipeline ratio)
for batch in 64 256 1024; do
  for model in mlp lenet; do
    ours=-
    if RUN_DATA=$speed_data RUN_BATCH=$batch EPOCHS=3 train "speed-$model-$batch" "$model" cuda \
      env CUDA_VISIBLE_DEVICES=0; then
      ours=$(sed -n 's/.*samples\/s \([0-9.]*\).*/\1/p' "$work/speed-$model-$batch/stdout" | tail -1)
      [ -n "$ours" ] || {
        result FAIL "speed: $model batch $batch: the run printed no samples/s"
        ours=-
      }
    fi
    theirs=$(sed -n "s/^${model}_${batch}_samples_per_sec //p" "$work/torch.out")
    pipeline=$(sed -n "s/^${model}_${batch}_pipeline_samples_per_sec //p" "$work/torch.out")
    if [ "$torch" = yes ] && { [ -z "$theirs" ] || [ -z "$pipeline" ]; } && [ -s "$work/torch.out" ]; then
      result FAIL "speed: $model batch $batch: the PyTorch reference printed no samples/s (resident or pipeline)"
    fi
    # A figure that is missing shows as -, never as 0 samples/s; its ratio too.
    cells=$(awk -v a="$ours" -v b="$theirs" -v c="$pipeline" 'BEGIN {
      fig = "%14s"; r = "%7s"
      printf fig " " fig " " r " " fig " " r, (a + 0 > 0 ? sprintf("%.0f", a) : "-"), (b + 0 > 0 ? sprintf("%.0f", b) : "-"),
        (a + 0 > 0 && b + 0 > 0 ? sprintf("%.2f", a / b) : "-"), (c + 0 > 0 ? sprintf("%.0f", c) : "-"),
        (a + 0 > 0 && c + 0 > 0 ? sprintf("%.2f", a / c) : "-") }')
    table+=$'\n'$(printf '  %-6s %6s %s' "$model" "$batch" "$cells")
  done
done
echo "$table"

# The profile: a few steps at batch 1024 under Nsight Compute, kernels by
# share of GPU time. One epoch of the fixture (4,000 images: 4 steps, then
# the evaluation); the first 60 launches (the first step, where cuBLAS picks
# its kernels and loads them) are skipped and the next 150 measured (about
# three LeNet steps, seven of the MLP).
ncu=${NCU:-$(command -v ncu || true)}
[ -n "$ncu" ] || [ ! -x /usr/local/cuda/bin/ncu ] || ncu=/usr/local/cuda/bin/ncu
if [ -z "$ncu" ]; then
  echo "SKIP profile: no Nsight Compute here (ncu not on PATH nor in /usr/local/cuda/bin; NCU=/path/to/ncu names one)"
else
  echo "== profile on GPU 0: top kernels of a few training steps at batch 1024 ($({ "$ncu" --version 2>&1 || true; } | tail -1))"
  for model in lenet mlp; do
    mkdir -p "$work/profile-$model"
    set +e
    CUDA_VISIBLE_DEVICES=0 "$ncu" --target-processes all --launch-skip 60 --launch-count 150 \
      --metrics gpu__time_duration.sum --csv --page raw --log-file "$work/profile-$model/ncu.csv" \
      "$trainer" train --model "$model" --data "$data" --epochs 1 --batch-size 1024 --seed "$SEED" --device cuda \
      --checkpoint-dir "$work/profile-$model/checkpoints" --tb-dir "$work/profile-$model/tb" \
      >"$work/profile-$model/stdout" 2>"$work/profile-$model/stderr"
    status=$?
    set -e
    # Sum each kernel's time over its launches; print the top 10 by share.
    # ncu's report goes to its log file; read the run's stdout too, should a version print it there.
    if [ "$status" -eq 0 ] && "$PYTHON" - "$model" "$work/profile-$model/ncu.csv" "$work/profile-$model/stdout" \
      >"$work/profile-$model/top" <<'PY'; then
import csv, sys
rows = [r for path in sys.argv[2:] for r in csv.reader(open(path, newline="", errors="replace"))]
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
if head is None:
    sys.exit("no kernel rows in ncu's output")
cols = rows[head]
name, time = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
totals, launches = {}, {}
for r in rows[head + 1 :]:
    if len(r) != len(cols) or not r[0].strip().isdigit():
        continue  # the units row, ncu's own messages
    kernel = r[name].split("(")[0].strip() or r[name]
    totals[kernel] = totals.get(kernel, 0.0) + float(r[time].replace(",", ""))
    launches[kernel] = launches.get(kernel, 0) + 1
if not totals:
    sys.exit("no kernel was measured")
whole = sum(totals.values())
print(f"  {sys.argv[1]} batch 1024: {sum(launches.values())} launches measured")
print(f"  {'share':>7} {'launches':>8}  kernel")
for kernel, t in sorted(totals.items(), key=lambda kv: -kv[1])[:10]:
    print(f"  {100 * t / whole:6.1f}% {launches[kernel]:>8}  {kernel[:100]}")
PY
      cat "$work/profile-$model/top"
      result PASS "profile: $model batch 1024 under ncu"
    else
      result FAIL "profile: $model batch 1024 under ncu (exit $status): $(tail -3 "$work/profile-$model/ncu.csv" "$work/profile-$model/stderr" "$work/profile-$model/top" 2>/dev/null | tr '\n' ' ')"
    fi
  done
fi

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

# The GPU gate (docs/ARCHITECTURE.md, "The GPU gate"), as every node with
# GPUs runs it before it joins: `agent gpu-check` against what this GPU
# model promises (synth/data/gpu-facts.tsv's figures for the models this
# script knows; the count only for others); then the same with a GEMM
# figure no GPU reaches, which must fail (exit 1, naming the gemm check);
# then what the idle guard reads through NVML while a training run is busy
# and after it ends.
echo "== GPU gate: agent gpu-check on this node's $gpus GPU(s)"
if [ ! -x "${agent:-}" ]; then
  result FAIL "GPU gate: no agent binary (build it with --build-only, or cargo build --release -p agent)"
else
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case $gpu_name in
    *H200*) promise='"model":"H200","bf16_tflops":989,"memory_gbps":4800,"nvlink_busbw_gbps":360' ;;
    *H100*) promise='"model":"H100","bf16_tflops":989,"memory_gbps":3350,"nvlink_busbw_gbps":360' ;;
    *A100*80GB*) promise='"model":"A100","bf16_tflops":312,"memory_gbps":2039,"nvlink_busbw_gbps":230' ;;
    *A100*) promise='"model":"A100","bf16_tflops":312,"memory_gbps":1555,"nvlink_busbw_gbps":230' ;;
    *) promise='' ;;
  esac
  [ "$gpus" -gt 1 ] || promise=$(printf '%s' "$promise" | sed 's/,"nvlink_busbw_gbps":[0-9]*//')
  expect="{\"gpus\":$gpus${promise:+,$promise}}"
  echo "  expected: $expect"
  set +e
  "$agent" gpu-check --root "$work" --expect "$expect" >"$work/gate.out" 2>&1
  status=$?
  set -e
  cat "$work/gate.out"
  case $status in
    0) result PASS "GPU gate: every check passed on $gpu_name" ;;
    *) result FAIL "GPU gate: agent gpu-check exit $status on $gpu_name (above)" ;;
  esac
  set +e
  "$agent" gpu-check --root "$work" --expect "{\"gpus\":$gpus,\"bf16_tflops\":100000}" >"$work/gate-high.out" 2>&1
  status=$?
  set -e
  if [ "$status" -eq 1 ] && grep -q 'the GPU check failed: gemm on GPU' "$work/gate-high.out"; then
    result PASS "GPU gate: a GEMM figure above the GPU's fails the gemm check (exit 1)"
  else
    tail -5 "$work/gate-high.out"
    result FAIL "GPU gate: a GEMM figure above the GPU's did not fail the gemm check (exit $status)"
  fi
  echo "== the idle guard's GPU reading (NVML), while trainer train runs and after"
  CUDA_VISIBLE_DEVICES=0 "$trainer" train --model lenet --data "$data" --epochs 20 --batch-size 256 --seed "$SEED" \
    --device cuda --checkpoint-dir "$work/idle/checkpoints" --tb-dir "$work/idle/tb" >"$work/idle.out" 2>&1 &
  run=$!
  sleep 8
  busy=$("$agent" gpu-check --idle-reading 2>&1 || true)
  kill "$run" 2>/dev/null || true
  wait "$run" 2>/dev/null || true
  sleep 3
  after=$("$agent" gpu-check --idle-reading 2>&1 || true)
  echo "  during: $busy"
  echo "  after:  $after"
  if printf '%s' "$busy" | grep -q 'busiest GPU is at [0-9]* %' && printf '%s' "$after" | grep -q 'busiest GPU is at [0-9]* %'; then
    result PASS "idle guard: NVML reads the GPUs' utilisation (during and after a run; figures above)"
  else
    result FAIL "idle guard: NVML gave no reading (above)"
  fi
fi

echo "gpu-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || exit 1
