"""meshflow.optim against torch.optim: the same parameters and gradients give
the same parameters, state dicts and learning rates step after step."""
import math

import numpy as np
import pytest
import torch

import meshflow as mf

SHAPES = [(3, 4), (5,), ()]

OPTIMIZERS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "dampening": 0.3, "maximize": True}),
    ("Adam", {}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.02, "maximize": True, "eps": 1e-6}),
    ("AdamW", {}),
    ("AdamW", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.05}),
    ("RMSprop", {}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.01}),
    ("RMSprop", {"alpha": 0.9, "maximize": True}),
    ("Adagrad", {}),
    ("Adagrad", {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.1}),
]


def to_numpy(t):
    return t.detach().double().cpu().numpy()


def assert_close(m, t, dtype):
    rtol = 1e-5 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(to_numpy(m), to_numpy(t), rtol=rtol, atol=rtol)


def assert_state_dicts_match(m_sd, t_sd, dtype):
    assert len(m_sd["param_groups"]) == len(t_sd["param_groups"])
    for m_group, t_group in zip(m_sd["param_groups"], t_sd["param_groups"]):
        for key, value in t_group.items():
            if key in ("foreach", "differentiable", "capturable", "fused"):
                continue  # execution hints of PyTorch's implementation
            expected = list(value) if isinstance(value, tuple) else value
            assert m_group[key] == expected, key
    assert sorted(m_sd["state"]) == sorted(t_sd["state"])
    for index, t_state in t_sd["state"].items():
        m_state = m_sd["state"][index]
        assert sorted(m_state) == sorted(t_state), index
        for key, value in t_state.items():
            if isinstance(value, torch.Tensor):
                assert_close(m_state[key], value, dtype)
            else:
                assert m_state[key] == value


def run_both(name, options, dtype, steps, rng, make_groups=None, device="cpu"):
    """Runs `steps` steps of the optimizer in both libraries on the same
    parameters and random gradients (meshflow's on `device`); yields (step,
    mf params, torch params, opts)."""
    initial = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(steps)]
    libs = {}
    for lib in (torch, mf):
        where = {"device": device} if lib is mf else {}
        params = [lib.tensor(v, dtype=getattr(lib, dtype), requires_grad=True, **where) for v in initial]
        groups = make_groups(params) if make_groups else params
        libs[lib] = (params, getattr(lib.optim, name)(groups, **options))
    for step in range(steps):
        for lib, (params, opt) in libs.items():
            for i, (p, g) in enumerate(zip(params, grads[step])):
                # parameter 1 gets no gradient on step 2: optimizers skip it
                p.grad = None if (step == 2 and i == 1) else lib.tensor(g, dtype=getattr(lib, dtype)).to(p.device)
            opt.step()
        yield step, libs[mf], libs[torch]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=[f"{n}-{o}" for n, o in OPTIMIZERS])
def test_optimizer_steps_like_torch(name, options, dtype, device):
    rng = np.random.default_rng(len(name) * 31 + len(options))
    for step, (m_params, m_opt), (t_params, t_opt) in run_both(name, options, dtype, 5, rng, device=device):
        for m, t in zip(m_params, t_params):
            assert_close(m, t, dtype)
    assert_state_dicts_match(m_opt.state_dict(), t_opt.state_dict(), dtype)


def test_param_groups_are_live_dicts():
    rng = np.random.default_rng(3)

    def groups(params):
        return [{"params": params[:2], "lr": 0.01, "momentum": 0.5}, {"params": [params[2]]}]

    for step, (m_params, m_opt), (t_params, t_opt) in run_both("SGD", {"lr": 0.1}, "float64", 4, rng, groups):
        for m, t in zip(m_params, t_params):
            assert_close(m, t, "float64")
        if step == 1:
            for opt in (m_opt, t_opt):
                opt.param_groups[0]["lr"] = 0.2
                opt.param_groups[1]["momentum"] = 0.9
    group = m_opt.param_groups[0]
    assert group["lr"] == 0.2 and "momentum" in group and group.get("missing", 7) == 7
    assert set(group.keys()) == set(t_opt.param_groups[0].keys()) - {"foreach", "differentiable"}
    assert len(group["params"]) == 2 and group["params"][0].data_ptr() == m_params[0].data_ptr()
    with pytest.raises(KeyError):
        group["missing"]
    assert m_opt.defaults["lr"] == 0.1


def test_add_param_group_and_zero_grad():
    w = mf.ones(2, requires_grad=True)
    b = mf.zeros(1, requires_grad=True)
    opt = mf.optim.Adam([w], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5] and opt.param_groups[1]["betas"] == [0.9, 0.999]
    (w.sum() + b.sum()).backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None and b.grad is None
    with pytest.raises(ValueError):
        opt.add_param_group({"params": [w]})  # already optimised


