"""Checkpoints from Python: meshflow.save/load of state trees and
meshflow.io.save_file/load_file of safetensors files."""
import json
import math
import struct

import numpy as np
import pytest
import torch

import meshflow as mf

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def same(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and a.detach().double().tolist() == \
        b.detach().double().tolist()


def test_save_load_round_trips_a_state_tree(tmp_path):
    weight = mf.randn(3, 4, requires_grad=True)
    state = {"model": {"weight": weight, "bias": mf.zeros(3, dtype=mf.float64)},
             "optimizer": {"param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1]}],
                           "state": {"0": {"step": 7, "exp_avg": mf.ones(3, 4, dtype=mf.bfloat16)}}},
             "epoch": 3, "best": math.inf, "name": "run-1", "note": None, "done": False, "$odd key": [],
             "numpy": [np.int64(4), np.float32(0.5), np.bool_(True)]}
    path = tmp_path / "checkpoint.safetensors"
    mf.save(state, path)
    loaded = mf.load(str(path))
    assert same(loaded["model"]["weight"], weight) and same(loaded["model"]["bias"], state["model"]["bias"])
    group = loaded["optimizer"]["param_groups"][0]
    assert group == {"lr": 0.1, "betas": [0.9, 0.999], "params": [0, 1]}  # tuples load as lists
    inner = loaded["optimizer"]["state"]["0"]
    assert inner["step"] == 7 and isinstance(inner["step"], int)
    assert same(inner["exp_avg"], state["optimizer"]["state"]["0"]["exp_avg"])
    assert loaded["epoch"] == 3 and loaded["best"] == math.inf and loaded["name"] == "run-1"
    assert loaded["note"] is None and loaded["done"] is False and loaded["$odd key"] == []
    assert loaded["numpy"] == [4, 0.5, True]
    assert not loaded["model"]["weight"].requires_grad  # data only, as torch.load of a detached state dict


@pytest.mark.parametrize("dtype", DTYPES)
def test_save_file_round_trips_every_dtype_and_layout(tmp_path, dtype):
    base = (mf.arange(24).reshape(4, 6) % 5).to(getattr(mf, dtype))
    tensors = {"plain": base, "transposed": base.T, "strided": base[:, ::2], "scalar": base[1, 1],
               "empty": base[:0]}
    path = tmp_path / "t.safetensors"
    mf.io.save_file(tensors, path, {"format": "pt"})
    loaded, metadata = mf.io.load_file_with_metadata(path)
    assert metadata == {"format": "pt"} and set(loaded) == set(tensors)
    for name, t in tensors.items():
        assert same(loaded[name], t), name
        assert loaded[name].is_contiguous()
    assert set(mf.io.load_file(path)) == set(tensors)


def test_files_follow_the_safetensors_layout(tmp_path):
    """The header is JSON that other safetensors readers understand: the bytes are
    checked here against torch's reading of the same values."""
    path = tmp_path / "t.safetensors"
    mf.io.save_file({"x": mf.tensor([[1.5, -2.0], [3.0, 4.25]]), "i": mf.tensor([7, 8], dtype=mf.int16)}, path)
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    data = raw[8 + header_len:]
    assert header["x"]["dtype"] == "F32" and header["x"]["shape"] == [2, 2]
    begin, end = header["x"]["data_offsets"]
    x = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(2, 2)
    assert x.tolist() == [[1.5, -2.0], [3.0, 4.25]]
    begin, end = header["i"]["data_offsets"]
    assert torch.frombuffer(bytearray(data[begin:end]), dtype=torch.int16).tolist() == [7, 8]


def test_int_keys_load_as_text(tmp_path):
    mf.save({"state": {0: {"step": 2}, 11: {"step": 3}}}, tmp_path / "s")
    assert mf.load(tmp_path / "s") == {"state": {"0": {"step": 2}, "11": {"step": 3}}}


def test_a_plain_safetensors_file_loads_as_a_dict(tmp_path):
    path = tmp_path / "plain.safetensors"
    mf.io.save_file({"a.b": mf.ones(2)}, path)
    loaded = mf.load(path)
    assert list(loaded) == ["a.b"] and loaded["a.b"].tolist() == [1.0, 1.0]


def test_io_errors(tmp_path):
    with pytest.raises(TypeError, match="dict keys must be str or int"):
        mf.save({1.5: mf.ones(1)}, tmp_path / "a")
    with pytest.raises(TypeError, match="can't store an object of type object"):
        mf.save({"x": object()}, tmp_path / "a")
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested deeper"):
        mf.save(loop, tmp_path / "a")
    with pytest.raises(ValueError, match="does not fit in int64"):
        mf.save({"big": 2 ** 70}, tmp_path / "a")
    with pytest.raises(RuntimeError, match="missing.safetensors"):
        mf.load(tmp_path / "missing.safetensors")
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(RuntimeError, match="corrupt.safetensors"):
        mf.io.load_file(corrupt)
    with pytest.raises(ValueError):
        mf.io.save_file({"__metadata__": mf.ones(1)}, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_save_writes_device_tensors_from_the_host(tmp_path, device):
    """Tensors on a device are written from a host copy; they load on the CPU, and
    map_location (or load_state_dict) puts them back."""
    x = mf.arange(6.0, device=device).reshape(2, 3)
    mf.save({"x": x, "nested": [x * 2]}, tmp_path / "d.safetensors")
    got = mf.load(tmp_path / "d.safetensors")
    assert got["x"].device.type == "cpu"
    np.testing.assert_array_equal(got["x"].numpy(), np.arange(6.0).reshape(2, 3))
    placed = mf.load(tmp_path / "d.safetensors", map_location=device)
    assert placed["nested"][0].device.type == mf.device(device).type
    np.testing.assert_array_equal(placed["nested"][0].cpu().numpy(), 2 * np.arange(6.0).reshape(2, 3))
