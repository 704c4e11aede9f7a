"""Bad input never crashes: sizes that overflow, allocation failure, attributes
out of range, corrupt checkpoints and pickles, and the Python protocols users
reach for. Each case here was a crash, a hang or a silent wrong result once
(docs/reliability.md); the fuzzer (tests/fuzz) finds new ones."""
import copy
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

import meshflow as mf
import meshflow.nn.functional as F
from meshflow import nn

HUGE = 2 ** 62
MAX = 2 ** 63 - 1
BAD = (RuntimeError, ValueError, IndexError, TypeError)


# --- sizes --------------------------------------------------------------------------------------

FACTORY_OVERFLOWS = [
    lambda: mf.zeros(HUGE), lambda: mf.zeros(2, MAX), lambda: mf.ones(HUGE, 1), lambda: mf.rand(1, HUGE),
    lambda: mf.randn(MAX, 2), lambda: mf.full((5, 1, HUGE), 0), lambda: mf.arange(HUGE),
    lambda: mf.linspace(0., 1., MAX), lambda: mf.randperm(MAX), lambda: mf.randint(0, 4, [MAX, 2]),
    lambda: mf.ones(2).new_zeros([HUGE]), lambda: mf.ones(2).new_full([2, MAX], 5), lambda: mf.eye(2 ** 31),
    lambda: mf.eye(4, m=MAX), lambda: mf.empty(HUGE), lambda: mf.empty(2 ** 31, 2 ** 31, 2 ** 31),
]


@pytest.mark.parametrize("make", FACTORY_OVERFLOWS, ids=range(len(FACTORY_OVERFLOWS)))
def test_factories_refuse_sizes_that_overflow(make):
    with pytest.raises((mf.errors.ShapeError, mf.OutOfMemoryError, ValueError)):
        make()


def test_an_allocation_the_machine_cannot_serve_is_out_of_memory():
    with pytest.raises(mf.OutOfMemoryError, match="out of memory. Tried to allocate") as info:
        mf.empty(2 ** 50, dtype=mf.uint8)  # 1 PiB: in range of int64, beyond any machine
    assert isinstance(info.value, RuntimeError)
    assert mf.ones(3).sum().item() == 3  # and the process carries on


@pytest.mark.parametrize("call", [
    lambda x: x.repeat([3, 2, MAX, 2]), lambda x: x.repeat_interleave(MAX, dim=0),
    lambda x: F.adaptive_avg_pool2d(mf.ones(1, 1, 2, 2), (HUGE, 1)), lambda x: F.pad(mf.ones(1, 4), [2, HUGE]),
    lambda x: F.pad(mf.ones(1, 4), [-9, 0]), lambda x: F.one_hot(mf.tensor([9, 17]), num_classes=HUGE),
    lambda x: mf.zeros(4).as_strided([3], [HUGE + 1000]), lambda x: mf.zeros(4).as_strided([3], [2]),
    lambda x: mf.zeros(4).as_strided([2], [1], 3), lambda x: mf.tensor(1.0).unflatten(0, [1]),
    lambda x: mf.zeros(12).unflatten(0, [2, 2, 4]), lambda x: mf.zeros(0, 3).chunk(2 ** 31 - 1),
    lambda x: F.max_pool2d(mf.ones(1, 1, 4, 4), HUGE), lambda x: F.avg_pool2d(mf.ones(1, 1, 4, 4), 2, 1, HUGE),
    lambda x: mf.ones(2, 3).view(HUGE, -1), lambda x: mf.ones(2, 3).reshape(MAX, 0),
    lambda x: mf.ones(2, 3).expand(MAX, 2, 3).contiguous(), lambda x: mf.cat([mf.ones(2).expand(HUGE)] * 4),
], ids=range(18))
def test_ops_refuse_attributes_out_of_range(call):
    with pytest.raises(BAD):
        r = call(mf.ones(2, 3))
        r.tolist() if r.numel() < 100 else r.clone()


