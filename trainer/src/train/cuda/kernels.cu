// Element-wise kernels of the GPU engine (trainer/src/train/cuda/net.rs),
// compiled at run time by NVRTC. Every buffer is row-major, batch first
// (sample n's features are contiguous; an image is [channel][y][x]), in the
// layout of the CPU model. One thread per output element; no atomics, so
// results do not depend on scheduling. Sums over the batch (the bias
// gradient, bias_grad.rs) are cuBLAS products, not kernels here.

extern "C" __global__ void bias_add(float *y, const float *b, int total, int channels, int inner) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] += b[(i / inner) % channels];
}

extern "C" __global__ void relu_forward(float *y, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total && y[i] < 0.0f) y[i] = 0.0f;
}

// dy *= (y > 0), with y the ReLU's output.
extern "C" __global__ void relu_backward(float *dy, const float *y, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total && y[i] <= 0.0f) dy[i] = 0.0f;
}

// 2x2 max-pool, stride 2: x [n][c][h][w] -> y [n][c][h/2][w/2]; arg holds the
// input index of each maximum for the backward pass (first maximum on ties,
// row by row, as the CPU model).
extern "C" __global__ void maxpool_forward(const float *x, float *y, int *arg, int total, int h, int w) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int oh = h / 2, ow = w / 2;
    int ox = i % ow, oy = (i / ow) % oh, plane = i / (ow * oh);
    size_t base = (size_t)plane * h * w;
    size_t best = base + (size_t)(2 * oy) * w + 2 * ox;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            size_t j = base + (size_t)(2 * oy + dy) * w + 2 * ox + dx;
            if (x[j] > x[best]) best = j;
        }
    y[i] = x[best];
    arg[i] = (int)best;
}

// dx (zeroed before) gets each output's gradient at its maximum; the 2x2
// windows do not overlap, so no two threads write the same element.
extern "C" __global__ void maxpool_backward(const float *dy, const int *arg, float *dx, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) dx[arg[i]] = dy[i];
}

// col [n][c*k*k][oh*ow] from x [n][c][h][w], zero outside the padded image:
// col[n][(c*k + ky)*k + kx][oy*ow + ox] = x[n][c][oy + ky - pad][ox + kx - pad].
extern "C" __global__ void im2col(const float *x, float *col, int total, int c, int h, int w, int k, int pad, int oh,
                                  int ow) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int p = i % (oh * ow), row = (i / (oh * ow)) % (c * k * k), n = i / (oh * ow * c * k * k);
    int ox = p % ow, oy = p / ow;
    int kx = row % k, ky = (row / k) % k, ch = row / (k * k);
    int y = oy + ky - pad, xx = ox + kx - pad;
    col[i] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[(((size_t)n * c + ch) * h + y) * w + xx] : 0.0f;
}

// The adjoint of im2col: dx[n][ch][y][x] sums dcol over every (ky, kx) whose
// window covers (y, x). One thread per input element (a gather, no atomics).
extern "C" __global__ void col2im(const float *dcol, float *dx, int total, int c, int h, int w, int k, int pad, int oh,
                                  int ow) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int xx = i % w, y = (i / w) % h, ch = (i / (w * h)) % c, n = i / (w * h * c);
    float sum = 0.0f;
    for (int ky = 0; ky < k; ky++) {
        int oy = y + pad - ky;
        if (oy < 0 || oy >= oh) continue;
        for (int kx = 0; kx < k; kx++) {
            int ox = xx + pad - kx;
            if (ox < 0 || ox >= ow) continue;
            sum += dcol[(((size_t)n * c * k * k) + (ch * k + ky) * k + kx) * oh * ow + oy * ow + ox];
        }
    }
    dx[i] = sum;
}

// Per sample: loss = logsumexp(z) - z[label], correct = argmax(z) == label,
// and (when want_grad) dz = softmax(z) - onehot(label): the gradient of
// this sample's loss; the step sums them and divides by the global batch.
extern "C" __global__ void softmax_xent(const float *z, const unsigned char *labels, float *loss, int *correct,
                                        float *dz, int want_grad, int batch, int classes) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= batch) return;
    const float *row = z + (size_t)n * classes;
    int label = labels[n], best = 0;
    float max = row[0];
    for (int j = 1; j < classes; j++)
        if (row[j] > max) { max = row[j]; best = j; }
    float sum = 0.0f;
    for (int j = 0; j < classes; j++) sum += expf(row[j] - max);
    loss[n] = logf(sum) + max - row[label];
    correct[n] = best == label;
    if (want_grad) {
        for (int j = 0; j < classes; j++) dz[(size_t)n * classes + j] = expf(row[j] - max) / sum - (j == label);
    }
}

// SGD with momentum and weight decay (PyTorch's convention) on the summed
// gradient g scaled by 1 / global batch: g' = g*scale + wd*w; v = m*v + g'; w -= lr*v.
extern "C" __global__ void sgd(float *w, float *v, const float *g, int total, float lr, float momentum, float wd,
                               float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float grad = g[i] * scale + wd * w[i];
    v[i] = momentum * v[i] + grad;
    w[i] -= lr * v[i];
}
