"""A user's program, unmodified: a Hugging Face GPT-2 (random weights, no download) trained for a few
steps on random tokens. Prints one line per step: `step N loss L ms T` (T: host wall time of the step,
synchronised), so the doctor's overhead and its effect on the losses can be checked by running this
script twice, with and without `ccoverlap doctor`.

usage: python bench/device/doctor_hf.py [--steps 30] [--layers 6] [--width 1024]
"""
from __future__ import annotations

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    args = p.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=16, n_positions=args.seq, vocab_size=8192)
    model = GPT2LMHeadModel(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tokens = torch.randint(0, cfg.vocab_size, (args.steps, args.batch, args.seq), device=device)
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss = model(tokens[step], labels=tokens[step]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"step {step} loss {loss.item():.6f} ms {(time.perf_counter() - t0) * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
