"""Device backends as a user sees them (torch.cuda / torch.backends names):
what is built, what is available, moving tensors and modules, and the errors
where no device is. The boundary itself (copies, allocators, kernel lookup,
autograd across devices) is checked on an emulated device by
tests/cpp/test_backend.cpp."""
import pytest

import meshflow as mf

BUILT = "cuda" in mf._C._build_info()["backends"].split()
NO_DEVICE = mf.cuda.device_count() == 0


def test_what_is_built_and_available():
    assert mf.backends.cuda.is_built() is BUILT
    assert mf.cuda.is_available() is (mf.cuda.device_count() > 0)
    assert mf.cuda.is_available() is False or BUILT
    assert mf.backends.mkldnn.is_available() and mf.backends.openmp.is_available()
    assert mf.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2", "AVX512")
    assert mf.backends.cudnn.is_available() is False


def test_coverage_lists_every_device_type():
    cov = mf.ops.coverage()
    assert set(cov) == {"cpu", "cuda"}
    assert cov["cpu"] == []                      # every op runs on the CPU
    assert cov["cuda"] == sorted(cov["cuda"])
    assert "to_device" not in cov["cuda"]        # the copy is the backend's own verb
    assert "transpose" not in cov["cuda"]        # views run everywhere
    # The shared kernel tables (elementwise, copies and factories,
    # reductions, the composed softmax and norms, optimizer updates,
    # layout, indexing, scans, the class losses, gradient scaling, the
    # random ops, linear algebra), cuBLAS's matmul and the host-staged
    # collectives and embeddings are instantiated for CUDA when the backend
    # is built: then no op lacks a CUDA kernel.
    shared = {"add", "mul", "div_rounding", "exp", "gelu", "gelu_backward", "clamp", "eq", "isfinite",
              "bitwise_not", "bitwise_left_shift", "remainder", "softplus", "where", "masked_fill", "copy",
              "cast", "full", "arange", "sum", "mean", "argmax", "max_dim", "var", "logsumexp", "softmax",
              "log_softmax_backward", "layer_norm", "layer_norm_backward", "matmul", "addmm", "adamw_update",
              "sgd_update", "cat", "flip", "roll", "pad", "triangle", "slice_backward", "diagonal_backward",
              "gather", "gather_backward", "index_select", "index_add", "embedding", "embedding_backward",
              "one_hot", "scatter", "scatter_value", "scatter_add", "cumsum", "cumprod", "cumprod_backward",
              "cross_entropy", "cross_entropy_backward", "cross_entropy_target_terms", "nll_loss",
              "nll_loss_backward", "amp_unscale", "amp_update_scale", "uniform", "normal", "random_int",
              "bernoulli", "bernoulli_scalar", "dropout", "dropout_backward", "mse_loss",
              "binary_cross_entropy_with_logits", "lgamma", "digamma", "polygamma", "index", "index_put",
              "upsample_bicubic2d_backward", "reflection_pad", "circular_pad_backward", "max_pool2d",
              "avg_pool3d_backward", "adaptive_max_pool2d", "max_pool2d_scatter", "batch_norm",
              "batch_norm_backward", "fused_attention", "fused_attention_backward", "sort", "topk",
              "scatter_reduce", "as_strided_backward", "randperm", "multinomial", "conv2d",
              "conv3d_backward", "conv_transpose2d", "nonzero", "masked_select", "masked_select_backward",
              "rnn_layer", "rnn_layer_backward", "linalg_svd", "linalg_eigh", "linalg_solve", "comm_all_reduce",
              "comm_recv", "one_embedding_lookup", "one_embedding_apply"}
    if BUILT:
        assert cov["cuda"] == []
    else:
        assert shared <= set(cov["cuda"])


def test_cpu_moves_are_identities():
    x = mf.arange(6.0, requires_grad=True)
    assert x.cpu() is x and x.to("cpu") is x and x.to(mf.device("cpu")) is x
    y = x.to("cpu", mf.float64)
    assert y.dtype == mf.float64 and y.device == mf.device("cpu")
    y.sum().backward()
    assert x.grad.tolist() == [1.0] * 6
    assert not x.is_pinned() and not x.is_cuda
    m = mf.nn.Linear(2, 2)
    w = m.weight
    assert m.cpu() is m and m.to("cpu") is m and m.weight is w


@pytest.mark.skipif(not NO_DEVICE, reason="a CUDA device is present")
def test_no_device_errors_name_what_is_missing():
    x = mf.ones(3)
    want = "no cuda device is available" if BUILT else "built without the cuda backend"
    for fn in (lambda: x.cuda(), lambda: x.to("cuda"), lambda: x.to("cuda:0", non_blocking=True),
               lambda: mf.zeros(2, device="cuda"), lambda: mf.nn.Linear(2, 2).cuda(),
               lambda: mf.nn.Linear(2, 2).to("cuda")):
        with pytest.raises(RuntimeError, match=want):
            fn()
    for fn in (mf.cuda.synchronize, mf.cuda.current_device, mf.cuda.Stream, mf.cuda.Event,
               mf.cuda.current_stream, lambda: mf.cuda.set_device(0), mf.cuda.init, mf.cuda.get_device_name,
               mf.cuda.get_device_capability, mf.cuda.get_device_properties, mf.cuda.mem_get_info,
               mf.cuda.is_bf16_supported, mf.cuda.initial_seed):
        with pytest.raises(RuntimeError, match="cuda"):
            fn()
    with pytest.raises(RuntimeError, match="pinned memory needs an accelerator"):
        x.pin_memory()
    # PyTorch's statistics read zero before CUDA is used.
    assert mf.cuda.memory_allocated() == 0 and mf.cuda.max_memory_allocated() == 0
    assert mf.cuda.memory_reserved() == 0 and mf.cuda.memory_stats() == {}
    assert mf.cuda.empty_cache() is None and mf.cuda.reset_peak_memory_stats() is None
    with mf.cuda.stream(None):
        pass
    # Seeding scripts run without a GPU, as PyTorch's do (the seed is kept for later).
    assert mf.cuda.manual_seed(1) is None and mf.cuda.manual_seed_all(2) is None
    assert mf.cuda.seed() is None and mf.cuda.seed_all() is None and mf.cuda.get_arch_list() == []


