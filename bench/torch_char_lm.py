#!/usr/bin/env python3
"""PyTorch's side of examples/char_lm (issue 26's reference): the same GPT
(token and learned position embeddings, pre-norm blocks of causal multi-head
self-attention and a 4x GELU MLP with residual connections, a final
LayerNorm and a projection to the characters), the same data (Debian's
fortunes: the first 90% in windows of --context characters without overlap,
the first --train-limit of them, shuffled; the last 10% held out), the same
recipe (AdamW, weight decay 0.1, epsilon 1e-7 as Keras', the gradient
clipped to global norm 1, a linear warm-up over min(100, steps / 10) steps
to --learning-rate, then a cosine decay to a tenth of it), on --threads CPU
threads. Prints the held-out loss in bits per character and training
tokens per second, in the columns bench/char_lm_side_by_side.sh reads:
  /usr/bin/python3 bench/torch_char_lm.py --train-limit 2000 --threads 2
Not a test; needs Debian's python3-torch."""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load(path, context, limit):
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = len(ids) - len(ids) // 10

    def windows(part):
        n = (len(part) - context - 1) // context + 1
        x = torch.stack([part[w * context:w * context + context] for w in range(n)])
        y = torch.stack([part[w * context + 1:w * context + context + 1] for w in range(n)])
        return x, y

    tx, ty = windows(ids[:cut])
    vx, vy = windows(ids[cut:])
    if limit:
        tx, ty = tx[:limit], ty[:limit]
    return len(chars), tx, ty, vx, vy


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width, eps=1e-3), nn.LayerNorm(width, eps=1e-3)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.heads = heads

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(w, dim=2)
        q, k, v = (z.view(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else self.attend(q, k, v, t)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

    @staticmethod
    def attend(q, k, v, t):
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, width, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Parameter(torch.zeros(context, width))
        nn.init.uniform_(self.tok.weight, -0.05, 0.05)
        limit = math.sqrt(6 / (context + width))  # glorot-uniform over (context, width), as strata's
        nn.init.uniform_(self.pos, -limit, limit)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(width, eps=1e-3), nn.Linear(width, vocab)
        for m in self.modules():  # strata's (Keras') initialization: glorot-uniform kernels, zero biases
            if isinstance(m, nn.Linear):
                fan_in, fan_out = m.in_features, m.out_features
                if fan_out == 3 * fan_in:  # q, k and v: each its own (width, width) projection
                    fan_out = fan_in
                limit = math.sqrt(6 / (fan_in + fan_out))
                nn.init.uniform_(m.weight, -limit, limit)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.head(self.ln(self.blocks(self.tok(x) + self.pos)))


def main():
    p = argparse.ArgumentParser()
    default_corpus = os.path.join(os.environ.get("HOME", "."), ".cache/strata/corpus/fortunes.txt")
    p.add_argument("--corpus", default=default_corpus)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    vocab, tx, ty, vx, vy = load(a.corpus, a.context, a.train_limit)
    model = GPT(vocab, a.context, a.layers, a.width, a.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=a.learning_rate, eps=1e-7, weight_decay=0.1)
    steps = math.ceil(len(tx) / a.batch) * a.epochs
    warmup = min(100, max(1, steps // 10))

    def rate(step):  # warm-up from 0, then cosine to a tenth
        if step < warmup:
            return step / warmup
        k = min(1.0, (step - warmup) / max(1, steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    seconds, tokens = 0.0, 0
    for epoch in range(a.epochs):
        order = torch.randperm(len(tx))
        model.train()
        t0 = time.perf_counter()
        total, seen = 0.0, 0
        for i in range(0, len(tx), a.batch):
            b = order[i:i + a.batch]
            logits = model(tx[b])
            loss = F.cross_entropy(logits.reshape(-1, vocab), ty[b].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            total += loss.item() * len(b)
            seen += len(b)
        seconds += time.perf_counter() - t0
        tokens += len(tx) * a.context
        model.eval()
        with torch.no_grad():
            val = sum(F.cross_entropy(model(vx[i:i + 256]).reshape(-1, vocab), vy[i:i + 256].reshape(-1),
                                      reduction="sum").item() for i in range(0, len(vx), 256)) / (len(vx) * a.context)
        print(f"epoch {epoch + 1}: loss {total / seen / math.log(2):.4f} bits/char, "
              f"validation {val / math.log(2):.4f} bits/char")
    print(f"pytorch {torch.__version__}: validation {val / math.log(2):.4f} bits/char, {a.epochs} epochs of "
          f"{len(tx)} windows in {seconds:.1f} s: {tokens / seconds:.0f} tokens/s (training, {a.threads} threads)")


if __name__ == "__main__":
    main()
