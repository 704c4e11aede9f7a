"""A training step for the simulator (python -m meshflow.distributed.simulate
takes files like this one): step() returns (model, optimizer, loss_fn,
inputs), the inputs holding the whole batch."""
import meshflow as mf
import meshflow.nn.functional as F


def step():
    mf.manual_seed(0)
    model = mf.nn.Sequential(mf.nn.Linear(64, 512), mf.nn.GELU(), mf.nn.Linear(512, 64))
    opt = mf.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = mf.randn(128, 64), mf.randn(128, 64)
    return model, opt, lambda m, a, b: F.mse_loss(m(a), b), [x, y]
