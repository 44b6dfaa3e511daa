#!/usr/bin/env python3
"""PyTorch on the same GPU, for side-by-side figures with train_bench --device gpu.

The same models as strata's examples (MLP: Flatten, Dense 128 relu, Dense 10;
CNN: Conv 32x3 relu, pool 2, Conv 64x3 relu, pool 2, Dense 128 relu, Dense 10),
Adam(1e-3), cross-entropy from logits, MNIST-shaped data resident on the GPU
(standardized MNIST from $STRATA_MNIST_DIR, else ~/.cache/strata/mnist, when
present, else random),
one pass of 60,000 examples per measurement after a warm-up pass. Eager, and
the whole step captured in one CUDA graph (Adam with capturable=True).
Prints samples/s. Skips (exit 77) without PyTorch or a GPU.
  python3 bench/torch_mnist.py [--batches 128,1024] [--models mlp,cnn]
"""
import argparse
import os
import sys
import time

try:
    import torch
    import torch.nn as tnn
except ImportError:
    print("torch_mnist.py: skipped: no PyTorch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("torch_mnist.py: skipped: no GPU")
    sys.exit(77)


def model(name):
    if name == "mlp":
        return tnn.Sequential(tnn.Flatten(), tnn.Linear(784, 128), tnn.ReLU(), tnn.Linear(128, 10))
    return tnn.Sequential(tnn.Unflatten(1, (1, 28)), tnn.Conv2d(1, 32, 3), tnn.ReLU(), tnn.MaxPool2d(2),
                          tnn.Conv2d(32, 64, 3), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(),
                          tnn.Linear(64 * 5 * 5, 128), tnn.ReLU(), tnn.Linear(128, 10))


def data(n=60000):
    root = os.environ.get("STRATA_MNIST_DIR") or os.path.expanduser("~/.cache/strata/mnist")
    path = os.path.join(root, "train-images-idx3-ubyte")
    if os.path.exists(path):
        raw = open(path, "rb").read()[16:]
        x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).float().view(-1, 28, 28)[:n] / 255.0
        x = (x - 0.1307) / 0.3081
    else:
        x = torch.randn(n, 28, 28)
    y = torch.randint(0, 10, (x.shape[0],))
    return x.cuda(), y.cuda()


def measure(name, batch, graphed, x, y):
    torch.manual_seed(0)
    m = model(name).cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=graphed)
    loss_fn = tnn.CrossEntropyLoss()
    steps = x.shape[0] // batch
    if graphed:
        sx, sy = x[:batch].clone(), y[:batch].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):  # warm-up before capture, as PyTorch's docs ask
                opt.zero_grad(set_to_none=True)
                loss_fn(m(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            loss = loss_fn(m(sx), sy)
            loss.backward()
            opt.step()

        def step(i):
            sx.copy_(x[i * batch:(i + 1) * batch])
            sy.copy_(y[i * batch:(i + 1) * batch])
            g.replay()
    else:
        def step(i):
            opt.zero_grad(set_to_none=True)
            loss_fn(m(x[i * batch:(i + 1) * batch]), y[i * batch:(i + 1) * batch]).backward()
            opt.step()
    for i in range(min(steps, 50)):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="128,1024")
    p.add_argument("--models", default="mlp,cnn")
    a = p.parse_args()
    x, y = data()
    print(f"# PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}: one pass of {x.shape[0]} examples, "
          "data on the GPU, Adam")
    print(f"{'model':>6} {'batch':>6} {'mode':>8} {'samples/s':>12}")
    for name in a.models.split(","):
        for b in (int(v) for v in a.batches.split(",")):
            for graphed in (False, True):
                sps = measure(name, b, graphed, x, y)
                print(f"{name:>6} {b:>6} {'graph' if graphed else 'eager':>8} {sps:12.0f}", flush=True)


main()
