"""Trains a character-level GPT on Debian's fortunes and samples from it.

    PYTHONPATH=python /usr/bin/python3 examples/gpt.py --steps 300

The model is examples/models.py's gpt (pre-norm transformer blocks with
causal self-attention) over the characters of /usr/share/games/fortunes;
AdamW with warm-up and cosine decay. Prints the training loss, the loss on
held-out text, and sampled text.

Pipelined over N processes (docs/pipeline.md), the blocks split evenly:

    python -m meshflow.distributed.launch --nproc-per-node 2 examples/gpt.py \
        --pipeline-stages 2 --schedule 1f1b --microbatches 4

('interleaved_1f1b' and 'zbv' put two stages on each process.) The
gradient norm is clipped over all stages; the last stage's process prints
the losses; sampling needs the whole model in one process and is skipped.
With --graph the pipelined step is a compiled mf.nn.Graph: each block is
marked with its stage (GraphModule.set_stage) and the graph runs the
schedule over the micro-batches.
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
    p.add_argument("--pipeline-stages", type=int, default=1,
                   help="processes of a pipeline (one per process of the job)")
    p.add_argument("--schedule", default="1f1b", help="gpipe, 1f1b, zero_bubble, interleaved_1f1b or zbv")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--graph", action="store_true", help="pipelined: train with a compiled mf.nn.Graph")
    return p.parse_args(argv)


def lr_at(step, total, peak):
    warmup = max(1, total // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def training_steps(args, loader, optimizer):
    """(step number from 1, x, y) for args.steps steps, cycling the loader;
    sets the learning rate and zeroes the gradients first."""
    step = 0
    while step < args.steps:
        for x, y in loader:
            if step >= args.steps:
                return
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, args.steps, args.lr)
            optimizer.zero_grad()
            step += 1
            yield step, x, y


def report(args, step, losses, begin):
    """Prints the mean loss of the last args.log_every steps."""
    if step % args.log_every == 0 or step == args.steps:
        elapsed = time.perf_counter() - begin
        recent = sum(losses[-args.log_every:]) / len(losses[-args.log_every:])
        print(f"step {step}/{args.steps}: loss {recent:.4f}  ({1000 * elapsed / step:.0f} ms/step)", flush=True)


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

    if args.pipeline_stages > 1:
        train = train_pipelined_graph if args.graph else train_pipelined
        return train(args, text, loader, val_loader)
    model = models.gpt(mf, vocab=text.vocab_size, d_model=args.d_model, heads=args.heads, layers=args.layers,
                       seq=args.seq)
    params = sum(p.numel() for p in model.parameters())
    print(f"GPT: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, {params / 1e6:.2f} M parameters")
    optimizer = mf.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))

    losses, begin = [], time.perf_counter()
    for step, x, y in training_steps(args, loader, optimizer):
        loss = models.loss_fn("gpt", mf, model(x), y)
        loss.backward()
        mf.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        report(args, step, losses, begin)

    model.eval()
    with mf.no_grad():
        val = [models.loss_fn("gpt", mf, model(x), y).item() for x, y in val_loader]
    print(f"held-out loss {sum(val) / len(val):.4f}")
    text_out = sample(model, text, args.prompt, args.sample_chars, args.temperature, args.seq,
                      np.random.default_rng(args.seed))
    print("sample:\n" + text_out)
    return losses


def train_pipelined(args, text, loader, val_loader):
    from meshflow.distributed import pipelining as pp
    rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
    stages, _ = stage_layout(args)
    per_rank = stages // world
    model = models.gpt_sequential(mf, vocab=text.vocab_size, d_model=args.d_model, heads=args.heads,
                                  layers=args.layers, seq=args.seq)
    pipe = pp.pipeline(model, split_points=[f"block{s * args.layers // stages}" for s in range(1, stages)])
    layout = pp.make_schedule(args.schedule, world, world if args.schedule == "interleaved_1f1b" else 1,
                              per_rank).stage_rank
    mine = [pipe.build_stage(s) for s in range(stages) if layout[s] == rank]
    cls = pp.get_schedule_class(args.schedule)

    def loss_fn(logits, target):
        return models.loss_fn("gpt", mf, logits, target)

    schedule = cls(mine if per_rank > 1 else mine[0], args.microbatches, loss_fn=loss_fn)
    holds_first = any(s.is_first for s in mine)
    holds_last = any(s.is_last for s in mine)
    params = list({p.data_ptr(): p for s in mine for p in s.submod.parameters()}.values())
    optimizer = mf.optim.AdamW(params, lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    if holds_last:
        print(f"GPT: {args.layers} layers over {stages} stages on {world} processes, schedule {args.schedule}, "
              f"{args.microbatches} micro-batches", flush=True)

    def run(schedule, x, y, losses=None):
        kwargs = {"target": y, "losses": losses} if holds_last and losses is not None else {}
        return schedule.step(*([x] if holds_first else []), **kwargs)

    history, begin = [], time.perf_counter()
    for step, x, y in training_steps(args, loader, optimizer):
        losses = []
        run(schedule, x, y, losses)
        # The gradient norm over every stage: each rank's sum of squares, summed.
        squares = mf.zeros(1, dtype=mf.float64)
        for p in params:
            if p.grad is not None:
                squares += (p.grad.double() ** 2).sum()
        mf.distributed.all_reduce(squares)
        scale = min(1.0, 1.0 / (math.sqrt(squares.item()) + 1e-6))
        for p in params:
            if p.grad is not None and scale < 1.0:
                p.grad.mul_(scale)
        optimizer.step()
        if holds_last:
            history.append(sum(l.item() for l in losses) / len(losses))
            report(args, step, history, begin)
    for s in mine:
        s.submod.eval()
    forward_only = cls(mine if per_rank > 1 else mine[0], 1)
    val = []
    with mf.no_grad():
        for x, y in val_loader:
            out = run(forward_only, x, y)
            if holds_last:
                val.append(loss_fn(out, y).item())
    if holds_last:
        print(f"held-out loss {sum(val) / len(val):.4f}")
        print("sampling needs the whole model in one process: skipped when pipelined")
    return history


def stage_layout(args):
    """(stages, the rank of each stage) for args.schedule over the job."""
    world = mf.distributed.get_world_size()
    if world != args.pipeline_stages:
        raise SystemExit(f"--pipeline-stages {args.pipeline_stages} needs as many processes, got {world} "
                         f"(python -m meshflow.distributed.launch --nproc-per-node {args.pipeline_stages} ...)")
    per_rank = 2 if args.schedule in ("interleaved_1f1b", "zbv") else 1
    stages = world * per_rank
    if args.layers < stages:
        raise SystemExit(f"--layers {args.layers} cannot fill {stages} stages")
    if args.schedule == "zbv":
        return stages, [s if s < world else stages - 1 - s for s in range(stages)]
    return stages, [s % world for s in range(stages)]


def train_pipelined_graph(args, text, loader, val_loader):
    """The pipelined GPT as a compiled graph: embed and the first blocks on
    stage 0, ..., the last blocks and the head on the last stage."""
    rank = mf.distributed.get_rank()
    stages, rank_of = stage_layout(args)
    placements = [mf.placement("cpu", [r]) for r in rank_of]
    model = models.gpt_sequential(mf, vocab=text.vocab_size, d_model=args.d_model, heads=args.heads,
                                  layers=args.layers, seq=args.seq)
    children = list(model.children())
    stage_of = [0] + [k * stages // args.layers for k in range(args.layers)] + [stages - 1]
    for child, s in zip(children, stage_of):
        child.to_global(placements[s], mf.sbp.broadcast)
    # OneFlow's graph clipping: after the last micro-batch, by the norm over all stages.
    optimizer = mf.optim.AdamW([{"params": list(model.parameters()), "clip_grad_max_norm": 1.0}], lr=args.lr,
                               weight_decay=0.1, betas=(0.9, 0.95))
    first, last = placements[0], placements[-1]

    class Step(mf.nn.Graph):
        def __init__(self, train):
            super().__init__()
            self.model = model
            for child, s in zip(children, stage_of):
                child.to(mf.nn.graph.GraphModule).set_stage(s, placements[s])
            self.config.set_gradient_accumulation_steps(args.microbatches)
            self.config.set_pipeline_schedule(args.schedule)
            if train:
                self.add_optimizer(optimizer)
            self.train_step = train

        def build(self, x, y):
            h = x
            for child, s in zip(children, stage_of):
                h = child(h.to_global(placement=placements[s], sbp=mf.sbp.broadcast))
            loss = models.loss_fn("gpt", mf, h, y.to_global(placement=last, sbp=mf.sbp.broadcast))
            if self.train_step:
                loss.backward()
            return loss

    train_step, evaluate = Step(True), Step(False)
    holds_last = rank == rank_of[-1]
    if holds_last:
        print(f"GPT: {args.layers} layers over {stages} stages on {args.pipeline_stages} processes, schedule "
              f"{args.schedule}, {args.microbatches} micro-batches, compiled graph", flush=True)

    def as_global(t):
        return t.to_global(placement=first, sbp=mf.sbp.broadcast)

    history, begin = [], time.perf_counter()
    for step, x, y in training_steps(args, loader, optimizer):
        loss = train_step(as_global(x), as_global(y))
        if holds_last:
            history.append(loss.to_local().item())
            report(args, step, history, begin)
    model.eval()
    val = []
    for x, y in val_loader:
        if x.shape[0] % args.microbatches:
            continue  # a last batch the micro-batches do not divide
        loss = evaluate(as_global(x), as_global(y))
        if holds_last:
            val.append(loss.to_local().item())
    if holds_last:
        print(f"held-out loss {sum(val) / max(1, len(val)):.4f}")
        print("sampling needs the whole model in one process: skipped when pipelined")
    return history


if __name__ == "__main__":
    main()