def test_step_with_closure():
    for lib in (torch, mf):
        w = lib.tensor([1.0, -2.0], requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.25)

        def closure():
            opt.zero_grad()
            loss = (w * w).sum()
            loss.backward()
            return loss

        loss = opt.step(closure)
        assert loss.item() == 5.0 and w.tolist() == [0.5, -1.0]


@pytest.mark.parametrize("name,options", [OPTIMIZERS[1], OPTIMIZERS[5], OPTIMIZERS[10], OPTIMIZERS[13]],
                         ids=["SGD", "Adam", "RMSprop", "Adagrad"])
def test_state_dict_resumes_through_a_checkpoint(tmp_path, name, options, device):
    rng = np.random.default_rng(5)
    initial = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(6)]

    def make(values):
        params = [mf.tensor(v, dtype=mf.float64, requires_grad=True, device=device) for v in values]
        return params, getattr(mf.optim, name)(params, **options)

    def run(params, opt, steps):
        for g_step in steps:
            for p, g in zip(params, g_step):
                p.grad = mf.tensor(g, dtype=mf.float64, device=device)
            opt.step()

    straight, straight_opt = make(initial)
    run(straight, straight_opt, grads)
    first, first_opt = make(initial)
    run(first, first_opt, grads[:3])
    mf.save({"params": first, "optimizer": first_opt.state_dict()}, tmp_path / "ck.safetensors")
    checkpoint = mf.load(tmp_path / "ck.safetensors")
    resumed, resumed_opt = make([p.cpu().numpy() for p in checkpoint["params"]])
    resumed_opt.load_state_dict(checkpoint["optimizer"])
    run(resumed, resumed_opt, grads[3:])
    for a, b in zip(resumed, straight):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-12)


SCHEDULERS = [
    ("StepLR", lambda lib, opt: lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)),
    ("MultiStepLR", lambda lib, opt: lib.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 5, 5, 9], gamma=0.3)),
    ("ExponentialLR", lambda lib, opt: lib.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)),
    ("CosineAnnealingLR", lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6, eta_min=0.01)),
    ("LambdaLR", lambda lib, opt: lib.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.95 ** epoch + 0.01 * epoch)),
    ("LambdaLR-per-group", lambda lib, opt: lib.optim.lr_scheduler.LambdaLR(
        opt, [lambda e: 1.0 / (e + 1), lambda e: 0.9 ** e])),
    ("LinearLR", lambda lib, opt: lib.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=4)),
    ("SequentialLR", lambda lib, opt: lib.optim.lr_scheduler.SequentialLR(
        opt, [lib.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=3),
              lib.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)], milestones=[3])),
    ("OneCycleLR", lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=20)),
    ("OneCycleLR-linear-3phase", lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=0.8, epochs=4, steps_per_epoch=5, anneal_strategy="linear", three_phase=True)),
    ("CosineAnnealingWarmRestarts", lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        opt, T_0=3, T_mult=2, eta_min=0.01)),
    ("CosineAnnealingWarmRestarts-1", lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, 4)),
    ("CyclicLR", lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(
        opt, base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=3, step_size_down=2)),
    ("CyclicLR-triangular2", lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(
        opt, base_lr=0.01, max_lr=[0.1, 0.3], step_size_up=2, mode="triangular2", base_momentum=0.7)),
    ("CyclicLR-exp_range", lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(
        opt, base_lr=0.01, max_lr=0.1, step_size_up=4, mode="exp_range", gamma=0.9, cycle_momentum=False)),
    ("CyclicLR-scale_fn", lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(
        opt, base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 1 / (1 + x), scale_mode="iterations")),
]


