#!/usr/bin/env python3
"""PyTorch DDP (gloo backend) next to bench/mpi_train_bench.cpp (issue 25).

The same model (wide: 784-2048-2048-10, deep: 784-1024x4-10, mlp: 784-128-10; ReLU; softmax
cross-entropy from logits; gpt: examples/char_lm's GPT at mpi_train_bench's size, bench/torch_char_lm.py's
module: 96 characters, windows of 64, width 256, 4 heads, 4 blocks, cross-entropy at every position, on
uniform random tokens), optimizer (SGD lr 0.01, or Adam 1e-3), per-rank
batch, synthetic MNIST-shaped data (every rank builds the same global batches
and takes its rows) and bucket size (bucket_cap_mb; --bucket-mb 0 means one
bucket holding every gradient, reduced when backward ends, as strata's flat
all-reduce) and the same columns. Launched under mpirun (bench/shaped_link.sh):
RANK and WORLD_SIZE come from OMPI_COMM_WORLD_RANK/SIZE, MASTER_ADDR and
MASTER_PORT from the environment (shaped_link.sh exports host 1's address).

Threads: torch.set_num_threads(--threads, default 1) and one inter-op thread,
as strata computes on one thread per rank (OpenBLAS single-threaded); gloo's
communication threads are its own, as strata's progress thread is.

Columns: step = wall time of --steps DDP steps / steps (after --warmup); compute =
the same steps of the same model without DDP (no communication), timed on every
rank at once just before (so under the same sharing of the cores); exposed =
step - compute. (strata's columns come from its trace instead: see the C++ file.)
  mpirun -np 2 python3 bench/ddp_mlp.py [--model wide] [--batch 64] [--steps 30] [--warmup 5] [--bucket-mb 25]
"""
import argparse
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError:
    print("ddp_mlp.py: skipped: python3-torch not installed")
    sys.exit(0)


# --model gpt: mpi_train_bench's make_gpt shape
GPT_VOCAB, GPT_CONTEXT, GPT_WIDTH, GPT_HEADS, GPT_LAYERS = 96, 64, 256, 4, 4


def make(model):
    if model == "gpt":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_char_lm import GPT  # the same module as the char LM's side-by-side
        return GPT(GPT_VOCAB, GPT_CONTEXT, GPT_LAYERS, GPT_WIDTH, GPT_HEADS)
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if model == "wide":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 10))
    if model == "deep":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    raise SystemExit(f"unknown model {model} (wide, deep, mlp, gpt)")


def synthetic(model, steps, global_batch, rank, batch, seed):
    """This rank's rows of `steps` global batches of standardized uniform pixels and uniform labels (gpt:
    uniform tokens, each position's label the next window's token: any target trains the same arithmetic)."""
    g = torch.Generator().manual_seed(seed)
    if model == "gpt":
        x = torch.randint(0, GPT_VOCAB, (steps, global_batch, GPT_CONTEXT), generator=g)
        y = torch.randint(0, GPT_VOCAB, (steps, global_batch, GPT_CONTEXT), generator=g)
        return x[:, rank * batch:(rank + 1) * batch].contiguous(), y[:, rank * batch:(rank + 1) * batch].contiguous()
    x = (torch.rand(steps, global_batch, 28, 28, generator=g) - 0.1307) / 0.3081
    y = torch.randint(0, 10, (steps, global_batch), generator=g)
    return x[:, rank * batch:(rank + 1) * batch].contiguous(), y[:, rank * batch:(rank + 1) * batch].contiguous()


def optimizer(name, params):
    return torch.optim.Adam(params, lr=1e-3) if name == "adam" else torch.optim.SGD(params, lr=0.01)


def timed_steps(model, opt, xs, ys):
    loss_fn = nn.CrossEntropyLoss()
    dist.barrier()
    t0 = time.perf_counter()
    for x, y in zip(xs, ys):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
    seconds = time.perf_counter() - t0
    dist.barrier()
    return seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="wide")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--label", default="pytorch-ddp")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    torch.manual_seed(1)
    global_batch = a.batch * world
    wx, wy = synthetic(a.model, a.warmup, global_batch, rank, a.batch, 2)
    tx, ty = synthetic(a.model, a.steps, global_batch, rank, a.batch, 3)

    # compute alone: the same steps without communication, every rank at once
    alone = make(a.model)
    alone_opt = optimizer(a.optimizer, alone.parameters())
    timed_steps(alone, alone_opt, wx, wy)
    compute = timed_steps(alone, alone_opt, tx, ty)
    del alone, alone_opt

    cap = a.bucket_mb if a.bucket_mb > 0 else 1e6  # 0: one bucket of everything
    model = DDP(make(a.model), bucket_cap_mb=cap)
    opt = optimizer(a.optimizer, model.parameters())
    timed_steps(model, opt, wx, wy)
    seconds = timed_steps(model, opt, tx, ty)

    if rank == 0:
        step_ms, compute_ms = 1e3 * seconds / a.steps, 1e3 * compute / a.steps
        print(f"{a.label:<18} {world:5d} {a.bucket_mb:7.1f} {global_batch * a.steps / seconds:11.0f} {step_ms:9.1f} "
              f"{compute_ms:10.1f} {step_ms - compute_ms:10.1f} {'-':>8}   # {a.model}, {a.optimizer}, batch "
              f"{a.batch}/rank, {a.steps} steps, torch {torch.__version__}, {a.threads} thread(s)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
