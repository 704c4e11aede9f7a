"""Run under mpirun: `save DIR` trains a sharded MultiTableEmbedding (Adam)
for 3 steps and saves a snapshot; `load DIR` (on any number of ranks) loads
it and trains 2 more steps: the rows equal one process's dense tables
trained the 5 steps, so the rows and Adam's state came back whatever the
rank counts. `crash DIR` starts a second snapshot and stalls before it is
complete (the test kills the job there)."""
import os
import sys

import meshflow as mf
from one_embedding_sharded import batches, check_rows, dense_tables, make_embedding, rank, train, world

mode, directory = sys.argv[1], sys.argv[2]
emb = make_embedding(directory, seed=3 if mode != "load" else 11)  # a loaded one starts elsewhere
opt = mf.optim.Adam(emb.parameters(), lr=0.05)
steps = batches(5)
if mode in ("save", "crash"):
    train(emb, opt, steps[:3])
    emb.save_snapshot("model")
    if mode == "crash":
        train(emb, opt, steps[3:])
        os.environ["MESHFLOW_SNAPSHOT_TEST_PAUSE"] = "60"
        print(f"rank {rank}: saving again", flush=True)
        emb.save_snapshot("model")
else:
    emb.load_snapshot("model")
    train(emb, opt, steps[3:])
    reference = make_embedding(directory + "-reference", seed=3)
    dense = dense_tables(reference)
    train(None, None, steps, dense, mf.optim.Adam([t.weight for t in dense], lr=0.05))
    check_rows(emb, dense, "loaded")
print(f"rank {rank}/{world}: snapshot {mode} OK", flush=True)
