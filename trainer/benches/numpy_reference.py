"""The NumPy (OpenBLAS) reference for benches/throughput.rs.

Trains the same two models as `trainer train` (MLP 784-256-128-10 and
LeNet-5, softmax cross-entropy, SGD with momentum 0.9 and weight decay 5e-4,
float32) with the same algorithm (im2col + one matrix product per layer over
the whole batch, channel-last activations, no input gradient for the first
layer), on the MNIST fixture, and times sgemm on the shapes the models use.
OpenBLAS's thread count comes from OPENBLAS_NUM_THREADS, set by the caller.

Prints `key value` lines: `<model>_samples_per_sec`, `sgemm_<m>x<k>x<n>_gflops`.
Usage: numpy_reference.py MNIST_DIR EPOCHS BATCH
"""

import struct
import sys
import time

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

F = np.float32


def read_idx(path):
    data = open(path, "rb").read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def uniform(rng, shape, fan_in):
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(F)


class Linear:
    def __init__(self, rng, n_in, n_out):
        self.params = [uniform(rng, (n_out, n_in), n_in), uniform(rng, (n_out,), n_in)]

    def forward(self, x):
        self.x = x
        return x @ self.params[0].T + self.params[1]

    def backward(self, dy, need_dx):
        self.grads = [dy.T @ self.x, dy.sum(0)]
        return dy @ self.params[0] if need_dx else None


class Conv:
    """Channel-last convolution, stride 1, as im2col + one GEMM."""

    def __init__(self, rng, c, oc, k, pad):
        self.k, self.pad = k, pad
        self.params = [uniform(rng, (oc, c * k * k), c * k * k), uniform(rng, (oc,), c * k * k)]

    def forward(self, x):
        n, h, w, c = x.shape
        p, k = self.pad, self.k
        xp = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0))) if p else x
        win = sliding_window_view(xp, (k, k), axis=(1, 2))  # n, oh, ow, c, k, k
        self.shape = (n, h, w, c, win.shape[1], win.shape[2])
        self.cols = np.ascontiguousarray(win).reshape(-1, c * k * k)
        y = self.cols @ self.params[0].T + self.params[1]
        return y.reshape(n, win.shape[1], win.shape[2], -1)

    def backward(self, dy, need_dx):
        n, h, w, c, oh, ow = self.shape
        k, p = self.k, self.pad
        dy2 = dy.reshape(-1, dy.shape[-1])
        self.grads = [dy2.T @ self.cols, dy2.sum(0)]
        if not need_dx:
            return None
        dcols = (dy2 @ self.params[0]).reshape(n, oh, ow, c, k, k)
        dxp = np.zeros((n, h + 2 * p, w + 2 * p, c), F)
        for ky in range(k):
            for kx in range(k):
                dxp[:, ky : ky + oh, kx : kx + ow, :] += dcols[:, :, :, :, ky, kx]
        return dxp[:, p : p + h, p : p + w, :]


class Relu:
    params = []

    def forward(self, x):
        self.mask = x > 0
        return x * self.mask

    def backward(self, dy, need_dx):
        return dy * self.mask


class Pool:
    params = []

    def forward(self, x):
        n, h, w, c = x.shape
        blocks = x.reshape(n, h // 2, 2, w // 2, 2, c)
        out = blocks.max(axis=(2, 4))
        self.mask = blocks == out[:, :, None, :, None, :]
        return out

    def backward(self, dy, need_dx):
        n, oh, _, ow, _, c = self.mask.shape
        return (self.mask * dy[:, :, None, :, None, :]).reshape(n, oh * 2, ow * 2, c)


class Flatten:
    """Channel-last to the (c, y, x) order of the linear layer."""

    params = []

    def forward(self, x):
        self.shape = x.shape
        return x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)

    def backward(self, dy, need_dx):
        n, h, w, c = self.shape
        return dy.reshape(n, c, h, w).transpose(0, 2, 3, 1)


class Reshape:
    params = []

    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return x.reshape((x.shape[0],) + self.shape)

    def backward(self, dy, need_dx):
        return None


def mlp(rng):
    return [Linear(rng, 784, 256), Relu(), Linear(rng, 256, 128), Relu(), Linear(rng, 128, 10)]


def lenet(rng):
    return [
        Reshape((28, 28, 1)),
        Conv(rng, 1, 6, 5, 2), Relu(), Pool(),
        Conv(rng, 6, 16, 5, 0), Relu(), Pool(), Flatten(),
        Linear(rng, 400, 120), Relu(), Linear(rng, 120, 84), Relu(), Linear(rng, 84, 10),
    ]


def step(layers, velocity, x, y, lr=F(0.05), momentum=F(0.9), wd=F(5e-4)):
    for layer in layers:
        x = layer.forward(x)
    x = x - x.max(1, keepdims=True)
    e = np.exp(x)
    prob = e / e.sum(1, keepdims=True)
    prob[np.arange(len(y)), y] -= 1
    d = prob
    first = next(i for i, layer in enumerate(layers) if layer.params)
    for i in range(len(layers) - 1, -1, -1):
        d = layers[i].backward(d, i > first)
    scale = F(1.0 / len(y))
    for layer in layers:
        for p, g, v in zip(layer.params, getattr(layer, "grads", []), velocity[id(layer)]):
            g = g * scale + wd * p
            v *= momentum
            v += g
            p -= lr * v


def train_rate(make, images, labels, epochs, batch):
    rng = np.random.default_rng(0)
    layers = make(rng)
    velocity = {id(layer): [np.zeros_like(p) for p in layer.params] for layer in layers}
    best = 0.0
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(len(labels))
        start = time.perf_counter()
        for b in range(0, len(order), batch):
            idx = order[b : b + batch]
            # Same per-batch work as the trainer: gather and normalise the batch's bytes.
            x = (images[idx].astype(F) * F(1 / 255.0) - F(0.1307)) / F(0.3081)
            step(layers, velocity, x, labels[idx].astype(np.int64))
        best = max(best, len(order) / (time.perf_counter() - start))
    return best


def sgemm_gflops(m, k, n, seconds=0.5):
    a = np.random.default_rng(1).standard_normal((m, k)).astype(F)
    b = np.random.default_rng(2).standard_normal((k, n)).astype(F)
    a @ b
    best, runs, start = float("inf"), 0, time.perf_counter()
    while time.perf_counter() - start < seconds or runs < 3:
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
        runs += 1
    return 2.0 * m * k * n / best / 1e9


def main():
    data, epochs, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    images = read_idx(f"{data}/train-images-idx3-ubyte").reshape(-1, 784)
    labels = read_idx(f"{data}/train-labels-idx1-ubyte")
    print("numpy_version", np.__version__)
    print("mlp_samples_per_sec", train_rate(mlp, images, labels, epochs, batch))
    print("lenet_samples_per_sec", train_rate(lenet, images, labels, epochs, batch))
    for m, k, n in [(64, 784, 256), (50176, 25, 6), (6400, 150, 16), (1024, 1024, 1024)]:
        print(f"sgemm_{m}x{k}x{n}_gflops", sgemm_gflops(m, k, n))


if __name__ == "__main__":
    main()