@pytest.mark.parametrize("name,make", SCHEDULERS, ids=[s[0] for s in SCHEDULERS])
def test_scheduler_like_torch(name, make):
    history = {}
    for lib in (torch, mf):
        a, b = lib.ones(2, requires_grad=True), lib.ones(1, requires_grad=True)
        opt = lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.2}], lr=0.1, momentum=0.9)
        scheduler = make(lib, opt)
        lrs, momenta = [scheduler.get_last_lr()], []
        for _ in range(18):
            opt.step()
            scheduler.step()
            lrs.append(scheduler.get_last_lr())
            momenta.append([g["momentum"] for g in opt.param_groups])
        history[lib] = (lrs, momenta, scheduler.last_epoch, scheduler.state_dict())
    (m_lrs, m_mom, m_epoch, m_sd), (t_lrs, t_mom, t_epoch, t_sd) = history[mf], history[torch]
    np.testing.assert_allclose(m_lrs, t_lrs, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(m_mom, t_mom, rtol=1e-12)
    assert m_epoch == t_epoch
    # PyTorch adds private flags (verbose, ...); OneCycleLR stores its anneal_strategy where PyTorch
    # stores the annealing function itself, which a state dict file can't hold.
    assert set(m_sd) - {"anneal_strategy"} <= set(t_sd), set(m_sd) - set(t_sd)
    for key in ("last_epoch", "_step_count", "_milestones"):
        if key in t_sd:
            assert m_sd[key] == (dict(t_sd[key]) if isinstance(t_sd[key], dict) else t_sd[key]), key
    for key in ("base_lrs", "_last_lr"):
        if key in t_sd:
            np.testing.assert_allclose(m_sd[key], t_sd[key], rtol=1e-12)


def _sgd(lib, lr=0.1):
    a, b = lib.ones(2, requires_grad=True), lib.ones(1, requires_grad=True)
    return lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 2 * lr}], lr=lr, momentum=0.9)


def test_warm_restarts_with_fractional_epochs_like_torch():
    lrs = {}
    for lib in (torch, mf):
        opt = _sgd(lib)
        s = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=3, eta_min=0.001)
        seen = []
        for epoch in range(7):
            for i in range(4):
                s.step(epoch + i / 4)
                seen.append(s.get_last_lr())
        s.step(26)
        s.step()
        seen.append(s.get_last_lr())
        lrs[lib] = (seen, s.last_epoch, s.state_dict()["T_cur"], s.state_dict()["T_i"])
    np.testing.assert_allclose(lrs[mf][0], lrs[torch][0], rtol=1e-12)
    assert lrs[mf][1:] == pytest.approx(lrs[torch][1:], rel=1e-12)
    with pytest.raises(ValueError, match="non-negative epoch"):
        s.step(-1)
    with pytest.raises(ValueError, match="T_0"):
        mf.optim.lr_scheduler.CosineAnnealingWarmRestarts(_sgd(mf), T_0=0)
    with pytest.raises(ValueError, match="T_mult"):
        mf.optim.lr_scheduler.CosineAnnealingWarmRestarts(_sgd(mf), T_0=2, T_mult=0)


PLATEAU = [dict(), dict(mode="max", factor=0.5, patience=1, cooldown=2), dict(threshold_mode="abs", threshold=0.05,
                                                                              patience=0, min_lr=[0.03, 0.05]),
           dict(mode="max", threshold_mode="abs", patience=2, eps=0.02, factor=0.9)]


@pytest.mark.parametrize("options", PLATEAU)
def test_reduce_lr_on_plateau_like_torch(options):
    rng = np.random.default_rng(2)
    metrics = list(1.0 / (1 + np.arange(30)) + 0.2 * rng.random(30))
    runs = {}
    for lib in (torch, mf):
        opt = _sgd(lib)
        s = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **options)
        history = []
        for i, m in enumerate(metrics):
            s.step(lib.tensor(m) if i % 3 == 0 else m)
            history.append(([g["lr"] for g in opt.param_groups], s.num_bad_epochs, s.cooldown_counter, s.best))
        runs[lib] = (history, s.state_dict(), s.last_epoch)
    for (lr_m, bad_m, cool_m, best_m), (lr_t, bad_t, cool_t, best_t) in zip(runs[mf][0], runs[torch][0]):
        np.testing.assert_allclose(lr_m, lr_t, rtol=1e-12)
        assert (bad_m, cool_m) == (bad_t, cool_t) and best_m == pytest.approx(best_t, rel=1e-12)
    m_sd, t_sd = runs[mf][1], runs[torch][1]
    assert set(m_sd) == set(t_sd)
    for key in ("mode", "threshold_mode", "patience", "cooldown", "cooldown_counter", "num_bad_epochs", "last_epoch"):
        assert m_sd[key] == t_sd[key], key
    np.testing.assert_allclose(m_sd["_last_lr"], t_sd["_last_lr"], rtol=1e-12)
    # resuming continues identically
    opt2 = _sgd(mf)
    resumed = mf.optim.lr_scheduler.ReduceLROnPlateau(opt2, **options)
    resumed.load_state_dict(m_sd)
    assert resumed.best == pytest.approx(runs[mf][0][-1][3]) and resumed.last_epoch == runs[mf][2]


