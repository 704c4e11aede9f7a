"""What the distributed test scripts share: a global tensor's whole value,
the tensor-parallel layouts of an MLP and of a transformer layer, the
embedding stage of the pipeline tests' tied models, the machine the
auto-parallel tests plan for, and their train-step graph and memory
count."""
import meshflow as mf

B, S = mf.sbp.broadcast, mf.sbp.split


def whole(t):
    """The global tensor's value, the same on every rank (numpy)."""
    nd = len(t.placement.hierarchy)
    return t.detach().to_global(sbp=(B,) * nd).to_local().numpy()


def shard(module, name, sbp):
    """Replaces the parameter module.<name> by itself laid out as sbp."""
    setattr(module, name, mf.nn.Parameter(getattr(module, name).detach().to_global(sbp=sbp)))


def shard_mlp(mlp, lead=()):
    """Sequential(Linear, activation, Linear) tensor parallel along the last
    mesh axis: the first layer column-parallel, the second row-parallel (its
    output is a partial sum). lead: the SBP of the mesh axes before it."""
    shard(mlp[0], "weight", lead + (S(0),))
    shard(mlp[0], "bias", lead + (S(0),))
    shard(mlp[2], "weight", lead + (S(1),))
    return mlp


def shard_transformer_layer(layer):
    """A TransformerEncoderLayer tensor parallel on a 1-D mesh: attention's
    input projection and the first MLP layer column-parallel, the output
    projection and the second MLP layer row-parallel."""
    attn = layer.self_attn
    shard(attn, "in_proj_weight", (S(0),))
    shard(attn, "in_proj_bias", (S(0),))
    shard(attn.out_proj, "weight", (S(1),))
    shard(layer.linear1, "weight", (S(0),))
    shard(layer.linear1, "bias", (S(0),))
    shard(layer.linear2, "weight", (S(1),))
    return layer


class Embed(mf.nn.Module):
    """A pipeline's first stage: an embedding whose weight a later stage's
    head reuses (tied)."""

    def __init__(self):
        super().__init__()
        self.emb = mf.nn.Embedding(11, 6)

    def forward(self, ids):
        return self.emb(ids)


def _ring(kind, m):
    return 2 * (m - 1) / m if kind == "all_reduce" else (m - 1) / m


# A described machine for the auto-parallel tests (100 GFLOP/s, 20 GB/s
# memory, collectives of 10 us per ring step at 5 GB/s), as
# meshflow.distributed.auto.to_dict's data.
MACHINE = {
    "gemm_flops": 100e9, "gemm_flops_f64": 50e9, "gemm_flops_16": 200e9, "memory_bandwidth": 20e9,
    "op_overhead": 1e-6,
    "collectives": {kind: {str(m): [[4096, 10e-6 * (m - 1) + 4096 * _ring(kind, m) / 5e9],
                                    [1 << 26, 10e-6 * (m - 1) + (1 << 26) * _ring(kind, m) / 5e9]]
                           for m in (2, 4)} for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")},
}


def step_alongside(local, local_opt, graph, x, y, placement):
    """One step of `local` in one process (mse_loss, `local_opt`) and one
    call of the training `graph` on the same batch split over `placement`
    (numpy x, y); their losses must be equal."""
    import numpy as np
    import meshflow.nn.functional as F
    local_opt.zero_grad()
    loss = F.mse_loss(local(mf.tensor(x)), mf.tensor(y))
    loss.backward()
    local_opt.step()
    got = graph(mf.tensor(x).to_global(placement=placement, sbp=B).to_global(sbp=S(0)),
                mf.tensor(y).to_global(placement=placement, sbp=B).to_global(sbp=S(0)))
    np.testing.assert_allclose(float(whole(got.to_global(placement=placement, sbp=B))), loss.item(), rtol=1e-12)


class LossStep(mf.nn.Graph):
    """A train step graph: loss_fn(model(x), y), its backward and opt's
    update, searched by enable_auto_parallel when `auto`."""

    def __init__(self, model, opt, loss_fn, auto=True):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn
        self.add_optimizer(opt)
        self.config.enable_auto_parallel(auto)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def kept_bytes(model, opt):
    """The parameters' and optimizer state's bytes on this rank."""
    state = opt.state_dict()["state"]
    tensors = list(model.parameters()) + [t for entry in state.values() for t in entry.values()
                                          if isinstance(t, mf.Tensor) and t.dim() > 0]
    return sum((t.to_local() if t.is_global else t).numel() * t.element_size() for t in tensors)