def test_an_out_of_bounds_view_never_reads_or_writes_past_its_storage():
    x = mf.zeros(4)
    with pytest.raises(RuntimeError, match="as_strided"):
        x.as_strided([3], [2 ** 62 + 1000]).fill_(7.0)
    assert x.tolist() == [0.0] * 4
    assert mf.zeros(4).as_strided([2], [2], 1).tolist() == [0.0, 0.0]  # in bounds: fine


@pytest.mark.parametrize("call", [
    lambda x, w: F.conv2d(x, w, None, stride=1, padding="same", dilation=[], groups=1),
    lambda x, w: F.conv2d(x, w, padding=2 ** 31), lambda x, w: F.conv2d(x, w, stride=0),
    lambda x, w: F.conv2d(x, w, dilation=-1), lambda x, w: F.conv2d(x, w, padding=[1, 2, 3]),
    lambda x, w: F.conv2d(x, w, groups=0), lambda x, w: F.conv2d(x, w, dilation=MAX),
], ids=range(7))
def test_conv2d_validates_its_integer_attributes(call):
    with pytest.raises(BAD):
        call(mf.ones(1, 2, 5, 5), mf.ones(3, 2, 3, 3))


def test_modules_refuse_sizes_that_overflow():
    for make in (lambda: nn.LayerNorm(HUGE), lambda: nn.Conv2d(MAX, 2 ** 31 - 1, 3), lambda: nn.Linear(HUGE, HUGE),
                 lambda: nn.Embedding(HUGE, 8)):
        with pytest.raises((mf.errors.ShapeError, mf.OutOfMemoryError, ValueError)):
            make()


def test_checked_sizes_keep_valid_extremes_working():
    assert mf.zeros(0, 2 ** 40).shape == (0, 2 ** 40)  # no elements, however long the other dim
    assert mf.ones(1).expand(2 ** 40).shape == (2 ** 40,)  # views need no memory
    assert mf.zeros(3, 0).chunk(5, dim=1)[0].shape == (3, 0)


# --- the Python surface ---------------------------------------------------------------------------

def test_data_setter_replaces_the_data_and_keeps_the_tensor():
    p = nn.Parameter(mf.ones(2, 3))
    opt = mf.optim.SGD([p], lr=1.0)
    p.data = mf.zeros(4)
    assert p.shape == (4,) and p.tolist() == [0.0] * 4 and p.requires_grad
    p.sum().backward()
    opt.step()  # the optimizer's reference is the same tensor
    assert p.tolist() == [-1.0] * 4
    p.data = mf.zeros(2, dtype=mf.float64)
    assert p.dtype == mf.float64
    with pytest.raises(TypeError):
        p.data = 3


def test_round_format_and_index_follow_pytorch():
    t = mf.tensor([1.25, 2.5, -0.5, 3.675])
    assert round(t).tolist() == torch.round(torch.tensor([1.25, 2.5, -0.5, 3.675])).tolist()
    assert np.allclose(round(t, 1).tolist(), torch.round(torch.tensor([1.25, 2.5, -0.5, 3.675]), decimals=1).tolist())
    assert format(mf.tensor(2.0 / 3), ".3f") == "0.667"
    assert f"{mf.tensor(7):>4}" == "   7"
    with pytest.raises(TypeError):
        format(mf.ones(2), ".3f")  # as torch: only 0-d tensors take a format spec
    assert [10, 20, 30][mf.tensor(1)] == 20
    with pytest.raises(TypeError):
        [1, 2][mf.tensor(1.0)]


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
def test_bitwise_shifts_match_pytorch(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 100, size=(3, 4)).astype(dtype)
    b = rng.integers(0, 10, size=(3, 4)).astype(dtype)
    ma, mb, ta, tb = mf.tensor(a), mf.tensor(b), torch.tensor(a), torch.tensor(b)
    assert (ma << mb).tolist() == (ta << tb).tolist()
    assert (ma >> mb).tolist() == (ta >> tb).tolist()
    assert (ma << 2).tolist() == (ta << 2).tolist() and (ma >> 1).tolist() == (ta >> 1).tolist()
    assert mf.bitwise_left_shift(ma, mb).tolist() == torch.bitwise_left_shift(ta, tb).tolist()
    assert ma.bitwise_right_shift(mb).tolist() == ta.bitwise_right_shift(tb).tolist()
    c = ma.clone()
    c <<= 1
    assert c.tolist() == (ta << 1).tolist()
    with pytest.raises(TypeError):
        mf.ones(2) << 1


