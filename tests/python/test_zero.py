"""ZeroRedundancyOptimizer in one process (the multi-rank equality is
tests/python/dist_scripts/zero_optimizer.py, run by test_global.py)."""
import numpy as np
import pytest

import meshflow as mf
from meshflow.distributed.optim import ZeroRedundancyOptimizer


def test_one_rank_equals_the_wrapped_optimizer_and_state_dicts_round_trip():
    def run(make):
        mf.manual_seed(0)
        model = mf.nn.Sequential(mf.nn.Linear(5, 7), mf.nn.Tanh(), mf.nn.Linear(7, 2)).double()
        opt = make(model.parameters())
        x = mf.randn(4, 5, dtype=mf.float64)
        for step in range(5):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
            if step % 2 == 1:  # a schedule set by hand on the (full) param_groups
                opt.param_groups[0]["lr"] *= 0.5
        return model, opt

    ref, ref_opt = run(lambda p: mf.optim.AdamW(p, lr=0.1))
    model, opt = run(lambda p: ZeroRedundancyOptimizer(p, mf.optim.AdamW, lr=0.1))
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"] == 0.025
    with pytest.raises(RuntimeError, match="consolidate_state_dict"):
        opt.state_dict()
    opt.consolidate_state_dict(to=0)
    sd = opt.state_dict()
    ref_sd = ref_opt.state_dict()
    assert sorted(sd["state"]) == sorted(ref_sd["state"])
    for k, state in ref_sd["state"].items():
        for key, value in state.items():
            np.testing.assert_array_equal(sd["state"][k][key].numpy(), value.numpy())
    assert len(opt.state) == 4


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="empty parameter list"):
        ZeroRedundancyOptimizer([], mf.optim.AdamW)
    p = mf.nn.Parameter(mf.ones(3))
    with pytest.raises(NotImplementedError, match="overlap_with_ddp"):
        ZeroRedundancyOptimizer([p], mf.optim.AdamW, overlap_with_ddp=True)
    opt = ZeroRedundancyOptimizer([p], mf.optim.SGD, lr=0.1)
    with pytest.raises(ValueError, match="parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    g = mf.nn.Parameter(mf.ones(4).to_global(mf.placement("cpu", [0]), mf.sbp.broadcast))
    with pytest.raises(ValueError, match="global tensor"):
        ZeroRedundancyOptimizer([g], mf.optim.SGD, lr=0.1)
