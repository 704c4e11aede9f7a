"""Run under mpirun: a tensor-parallel MLP block (column-parallel Linear with
weight split on dim 0, row-parallel Linear with weight split on dim 1, as in
Megatron), a tensor-parallel and a data-parallel transformer (GPT) block
equal the single-process blocks, forward and backward; on 4 ranks also a 2x2
mesh combining data (mesh axis 0) and tensor (mesh axis 1) parallelism."""
import numpy as np

import meshflow as mf
from layouts import shard_mlp, shard_transformer_layer, whole

rank, world = mf.env.get_rank(), mf.env.get_world_size()
B, S, P = mf.sbp.broadcast, mf.sbp.split, mf.sbp.partial_sum
E = 8


def mlp_block():
    mf.manual_seed(1)
    return mf.nn.Sequential(mf.nn.Linear(E, 4 * E), mf.nn.GELU(), mf.nn.Linear(4 * E, E)).double()


def check(model, ref, x_np, mesh, x_sbp):
    xr = mf.tensor(x_np).requires_grad_()
    ref_out = ref(xr)
    (ref_out * ref_out).sum().backward()
    x = mf.tensor(x_np, placement=mesh, sbp=x_sbp).requires_grad_()
    out = model(x)
    (out * out).sum().backward()
    np.testing.assert_allclose(whole(out), ref_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(whole(x.grad), xr.grad.numpy(), rtol=1e-10, atol=1e-12)
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_allclose(whole(p.grad), ref_params[name].grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    return out


x_np = np.random.default_rng(2).standard_normal((6, 5, E))

# Tensor parallel on a 1-D mesh.
mesh = mf.placement("cpu", list(range(world)))
tp = shard_mlp(mlp_block().to_global(mesh, B))
out = check(tp, mlp_block(), x_np, mesh, (B,))
assert world == 1 or out.sbp == (P,), out.sbp  # the row-parallel output is a partial sum

# Data parallel transformer block (causal mask) on a 1-D mesh.
def encoder():
    mf.manual_seed(3)
    return mf.nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0, activation="gelu", batch_first=True,
                                         norm_first=True).double()


class Block(mf.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = encoder()
        self.register_buffer("mask", mf.triu(mf.full((5, 5), float("-inf"), dtype=mf.float64), 1))

    def forward(self, x):
        return self.layer(x, src_mask=self.mask)


out = check(Block().to_global(mesh, B), Block(), x_np, mesh, (S(0),))
assert out.sbp == (S(0),), out.sbp  # the batch stays split through attention, norms and the MLP

# Tensor parallel transformer block: the attention's input projection and
# the first MLP layer column-parallel, the output projection and the second
# MLP layer row-parallel.
tp_block = Block().to_global(mesh, B)
shard_transformer_layer(tp_block.layer)
check(tp_block, Block(), x_np, mesh, (B,))

# 2-D: data parallel along mesh axis 0, tensor parallel along mesh axis 1.
if world == 4:
    mesh2 = mf.placement("cpu", [[0, 1], [2, 3]])
    tp2 = shard_mlp(mlp_block().to_global(mesh2, (B, B)), lead=(B,))
    out2 = check(tp2, mlp_block(), x_np, mesh2, (S(0), B))
    assert out2.sbp == (S(0), P), out2.sbp  # batch split along axis 0, row-parallel partial sums along axis 1
print(f"rank {rank}/{world}: tensor parallel OK", flush=True)
