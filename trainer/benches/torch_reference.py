"""The PyTorch reference for benches/throughput.rs and scripts/gpu-check.sh.

Trains the same two models as `trainer train` (MLP 784-256-128-10 and
LeNet-5: 5x5 convolutions of 6 (padding 2) and 16 channels, ReLU, 2x2 max
pooling, Linear 400-120-84-10), with the same optimiser (SGD, learning rate
0.05, momentum 0.9, weight decay 5e-4, PyTorch's convention, which the
trainer's optim.rs follows), the same mean softmax cross-entropy and the
same batches' sizes, in float32, on the MNIST idx files in DATA_DIR, the way
a PyTorch user writes it: `nn.Sequential` in eager mode (NCHW, so oneDNN's
convolutions on the CPU and cuDNN's on a GPU), `F.cross_entropy`,
`torch.optim.SGD`.

Two ways of feeding the batches, each timed:
- resident, as a PyTorch user trains on a data set that fits in memory:
  the images are normalised once, before the first epoch, and live on the
  device (float32, NCHW) with the labels; each epoch draws a shuffled
  permutation and each step indexes it (`x_all[idx]`). This is the
  reference the trainer is measured against.
- pipeline: each step does the per-batch work the trainer's data path
  does: gather the batch's bytes from a shuffled order and normalise them
  on the host; on a GPU the batch goes over from pinned memory without
  blocking (what a DataLoader with `pin_memory=True` does).
Either way the loss and accuracy are summed on the device and read once an
epoch (no host synchronisation per step: PyTorch's best case). CPU threads:
torch.set_num_threads(THREADS).

Prints `key value` lines: `torch_version`, `device`,
`<model>_<batch>_samples_per_sec` (resident) and
`<model>_<batch>_pipeline_samples_per_sec` (the best epoch of EPOCHS of
each) and, on the CPU, `<model>_<batch>_samples_per_cpu_sec` (resident:
samples per second of this process's CPU time, every thread) and
`sgemm_<m>x<k>x<n>_gflops` (torch.mm on the shapes the models use). PARTS
(default train,sgemm) says which of the two to run.
Usage: torch_reference.py DATA_DIR EPOCHS BATCH[,BATCH...] THREADS [cpu|cuda [PARTS]]
"""

import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def read_idx(path):
    data = open(path, "rb").read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def mlp():
    return nn.Sequential(
        nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)
    )


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
    )


def normalise(images):
    return (images.float() * (1 / 255.0) - 0.1307) / 0.3081


def train_rate(make, images, labels, epochs, batch, device, resident):
    """The best epoch's samples/s, and its samples per CPU second (every thread of this process)."""
    torch.manual_seed(0)
    model = make().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    cuda = device.type == "cuda"
    if resident:
        # Normalised once and kept on the device, outside the timed epochs.
        x_all, y_all = normalise(images).to(device), labels.to(device)
    best, best_cpu = 0.0, 0.0
    for epoch in range(epochs):
        order = torch.from_numpy(np.random.default_rng(epoch).permutation(len(labels)))
        if resident:
            order = order.to(device)
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        if cuda:
            torch.cuda.synchronize()
        start, cpu = time.perf_counter(), time.process_time()
        for b in range(0, len(order), batch):
            idx = order[b : b + batch]
            if resident:
                x, y = x_all[idx], y_all[idx]
            else:
                x = normalise(images[idx])
                y = labels[idx]
                if cuda:
                    x = x.pin_memory().to(device, non_blocking=True)
                    y = y.pin_memory().to(device, non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                loss_sum += loss.detach() * len(y)
                correct += (logits.argmax(1) == y).sum()
        # The epoch's figures are read once, as the trainer prints them.
        float(loss_sum), int(correct)
        if cuda:
            torch.cuda.synchronize()
        best = max(best, len(order) / (time.perf_counter() - start))
        best_cpu = max(best_cpu, len(order) / max(time.process_time() - cpu, 1e-9))
    return best, best_cpu


def sgemm_gflops(m, k, n, seconds=0.5):
    a = torch.randn(m, k)
    b = torch.randn(k, n)
    torch.mm(a, b)
    best, runs, start = float("inf"), 0, time.perf_counter()
    while time.perf_counter() - start < seconds or runs < 3:
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
        runs += 1
    return 2.0 * m * k * n / best / 1e9


def main():
    data, epochs, batches, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    device = torch.device(sys.argv[5] if len(sys.argv) > 5 else "cpu")
    parts = (sys.argv[6] if len(sys.argv) > 6 else "train,sgemm").split(",")
    torch.set_num_threads(threads)
    images = torch.from_numpy(read_idx(f"{data}/train-images-idx3-ubyte").copy()).reshape(-1, 1, 28, 28)
    labels = torch.from_numpy(read_idx(f"{data}/train-labels-idx1-ubyte").astype(np.int64))
    print("torch_version", torch.__version__)
    print("device", torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu-{threads}-threads")
    for batch in (int(b) for b in batches.split(",") if "train" in parts):
        for name, make in (("mlp", mlp), ("lenet", lenet)):
            rate, per_cpu = train_rate(make, images, labels, epochs, batch, device, resident=True)
            print(f"{name}_{batch}_samples_per_sec", rate, flush=True)
            if device.type == "cpu":
                print(f"{name}_{batch}_samples_per_cpu_sec", per_cpu, flush=True)
            rate, _ = train_rate(make, images, labels, epochs, batch, device, resident=False)
            print(f"{name}_{batch}_pipeline_samples_per_sec", rate, flush=True)
    if device.type == "cpu" and "sgemm" in parts:
        for m, k, n in [(64, 784, 256), (50176, 25, 6), (6400, 150, 16), (1024, 1024, 1024)]:
            print(f"sgemm_{m}x{k}x{n}_gflops", sgemm_gflops(m, k, n), flush=True)


if __name__ == "__main__":
    main()
