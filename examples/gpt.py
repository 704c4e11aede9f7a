"""Trains a character-level GPT on Debian's fortunes and samples from it.

    PYTHONPATH=python /usr/bin/python3 examples/gpt.py --steps 300

The model is examples/models.py's gpt (pre-norm transformer blocks with
causal self-attention) over the characters of /usr/share/games/fortunes;
AdamW with warm-up and cosine decay. Prints the training loss, the loss on
held-out text, and sampled text.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

import meshflow as mf
from meshflow.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--sample-chars", type=int, default=300)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--prompt", default="The ")
    return p.parse_args(argv)


def lr_at(step, total, peak):
    warmup = max(1, total // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def sample(model, dataset, prompt, length, temperature, seq, rng):
    model.eval()
    known = [c for c in prompt if dataset.encode(c).numel() == 1] or [dataset.decode(mf.tensor([0]))]
    tokens = dataset.encode("".join(known)).tolist()
    with mf.no_grad():
        for _ in range(length):
            context = mf.tensor([tokens[-seq:]])
            logits = model(context)[0, -1].double() / temperature
            probs = mf.softmax(logits, 0).numpy()
            tokens.append(int(rng.choice(len(probs), p=probs / probs.sum())))
    model.train()
    return dataset.decode(mf.tensor(tokens))


def main(argv=None):
    args = parse_args(argv)
    mf.manual_seed(args.seed)
    text = mf.datasets.TextDataset(args.data, block_size=args.seq, mode="char")
    n = len(text)
    held_out = max(1, n // 20)
    train_set = mf.utils.data.Subset(text, list(range(n - held_out)))
    val_set = mf.utils.data.Subset(text, list(range(n - held_out, n, max(1, held_out // 64))))
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                        generator=mf.Generator().manual_seed(args.seed), drop_last=True, num_workers=1)
    val_loader = DataLoader(val_set, batch_size=args.batch_size)
    print(f"{n} training windows of {args.seq} characters, vocabulary {text.vocab_size}")

    model = models.gpt(mf, vocab=text.vocab_size, d_model=args.d_model, heads=args.heads, layers=args.layers,
                       seq=args.seq)
    params = sum(p.numel() for p in model.parameters())
    print(f"GPT: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, {params / 1e6:.2f} M parameters")
    optimizer = mf.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))

    step, begin, losses = 0, time.perf_counter(), []
    while step < args.steps:
        for x, y in loader:
            if step >= args.steps:
                break
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, args.steps, args.lr)
            optimizer.zero_grad()
            loss = models.loss_fn("gpt", mf, model(x), y)
            loss.backward()
            mf.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step % args.log_every == 0 or step == args.steps:
                elapsed = time.perf_counter() - begin
                recent = sum(losses[-args.log_every:]) / len(losses[-args.log_every:])
                print(f"step {step}/{args.steps}: loss {recent:.4f}  ({1000 * elapsed / step:.0f} ms/step)",
                      flush=True)

    model.eval()
    with mf.no_grad():
        val = [models.loss_fn("gpt", mf, model(x), y).item() for x, y in val_loader]
    print(f"held-out loss {sum(val) / len(val):.4f}")
    text_out = sample(model, text, args.prompt, args.sample_chars, args.temperature, args.seq,
                      np.random.default_rng(args.seed))
    print("sample:\n" + text_out)
    return losses


if __name__ == "__main__":
    main()