def test_shifts_by_amounts_outside_the_bit_width_are_defined():
    a = mf.tensor([-8, 8, 1], dtype=mf.int32)
    assert (a << 40).tolist() == [0, 0, 0]
    assert (a >> 40).tolist() == [-1, 0, 0]
    assert (a >> mf.tensor([-1, -1, -1], dtype=mf.int32)).tolist() == [-1, 0, 0]


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64", "float16", "bfloat16", "float32", "float64"])
def test_pickle_round_trips_tensors(dtype):
    t = (mf.arange(12).reshape(3, 4) % 3).to(getattr(mf, dtype))
    for x in (t, t.T, t[:, 1:3], t[0, 0], t[:0]):
        y = pickle.loads(pickle.dumps(x))
        assert y.dtype == x.dtype and y.shape == x.shape and y.double().tolist() == x.double().tolist()
    w = mf.randn(2, 2, requires_grad=True)
    assert pickle.loads(pickle.dumps(w)).requires_grad
    assert pickle.loads(pickle.dumps({"a": [t, mf.float32]}))["a"][1] == mf.float32
    assert copy.deepcopy(t).tolist() == t.tolist()


def test_unpickling_checks_the_bytes_against_the_shape():
    data = pickle.dumps(mf.arange(4, dtype=mf.float32))
    tampered = data.replace(b"float32", b"float64")  # 16 bytes do not make four float64s
    with pytest.raises(ValueError, match="needs 32 bytes"):
        pickle.loads(tampered)
    with pytest.raises(BAD):
        mf._C._rebuild_tensor(b"", "float32", (HUGE,), False)
    with pytest.raises(ValueError, match="not 0 or 1"):
        mf._C._rebuild_tensor(b"\x02", "bool", (1,), False)


def test_error_texts_name_public_functions():
    with pytest.raises(TypeError) as info:
        mf.ones(2).new_ones()
    assert "<locals>" not in str(info.value) and "new_ones" in str(info.value)
    with pytest.raises(TypeError, match=r"norm\(\): argument 'p' must be a number"):
        mf.norm(mf.ones(2), mf.ones(2))


