"""Trains a DLRM click-through model on generated Criteo-like click logs.

    PYTHONPATH=python /usr/bin/python3 examples/dlrm.py --train 200000
    python -m meshflow.distributed.launch --nproc-per-node 2 examples/dlrm.py   # data parallel, sharded tables

The model (Naumov et al.'s DLRM): a bottom MLP over 13 dense features, 26
categorical features through one mf.one_embedding.MultiTableEmbedding
(sharded over the processes when there are several), the pairwise dot
products of the 27 vectors, and a top MLP to the click logit. Adam trains
the dense layers and the embedding rows (rows only where touched).

The data (make_click_logs): ids per feature drawn from a Zipf law over a
vocabulary, log-normal dense features, and labels drawn from a hidden
logistic model (a weight per id plus a linear term in the dense features),
so the best achievable AUC is known: that of the hidden model's own
probabilities. The logs are written once as a columnar binary file
(ClickLogs: a JSON header, then each column's raw bytes) and read back by a
mf.utils.data dataset through memory maps. Prints the training loss with a
progress bar, the held-out AUC (scikit-learn's roc_auc_score) next to the
achievable one, and plots the loss curve (--plot).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import meshflow as mf
import meshflow.nn.functional as F
from meshflow import one_embedding as oe

DENSE, SPARSE = 13, 26


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=int, default=200_000, help="training samples generated")
    p.add_argument("--test", type=int, default=20_000, help="held-out samples generated")
    p.add_argument("--vocab", type=int, default=1000, help="ids per categorical feature")
    p.add_argument("--zipf", type=float, default=1.2, help="the ids' Zipf exponent")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="runs/dlrm/clicks", help="where the generated logs are written")
    p.add_argument("--store", default="runs/dlrm/embedding", help="the embedding's persistent path")
    p.add_argument("--cache-mb", type=float, default=0, help="> 0: the cached store with this budget")
    p.add_argument("--plot", default="runs/dlrm/loss.png")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


# --- the data ---------------------------------------------------------------------------------------------
def make_click_logs(n, vocab, zipf, seed):
    """(dense (n, 13) float32, ids (n, 26) int64, labels (n,) float32, the
    hidden model's click probabilities (n,))."""
    rng = np.random.default_rng(seed)
    hidden = np.random.default_rng(1234)  # the same hidden model for every split
    id_weight = hidden.standard_normal((SPARSE, vocab)) * 0.6
    dense_weight = hidden.standard_normal(DENSE) * 0.3
    ranks = np.arange(1, vocab + 1)
    p = ranks ** -zipf
    p /= p.sum()
    ids = np.stack([rng.choice(vocab, n, p=p) for _ in range(SPARSE)], 1)
    dense = rng.lognormal(0.0, 1.0, (n, DENSE)).astype(np.float32)
    logit = np.log1p(dense) @ dense_weight + id_weight[np.arange(SPARSE), ids].sum(1) - 1.0
    prob = 1 / (1 + np.exp(-logit))
    labels = (rng.random(n) < prob).astype(np.float32)
    # Hash-like ids: each feature's ids live in their own range of 64-bit values.
    hashed = ids.astype(np.int64) * 2654435761 + np.arange(SPARSE, dtype=np.int64) * (1 << 40)
    return dense, hashed, labels, prob


def write_columns(path, columns):
    """A columnar file: 8 bytes of header length, a JSON header (rows, each
    column's dtype, shape and byte offset), then each column's bytes;
    written under another name and renamed, so a crash leaves no half file."""
    header, offset = {"columns": {}}, 0
    for name, array in columns.items():
        header["columns"][name] = {"dtype": str(array.dtype), "shape": list(array.shape), "offset": offset}
        offset += array.nbytes
    text = json.dumps(header).encode()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".part", "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for array in columns.values():
            f.write(np.ascontiguousarray(array).tobytes())
    os.replace(path + ".part", path)


class ClickLogs(mf.utils.data.Dataset):
    """The samples of a columnar click-log file, read through memory maps:
    (dense float32 (13,), ids int64 (26,), label float32 ())."""

    def __init__(self, path):
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if not 0 < length < 1 << 20:
                raise ValueError(f"ClickLogs: {path} is not a click-log file (header length {length})")
            header = json.loads(f.read(length))
        base = 8 + length
        self.columns = {}
        for name, c in header["columns"].items():
            self.columns[name] = np.memmap(path, dtype=np.dtype(c["dtype"]), mode="r", offset=base + c["offset"],
                                           shape=tuple(c["shape"]))
        self.n = self.columns["labels"].shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        c = self.columns
        return mf.tensor(np.array(c["dense"][i])), mf.tensor(np.array(c["ids"][i])), mf.tensor(c["labels"][i])


# --- the model --------------------------------------------------------------------------------------------
class DLRM(mf.nn.Module):
    def __init__(self, dim, embedding):
        super().__init__()
        self.bottom = mf.nn.Sequential(mf.nn.Linear(DENSE, 64), mf.nn.ReLU(), mf.nn.Linear(64, dim), mf.nn.ReLU())
        self.embedding = embedding
        pairs = (SPARSE + 1) * SPARSE // 2
        self.top = mf.nn.Sequential(mf.nn.Linear(dim + pairs, 64), mf.nn.ReLU(), mf.nn.Linear(64, 1))
        rows, cols = np.triu_indices(SPARSE + 1, 1)
        self.rows, self.cols = mf.tensor(rows), mf.tensor(cols)

    def forward(self, dense, ids):
        x = self.bottom(mf.log1p(dense))
        vectors = mf.cat([x.unsqueeze(1), self.embedding(ids)], 1)  # (batch, 27, dim)
        dots = mf.bmm(vectors, vectors.transpose(1, 2))[:, self.rows, self.cols]
        return self.top(mf.cat([x, dots], 1)).squeeze(1)


def main(argv=None):
    args = parse_args(argv)
    rank, world = mf.distributed.get_rank(), mf.distributed.get_world_size()
    train_path, test_path = args.data + ".train", args.data + ".test"
    if rank == 0:
        for path, n, seed in ((train_path, args.train, args.seed), (test_path, args.test, args.seed + 1)):
            dense, ids, labels, prob = make_click_logs(n, args.vocab, args.zipf, seed)
            write_columns(path, {"dense": dense, "ids": ids, "labels": labels, "prob": prob.astype(np.float32)})
    if world > 1:
        mf.distributed.barrier()
    train_set, test_set = ClickLogs(train_path), ClickLogs(test_path)

    mf.manual_seed(args.seed)
    tables = [oe.make_table_options(oe.make_uniform_initializer(-0.05, 0.05)) for _ in range(SPARSE)]
    store = (oe.make_cached_ssd_store_options(args.cache_mb, args.store) if args.cache_mb > 0
             else oe.make_device_mem_store_options(args.store, capacity=SPARSE * args.vocab))
    embedding = oe.MultiTableEmbedding("dlrm", args.dim, mf.float32, mf.int64, tables, store, seed=args.seed)
    model = DLRM(args.dim, embedding)
    dense_part = [m for m in (model.bottom, model.top)]
    if world > 1:  # the dense layers data parallel; the tables are sharded by the embedding itself
        model.bottom = mf.nn.parallel.DistributedDataParallel(model.bottom)
        model.top = mf.nn.parallel.DistributedDataParallel(model.top)
    opt = mf.optim.Adam(model.parameters(), lr=args.lr)
    if rank == 0:
        params = sum(p.numel() for m in dense_part for p in m.parameters())
        print(f"DLRM: {params} dense parameters, {SPARSE} tables of {args.dim}-wide rows, {world} process(es); "
              f"{len(train_set)} training and {len(test_set)} held-out samples", flush=True)

    # Each process takes its part of every global batch.
    per_rank = args.batch_size // world
    sampler = mf.utils.data.DistributedSampler(train_set, num_replicas=world, rank=rank,
                                                           shuffle=True, seed=args.seed, drop_last=True)
    loader = mf.utils.data.DataLoader(train_set, batch_size=per_rank, sampler=sampler, drop_last=True)
    losses, begin = [], time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        batches = loader
        if rank == 0 and not args.no_progress:
            from tqdm import tqdm
            batches = tqdm(loader, total=len(loader), desc=f"epoch {epoch + 1}", leave=False, unit="batch")
        for dense, ids, labels in batches:
            loss = F.binary_cross_entropy_with_logits(model(dense, ids), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if rank == 0:
            recent = losses[-len(loader):]
            print(f"epoch {epoch + 1}: loss {sum(recent) / len(recent):.4f}  "
                  f"({(time.perf_counter() - begin) / (epoch + 1):.1f} s/epoch, {embedding.num_rows} rows here)",
                  flush=True)

    # The held-out AUC: every process scores its part (lookups are collective), rank 0 gathers them.
    model.eval()
    scores = []
    test_loader = mf.utils.data.DataLoader(test_set, batch_size=per_rank, sampler=mf.utils.data.
                                           DistributedSampler(test_set, num_replicas=world, rank=rank,
                                                              shuffle=False, drop_last=True))
    with mf.no_grad():
        for dense, ids, labels in test_loader:
            scores.append(np.stack([model(dense, ids).numpy(), labels.numpy()], 1))
    mine = np.concatenate(scores) if scores else np.zeros((0, 2))
    everyone = [None] * world
    if world > 1:
        mf.distributed.all_gather_object(everyone, mine)
    else:
        everyone = [mine]
    auc = None
    if rank == 0:
        from sklearn.metrics import roc_auc_score
        scored = np.concatenate(everyone)
        auc = roc_auc_score(scored[:, 1], scored[:, 0])
        achievable = roc_auc_score(test_set.columns["labels"], test_set.columns["prob"])
        print(f"held-out AUC {auc:.4f} (the hidden model's: {achievable:.4f})", flush=True)
        if args.plot:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
            plt.figure(figsize=(6, 3.5))
            plt.plot(losses, linewidth=0.6)
            plt.xlabel("step")
            plt.ylabel("loss")
            plt.title("DLRM on generated click logs")
            plt.tight_layout()
            plt.savefig(args.plot)
            print(f"loss curve: {args.plot}")
        return auc, achievable
    return None


if __name__ == "__main__":
    sys.exit(0 if main() is not False else 1)