def test_reduce_lr_on_plateau_errors():
    with pytest.raises(ValueError, match="Factor|factor"):
        mf.optim.lr_scheduler.ReduceLROnPlateau(_sgd(mf), factor=1.0)
    with pytest.raises(ValueError, match="unknown"):
        mf.optim.lr_scheduler.ReduceLROnPlateau(_sgd(mf), mode="avg")
    with pytest.raises(ValueError, match="unknown"):
        mf.optim.lr_scheduler.ReduceLROnPlateau(_sgd(mf), threshold_mode="pct")
    with pytest.raises(ValueError, match="min_lr"):
        mf.optim.lr_scheduler.ReduceLROnPlateau(_sgd(mf), min_lr=[0.1, 0.2, 0.3])


def test_chained_scheduler_like_torch():
    runs = {}
    for lib in (torch, mf):
        opt = _sgd(lib)
        sched = lib.optim.lr_scheduler
        chain = sched.ChainedScheduler([sched.ExponentialLR(opt, gamma=0.9),
                                        sched.LinearLR(opt, start_factor=0.5, total_iters=4)])
        lrs = [chain.get_last_lr()]
        for _ in range(8):
            opt.step()
            chain.step()
            lrs.append(chain.get_last_lr())
        runs[lib] = (lrs, chain.state_dict())
    np.testing.assert_allclose(runs[mf][0], runs[torch][0], rtol=1e-12)
    assert len(runs[mf][1]["_schedulers"]) == 2
    assert runs[mf][1]["_schedulers"][1]["last_epoch"] == runs[torch][1]["_schedulers"][1]["last_epoch"]
    opt_a, opt_b = _sgd(mf), _sgd(mf)
    with pytest.raises(ValueError, match="same optimizer"):
        mf.optim.lr_scheduler.ChainedScheduler([mf.optim.lr_scheduler.ExponentialLR(opt_a, 0.9),
                                                mf.optim.lr_scheduler.ExponentialLR(opt_b, 0.9)])


def test_cyclic_lr_errors_like_torch():
    with pytest.raises(ValueError, match="momentum"):
        mf.optim.lr_scheduler.CyclicLR(mf.optim.Adam([mf.ones(1, requires_grad=True)]), 0.01, 0.1)
    with pytest.raises(ValueError, match="mode is invalid"):
        mf.optim.lr_scheduler.CyclicLR(_sgd(mf), 0.01, 0.1, mode="square")
    with pytest.raises(ValueError, match="expected 2 values"):
        mf.optim.lr_scheduler.CyclicLR(_sgd(mf), [0.01, 0.02, 0.03], 0.1)


def test_scheduler_state_dict_resumes():
    def make():
        w = mf.ones(1, requires_grad=True)
        opt = mf.optim.SGD([w], lr=1.0)
        return opt, mf.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    opt, scheduler = make()
    for _ in range(3):
        opt.step()
        scheduler.step()
    resumed_opt, resumed = make()
    resumed_opt.load_state_dict(opt.state_dict())
    resumed.load_state_dict(scheduler.state_dict())
    for _ in range(3):
        for o, s in ((opt, scheduler), (resumed_opt, resumed)):
            o.step()
            s.step()
    assert resumed.get_last_lr() == scheduler.get_last_lr() == [0.125]
    assert resumed.optimizer is resumed_opt


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, "inf", 3.0])
def test_clip_grad_norm_like_torch(norm_type, device):
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s) * 3 for s in SHAPES]
    results = []
    for lib in (torch, mf):
        where = {"device": device} if lib is mf else {}
        params = [lib.tensor(v, requires_grad=True, **where) for v in values]
        for p, v in zip(params, values):
            p.grad = lib.tensor(v * 2, **where)
        extra = lib.ones(2, requires_grad=True, **where)  # no gradient: skipped
        total = lib.nn.utils.clip_grad_norm_(params + [extra], max_norm=1.5, norm_type=norm_type)
        results.append((total, [p.grad for p in params]))
    (m_total, m_grads), (t_total, t_grads) = results
    assert_close(m_total, t_total, "float32")
    for m, t in zip(m_grads, t_grads):
        assert_close(m, t, "float32")
    single = mf.ones(3, requires_grad=True)
    single.grad = mf.full((3,), 4.0)
    assert mf.nn.utils.clip_grad_norm_(single, 1.0).item() == pytest.approx(math.sqrt(48))


def test_optimizer_errors():
    w = mf.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        mf.optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        mf.optim.SGD(w, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        mf.optim.SGD([w])
    with pytest.raises(ValueError, match="learning rate"):
        mf.optim.Adam([w], lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        mf.optim.SGD([w], lr=0.1, nesterov=True)
    opt = mf.optim.Adam([w])
    with pytest.raises(ValueError, match="parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    with pytest.raises(TypeError):
        mf.optim.lr_scheduler.StepLR(object(), 2)
    assert repr(mf.optim.SGD([w], lr=0.1)).startswith("SGD (\nParameter Group 0\n")