def test_set_num_threads_validates_and_survives_large_counts():
    before = mf.get_num_threads()
    with pytest.raises(ValueError):
        mf.set_num_threads(0)
    with pytest.raises(ValueError):
        mf.set_num_threads(2 ** 20)
    assert mf.get_num_threads() == before  # a refused count changes nothing
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return  # AddressSanitizer's shadow memory does not fit under an address-space limit
    script = ("import resource, meshflow as mf\n"
              "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
              "mf.set_num_threads(64)\n"
              "a = mf.randn(256, 256)\n"
              "print(float((a @ a).sum().isfinite()))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1.0"
    mf.set_num_threads(before)


@pytest.mark.parametrize("first", ["meshflow", "torch"])
def test_meshflow_and_torch_share_one_openblas_in_either_import_order(first):
    """Note [One OpenBLAS] in CMakeLists.txt: importing meshflow before
    PyTorch once gave PyTorch mismatched OpenBLAS variants, which deadlocked
    in its first threaded GEMM."""
    second = "torch" if first == "meshflow" else "meshflow"
    script = (f"import {first}, {second}, torch, meshflow as mf\n"
              "torch.set_num_threads(2)\n"
              "mf.set_num_threads(2)\n"
              "a, w = torch.randn(64, 256), torch.randn(512, 256)\n"
              "for _ in range(3):\n"
              "    torch.nn.functional.linear(a, w)\n"
              "x = mf.randn(64, 256)\n"
              "print(float((x @ x.t()).sum().isfinite()), flush=True)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1.0"


# --- checkpoints --------------------------------------------------------------------------------

def _state():
    return {"w": mf.arange(64, dtype=mf.float32).reshape(8, 8), "b": mf.ones(8, dtype=mf.float64), "step": 3}


def _header_end(data):
    return 8 + int.from_bytes(data[:8], "little")


def test_a_flipped_data_byte_is_caught_by_the_checksum(tmp_path):
    path = tmp_path / "c.safetensors"
    mf.save(_state(), path)
    data = bytearray(path.read_bytes())
    data[_header_end(data) + 5] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"tensor \"\w\" fails its checksum"):
        mf.load(path)
    loaded = mf.load(path, verify=False)  # the user may still read it
    assert loaded["step"] == 3
    with pytest.raises(RuntimeError, match="checksum"):
        mf.io.load_file(path)
    mf.io.load_file(path, verify=False)


def test_checkpoints_stay_standard_safetensors(tmp_path):
    path = tmp_path / "c.safetensors"
    mf.io.save_file({"x": mf.ones(3)}, path, {"format": "pt"})
    data = path.read_bytes()
    header = json.loads(data[8:_header_end(data)])
    assert set(header) == {"__metadata__", "x"}
    assert header["__metadata__"]["format"] == "pt" and "meshflow.crc32c" in header["__metadata__"]
    assert mf.io.load_file_with_metadata(path)[1] == {"format": "pt"}


@pytest.mark.parametrize("edit", ["key", "metadata"])
def test_renamed_keys_and_edited_metadata_are_caught(tmp_path, edit):
    path = tmp_path / "c.safetensors"
    mf.save(_state(), path)
    data = path.read_bytes()
    end = _header_end(data)
    header = data[8:end]
    if edit == "key":
        header = header.replace(b'"w":{', b'"v":{', 1)
    else:
        header = header.replace(b'\\"step\\":3', b'\\"step\\":4', 1)
    assert header != data[8:end]
    path.write_bytes(data[:8] + header + data[end:])
    with pytest.raises(RuntimeError, match="checksum|renamed"):
        mf.load(path)


def test_every_truncation_and_byte_flip_raises_a_clear_error(tmp_path):
    path = tmp_path / "c.safetensors"
    mf.save(_state(), path)
    good = path.read_bytes()
    cases = [good[:n] for n in (0, 4, 8, 9, 20, _header_end(good) - 1, _header_end(good), len(good) - 1)]
    cases += [bytes(b ^ (1 << bit) if i == pos else b for i, b in enumerate(good))
              for pos in range(0, len(good), 7) for bit in (0, 5)]
    for k, data in enumerate(cases):
        path.write_bytes(data)
        try:
            mf.load(path)
        except RuntimeError as e:  # meshflow.errors.Error and its subclasses
            assert "c.safetensors" in str(e), (k, str(e))
        else:
            # A flip may land in the padding or in JSON whitespace: the values must then be intact.
            loaded = mf.load(path)
            assert loaded["w"].tolist() == _state()["w"].tolist(), k


def test_huge_sizes_and_overlapping_offsets_in_a_header_are_refused(tmp_path):
    path = tmp_path / "c.safetensors"
    for entry in ({"dtype": "F32", "shape": [2 ** 62], "data_offsets": [0, 16]},
                  {"dtype": "F32", "shape": [2 ** 31, 2 ** 31, 2 ** 31], "data_offsets": [0, 16]},
                  {"dtype": "F32", "shape": [4], "data_offsets": [0, 2 ** 63]}):
        header = json.dumps({"x": entry}).encode()
        path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
        with pytest.raises(RuntimeError, match="not a valid safetensors file"):
            mf.io.load_file(path)
    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(12))
    with pytest.raises(RuntimeError, match="overlap"):
        mf.io.load_file(path)