def test_device_arguments_are_checked():
    with pytest.raises(ValueError, match="cuda device"):
        mf.ones(2).cuda(mf.device("cpu"))
    with pytest.raises(ValueError):
        mf.device("cuda:-1")
    with pytest.raises(ValueError, match="cuda device"):
        mf.cuda.synchronize("cpu")
    g = mf.ones(2).to_global(placement=mf.placement("cpu", [0]), sbp=mf.sbp.broadcast)
    with pytest.raises(RuntimeError, match="to_global"):
        g.to("cuda")
    # A device named by a bad string is the device's error, not an argument mismatch.
    t = mf.ones(2)
    with pytest.raises(ValueError, match="expected a device type 'cpu' or 'cuda', got 'tpu'"):
        t.to("tpu")
    with pytest.raises(ValueError, match="invalid device index"):
        t.to("cuda:x", mf.float64)
    assert t.to("cpu", mf.float64).dtype == mf.float64 and t.to("cpu") is not None


needs_gpu = pytest.mark.skipif(NO_DEVICE, reason="no CUDA device visible (mf.cuda.device_count() == 0)")


@needs_gpu
def test_gpu_round_trip_with_autograd():
    x = mf.arange(12.0, dtype=mf.float64).reshape(3, 4).t().requires_grad_()
    on_gpu = x.cuda()
    assert on_gpu.is_cuda and on_gpu.device == mf.device("cuda:0") and on_gpu.is_contiguous()
    back = on_gpu.cpu()
    assert back.tolist() == x.tolist()
    # Values are read through a host copy, as in PyTorch.
    assert on_gpu.tolist() == x.tolist() and on_gpu[1, 2].item() == x[1, 2].item()
    assert "device='cuda:0'" in repr(on_gpu) and "dtype=meshflow.float64" in repr(on_gpu)
    (back * back).sum().backward()
    assert x.grad.tolist() == (2 * x.detach()).tolist()
    assert x.to("cuda", mf.float32).cpu().dtype == mf.float32


@needs_gpu
def test_gpu_properties_and_seeds():
    p = mf.cuda.get_device_properties(0)
    assert p.name == mf.cuda.get_device_name() and p.total_memory > 0
    assert mf.cuda.get_device_capability() == (p.major, p.minor) and p.major >= 3
    free, total = mf.cuda.mem_get_info()
    assert 0 < free <= total == p.total_memory
    mf.cuda.manual_seed_all(123)
    assert mf.cuda.initial_seed() == 123


@needs_gpu
def test_gpu_memory_statistics_and_cache():
    mf.cuda.synchronize()
    before = mf.cuda.memory_allocated()
    t = mf.ones(1 << 20).cuda()
    assert mf.cuda.memory_allocated() >= before + 4 * (1 << 20)
    assert mf.cuda.max_memory_allocated() >= mf.cuda.memory_allocated()
    del t
    assert mf.cuda.memory_allocated() == before
    assert mf.cuda.memory_reserved() >= 4 * (1 << 20)
    mf.cuda.empty_cache()
    assert mf.cuda.memory_reserved() == mf.cuda.memory_allocated()


@needs_gpu
def test_gpu_pinned_non_blocking_copies_and_streams():
    host = mf.arange(1 << 16, dtype=mf.float32).pin_memory()
    assert host.is_pinned() and host.pin_memory() is host
    s = mf.cuda.Stream()
    start, end = mf.cuda.Event(enable_timing=True), mf.cuda.Event(enable_timing=True)
    with mf.cuda.stream(s):
        assert mf.cuda.current_stream() == s
        start.record()
        dev = host.to("cuda", non_blocking=True)
        end.record()
    assert mf.cuda.current_stream() == mf.cuda.default_stream()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0
    mf.cuda.current_stream().wait_stream(s)
    assert dev.cpu().tolist() == host.tolist()


@needs_gpu
def test_gpu_module_moves_and_errors():
    m = mf.nn.Linear(3, 2)
    w = m.weight
    assert m.cuda() is m and m.weight is w and w.is_cuda and m.bias.is_cuda
    m.cpu()
    assert not w.is_cuda
    x = mf.ones(3)
    with pytest.raises(RuntimeError, match="cpu.*cuda:0|cuda:0.*cpu"):
        x + x.cuda()
    with pytest.raises(RuntimeError, match=f"cuda:{mf.cuda.device_count()} does not exist"):
        x.to(f"cuda:{mf.cuda.device_count()}")
    missing = mf.ops.coverage()["cuda"]
    if "exp" in missing:
        with pytest.raises(RuntimeError, match="exp: no kernel for device cuda:0"):
            x.cuda().exp()
