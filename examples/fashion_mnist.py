"""Trains a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist).

    PYTHONPATH=python /usr/bin/python3 examples/fashion_mnist.py --epochs 3

Prints a progress bar per epoch and a line of loss / accuracy / time; saves
a checkpoint after every epoch (--checkpoint) that --resume continues from,
with the same numbers an uninterrupted run would give; writes the loss
curve as a PNG (--plot).
"""
import argparse
import os
import sys
import time

import meshflow as mf
from meshflow.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # of the training images


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train-limit", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--test-limit", type=int, default=0, help="use only the first N test images (0: all)")
    p.add_argument("--workers", type=int, default=1, help="batches prepared ahead on background threads")
    p.add_argument("--checkpoint", default="runs/fashion_mnist/checkpoint.safetensors")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--stop-after", type=int, default=0,
                   help="train at most N epochs in this run (continue later with --resume)")
    p.add_argument("--plot", default="runs/fashion_mnist/loss.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, tests)")
    return p.parse_args(argv)


def limited(dataset, limit):
    if limit and limit < len(dataset):
        return mf.utils.data.Subset(dataset, list(range(limit)))
    return dataset


def progress(iterable, total, desc, disable):
    if disable:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, total=total, desc=desc, leave=False, unit="batch")


def evaluate(model, loader):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with mf.no_grad():
        for x, y in loader:
            out = model((x - MEAN) / STD)
            loss_sum += mf.nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            total += y.shape[0]
    return loss_sum / total, correct / total


def save_plot(history, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    steps = [i / history["steps_per_epoch"] for i in range(1, len(history["train_loss"]) + 1)]
    ax.plot(steps, history["train_loss"], label="train (per batch)", alpha=0.6)
    epochs = list(range(1, len(history["test_loss"]) + 1))
    ax.plot(epochs, history["test_loss"], "o-", label="test")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy")
    ax.set_title("meshflow: Fashion-MNIST CNN")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    mf.manual_seed(args.seed)
    train_set = limited(mf.datasets.FashionMNIST(args.data, train=True), args.train_limit)
    test_set = limited(mf.datasets.FashionMNIST(args.data, train=False), args.test_limit)
    shuffle_gen = mf.Generator().manual_seed(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=shuffle_gen,
                              num_workers=args.workers)
    test_loader = DataLoader(test_set, batch_size=1000, num_workers=args.workers)

    model = models.fashion_cnn(mf)
    optimizer = mf.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = mf.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(args.epochs, 1))
    history = {"train_loss": [], "test_loss": [], "test_acc": [], "steps_per_epoch": len(train_loader)}
    start_epoch = 0

    if args.resume:
        state = mf.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        shuffle_gen.set_state(tuple(state["shuffle_generator"]))
        mf.default_generator.set_state(tuple(state["default_generator"]))
        history = state["history"]
        start_epoch = state["epoch"]
        print(f"resumed from {args.checkpoint} after epoch {start_epoch}")

    last_epoch = args.epochs if not args.stop_after else min(args.epochs, start_epoch + args.stop_after)
    for epoch in range(start_epoch, last_epoch):
        model.train()
        begin = time.perf_counter()
        loss_sum, seen = 0.0, 0
        bar = progress(train_loader, len(train_loader), f"epoch {epoch + 1}/{args.epochs}", args.no_progress)
        for x, y in bar:
            optimizer.zero_grad()
            loss = mf.nn.functional.cross_entropy(model((x - MEAN) / STD), y)
            loss.backward()
            optimizer.step()
            value = loss.item()
            history["train_loss"].append(value)
            loss_sum += value * y.shape[0]
            seen += y.shape[0]
            if not args.no_progress:
                bar.set_postfix(loss=f"{value:.4f}")
        scheduler.step()
        train_time = time.perf_counter() - begin
        test_loss, test_acc = evaluate(model, test_loader)
        history["test_loss"].append(test_loss)
        history["test_acc"].append(test_acc)
        print(f"epoch {epoch + 1}: train loss {loss_sum / seen:.4f}  test loss {test_loss:.4f}  "
              f"test accuracy {100 * test_acc:.2f}%  ({train_time:.1f} s, {seen / train_time:.0f} images/s)",
              flush=True)
        if args.checkpoint:
            os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
            mf.save({
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "epoch": epoch + 1, "history": history,
                "shuffle_generator": list(shuffle_gen.get_state()),
                "default_generator": list(mf.default_generator.get_state()),
            }, args.checkpoint)
    if args.plot and history["train_loss"]:
        save_plot(history, args.plot)
        print(f"loss curve: {args.plot}")
    return history


if __name__ == "__main__":
    main()