def _global_checkpoint(path, index, tree=None, shard=None):
    if shard is not None:
        mf.io.save_file({"w": shard}, f"{path}.shard0")
    text = index if isinstance(index, str) else json.dumps(index)
    mf.save({"__meshflow_global_checkpoint__": {"index": text, "tree": tree or {"w": {"__global__": "w"}}}}, path)


GLOBAL_INDEXES = {
    "huge shape": {"w": {"shape": [2 ** 62], "dtype": "float32", "shards": [[0, [0], [2 ** 62]]]}},
    "huge shape, small shard": {"w": {"shape": [2 ** 62], "dtype": "float32", "shards": [[0, [0], [1024]]]}},
    "offset out of range": {"w": {"shape": [4], "dtype": "float32", "shards": [[0, [2 ** 40], [4]]]}},
    "no shards": {"w": {"shape": [4], "dtype": "float32", "shards": []}},
    "overlap": {"w": {"shape": [4], "dtype": "float32", "shards": [[0, [0], [4]], [0, [0], [4]]]}},
    "gap": {"w": {"shape": [4], "dtype": "float32", "shards": [[0, [0], [2]]]}},
    "bad dtype": {"w": {"shape": [4], "dtype": "complex", "shards": [[0, [0], [4]]]}},
    "rank as a path": {"w": {"shape": [4], "dtype": "float32", "shards": [["../x", [0], [4]]]}},
    "negative size": {"w": {"shape": [-4], "dtype": "float32", "shards": [[0, [0], [4]]]}},
    "missing field": {"w": {"shape": [4], "dtype": "float32"}},
    "not an object": [1, 2],
    "not JSON": "{",
    "shard shape differs": {"w": {"shape": [8], "dtype": "float32", "shards": [[0, [0], [8]]]}},
}


@pytest.mark.parametrize("name", list(GLOBAL_INDEXES))
def test_a_crafted_global_checkpoint_index_is_refused_before_allocation(tmp_path, name):
    path = str(tmp_path / "g.safetensors")
    _global_checkpoint(path, GLOBAL_INDEXES[name], shard=mf.arange(4, dtype=mf.float32))
    with pytest.raises(mf.errors.Error, match="not a valid global checkpoint"):
        mf.load(path)


def test_a_global_checkpoint_tree_naming_a_missing_tensor_is_refused(tmp_path):
    path = str(tmp_path / "g.safetensors")
    index = {"w": {"shape": [4], "dtype": "float32", "shards": [[0, [0], [4]]]}}
    _global_checkpoint(path, index, tree={"w": {"__global__": "v"}}, shard=mf.arange(4, dtype=mf.float32))
    with pytest.raises(mf.errors.Error, match="lacks"):
        mf.load(path)
    _global_checkpoint(path, index, shard=mf.arange(4, dtype=mf.float32))
    assert mf.load(path)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]  # the well-formed one loads


def test_an_interrupted_save_leaves_no_temporary_file_behind(tmp_path):
    path = tmp_path / "c.safetensors"
    script = ("import os, meshflow as mf\n"
              f"mf.save({{'x': mf.ones(4)}}, {str(path)!r})\n"
              "os.kill(os.getpid(), 9)\n")
    # A stale temporary file as a save killed half-way leaves it: a pid that no longer runs.
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    stale = tmp_path / f".c.safetensors.tmp.{dead}.0"
    stale.write_bytes(b"partial")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", script], env=env)
    assert path.exists() and not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors"]
    assert mf.load(path)["x"].tolist() == [1.0] * 4


# --- found by the fuzzer ----------------------------------------------------------------------------

