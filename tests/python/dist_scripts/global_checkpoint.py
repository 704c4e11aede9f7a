"""Run under mpirun: `save DIR` writes a checkpoint of a model laid out over
all ranks (data- and tensor-parallel parameters, a partial-sum tensor);
`load DIR` loads it on however many ranks run now, into a model with another
layout, and checks every value."""
import sys

import numpy as np

import meshflow as mf

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S, P = mf.sbp.broadcast, mf.sbp.split, mf.sbp.partial_sum
mode, directory = sys.argv[1], sys.argv[2]
mesh = mf.placement("cpu", list(range(world)))


def build():
    mf.manual_seed(0)
    return mf.nn.Sequential(mf.nn.Linear(7, 10), mf.nn.ReLU(), mf.nn.Linear(10, 3))


expected = build().state_dict()
path = f"{directory}/model.safetensors"
if mode == "save":
    model = build().to_global(mesh, B)
    model[0].weight = mf.nn.Parameter(model[0].weight.detach().to_global(sbp=S(0)))   # 10 rows: uneven on 4
    model[2].weight = mf.nn.Parameter(model[2].weight.detach().to_global(sbp=S(1)))
    extra = mf.full((3, 2), float(rank + 1)).to_global(placement=mesh, sbp=P)      # sum over ranks
    mf.save({"model": model.state_dict(), "extra": extra, "step": 7, "note": "global"}, path)
else:
    ckpt = mf.load(path)
    assert ckpt["step"] == 7 and ckpt["note"] == "global"
    saved_world = int(sys.argv[3])
    np.testing.assert_array_equal(ckpt["extra"].numpy(), np.full((3, 2), saved_world * (saved_world + 1) / 2))
    model = build().to_global(mesh, B)
    model[2].weight = mf.nn.Parameter(model[2].weight.detach().to_global(sbp=S(0)))
    with mf.no_grad():
        for p in model.parameters():
            p.mul_(0.0)
    model.load_state_dict(ckpt["model"])
    for key, value in model.state_dict().items():
        whole = value.to_global(sbp=B).to_local().numpy()
        np.testing.assert_array_equal(whole, expected[key].numpy(), err_msg=key)
print(f"rank {rank}/{world}: checkpoint {mode} OK", flush=True)