def test_work_over_expanded_dims_is_bounded():
    """Reductions, nonzero and scatter over stride-0 (expanded) dims of 2**62
    elements answer at once (Note [Broadcast reduced dims], [Expanded counts])."""
    z = mf.zeros(()).expand(2 ** 62)
    assert z.sum().item() == 0 and mf.logsumexp(mf.zeros(()).expand(2 ** 31), 0).item() == pytest.approx(
        31 * np.log(2))
    assert mf.ones(3, 1).expand(3, 2 ** 40).sum(1).tolist() == [2.0 ** 40] * 3
    assert mf.ones(3, 1).expand(3, 2 ** 40).argmax(1).tolist() == [0, 0, 0]
    assert mf.std(mf.ones(()).expand(2 ** 62), -1).item() == 0
    assert mf.nonzero(mf.zeros((), dtype=mf.bfloat16).expand(2 ** 31, 2)).shape == (0, 2)
    assert mf.nonzero(mf.zeros(()).expand(2 ** 63 - 1), as_tuple=True)[0].shape == (0,)
    with pytest.raises((mf.errors.ShapeError, mf.OutOfMemoryError)):
        mf.nonzero(mf.ones(()).expand(2 ** 62))
    assert mf.zeros(4, dtype=mf.int32).scatter(0, mf.tensor([2]).expand(2 ** 40), 7).tolist() == [0, 0, 7, 0]
    t = torch.zeros(4).scatter_add(0, torch.tensor([1]).expand(2 ** 21), torch.ones(1).expand(2 ** 21))
    m = mf.zeros(4).scatter_add(0, mf.tensor([1]).expand(2 ** 21), mf.ones(1).expand(2 ** 21))
    assert m.tolist() == t.tolist()


def test_in_place_writes_into_expanded_tensors_are_refused_as_in_pytorch():
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        mf.relu_(mf.zeros((), dtype=mf.int8).expand(2 ** 62))
    with pytest.raises(RuntimeError, match="more than one element"):
        mf.zeros(1).expand(3).add_(1)
    mf.zeros(0, 1).expand(0, 3).add_(1)  # nothing to write: fine, as in PyTorch


def test_global_ops_on_zero_size_and_zero_dim_tensors():
    p = mf.placement("cpu", [0])
    a = mf.randint(-5, 6, ()).to_global(placement=p, sbp=mf.sbp.partial_sum)
    assert a.all(0, True).to_local() is not None
    x = mf.randn(1, 1, 1, 3).expand(5, 3, 3, 3).to_global(placement=p, sbp=mf.sbp.partial_sum)
    assert mf.repeat(x, (0, 2, 0, 3)).shape == (0, 6, 0, 9)


def test_data_loader_validates_its_counts_and_indices():
    ds = mf.utils.data.TensorDataset(mf.arange(8.0))
    with pytest.raises(ValueError, match="num_workers"):
        mf.utils.data.DataLoader(ds, num_workers=2 ** 62)
    with pytest.raises(TypeError, match="sample indices must be integers"):
        list(mf.utils.data.DataLoader(mf.utils.data.Subset(ds, [float("inf")]), batch_size=2))


def test_splits_into_more_views_than_memory_can_hold_are_refused():
    with pytest.raises(mf.OutOfMemoryError, match="view metadata would be needed"):
        mf.split(mf.zeros((), dtype=mf.int8).expand(2 ** 63 - 1), 1, 0)
    with pytest.raises(mf.OutOfMemoryError, match="view metadata would be needed"):
        mf.unbind(mf.zeros(()).expand(2 ** 31 - 1))
    with pytest.raises(mf.OutOfMemoryError):
        mf.zeros(0, 3).chunk(2 ** 31 - 1)
    assert len(mf.zeros(0, 3).chunk(5)) == 5 and len(mf.zeros(1000).split(3)) == 334


def test_reductions_of_empty_tensors_with_many_dims():
    """Size-0 dims do not merge: 40 of them once overflowed the reduction's
    fixed dim arrays."""
    for n in (13, 40, 100):
        assert mf.empty([0] * n).sum().item() == 0
        assert mf.empty([2] + [0] * n).sum(dim=0).shape == (0,) * n
        assert mf.empty([0] * n + [3]).amax(dim=-1).shape == (0,) * n


# --- found by the sanitizer run ---------------------------------------------------------------------

def test_max_pool_window_of_padding_only_matches_pytorch():
    """A dilated window that covers only padding read (and its gradient
    wrote) past the input plane: heap-buffer-overflow under ASan."""
    a = np.random.default_rng(0).random((1, 2, 1, 5)).astype(np.float32)
    tv, ti = torch.nn.functional.max_pool2d_with_indices(torch.tensor(a), [2, 3], (3, 3), 1, (2, 2))
    x = mf.tensor(a, requires_grad=True)
    mv, mi = F.max_pool2d_with_indices(x, [2, 3], (3, 3), 1, (2, 2))
    assert mv.tolist() == tv.tolist() and mi.tolist() == ti.tolist()
    mv.sum().backward()  # the padding window has no input element to receive gradient
    assert x.grad.tolist() == np.zeros_like(a).tolist()


def test_integer_arithmetic_wraps_around_as_in_pytorch():
    """Note [Wrapping integers]: signed overflow in integer kernels is
    defined (-fwrapv) and wraps, as PyTorch's results do."""
    big = [2 ** 62, -2 ** 63, 2 ** 63 - 1]
    m, t = mf.tensor(big), torch.tensor(big)
    assert (m + m).tolist() == (t + t).tolist() and (m * 3).tolist() == (t * 3).tolist()
    assert m.sum().item() == t.sum().item()
    mi = mf.index_add(mf.tensor([-2 ** 63]), 0, mf.tensor([0, 0]), mf.tensor([-3, -5]), alpha=-1)
    ti = torch.index_add(torch.tensor([-2 ** 63]), 0, torch.tensor([0, 0]), torch.tensor([-3, -5]), alpha=-1)
    assert mi.tolist() == ti.tolist()


def test_onednn_kernels_near_the_memory_limit_raise_instead_of_crashing():
    """Note [oneDNN headroom]: oneDNN crashed building a bf16 matmul kernel
    when the address space ran out (found by the 2,000,000-call campaign)."""
    script = ("import resource, meshflow as mf\n"
              "a = mf.randn(3, 3, dtype=mf.bfloat16); a @ a\n"
              "size = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
              "resource.setrlimit(resource.RLIMIT_AS, (size + (4 << 20), size + (4 << 20)))\n"
              "errors = 0\n"
              "for n in range(2, 40):\n"
              "    try:\n"
              "        mf.mv(mf.randn(n, n + 1, dtype=mf.bfloat16), mf.randn(n + 1, dtype=mf.bfloat16)).sum().item()\n"
              "        mf.bmm(mf.randn(2, n, 3, dtype=mf.bfloat16), mf.randn(2, 3, n, dtype=mf.bfloat16)).sum().item()\n"
              "    except (mf.OutOfMemoryError, MemoryError):\n"
              "        errors += 1\n"
              "print('errors', errors)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.startswith("errors")


def test_scatter_with_a_src_of_fewer_dims_is_refused():
    """ASan: check_scatter_gather read src's sizes past its dims."""
    with pytest.raises(RuntimeError, match="same number of dimensions as the src"):
        mf.rand(2, 1, 3).scatter(1, mf.zeros(2, 1, 3, dtype=mf.int64), mf.ones(2))
    with pytest.raises(RuntimeError, match="same number of dimensions as the src"):
        mf.scatter(mf.zeros(2, 2), -1, mf.zeros(0, 2, dtype=mf.int64), mf.zeros(()).expand(2 ** 31))


def test_empty_bool_tensors_hold_valid_bools():
    """UBSan: reading an uninitialised byte as a C++ bool is undefined."""
    assert mf.empty(2, 5, dtype=mf.bool).tolist() == [[False] * 5] * 2
    assert mf.empty_like(mf.ones(3), dtype=mf.bool).tolist() == [False] * 3
