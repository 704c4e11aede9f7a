"""meshflow.save/load with file-like objects, map_location, weights_only and
torch.load's other arguments, checked against torch.save/torch.load."""
import collections
import io
import json
import os
import pickle
import struct

import numpy as np
import pytest
import torch

import meshflow as mf


def to_mf(t):
    return mf.tensor(t.detach().numpy())


def same(ours, theirs):
    """A meshflow tensor equal to a torch tensor in dtype name, shape and values."""
    return str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1] and \
        tuple(ours.shape) == tuple(theirs.shape) and ours.tolist() == theirs.tolist()


def torch_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    return model.state_dict()


def test_a_state_dict_round_trips_through_bytesio_as_in_torch():
    theirs = torch_state()
    ours = collections.OrderedDict((k, to_mf(v)) for k, v in theirs.items())
    buf = io.BytesIO()
    mf.save(ours, buf)
    buf.seek(0)
    loaded = mf.load(buf)
    tbuf = io.BytesIO()
    torch.save(theirs, tbuf)
    tbuf.seek(0)
    reference = torch.load(tbuf)
    assert set(loaded) == set(reference)
    for key, value in reference.items():
        assert same(loaded[key], value), key
    # load_state_dict takes what came back
    model = mf.nn.Linear(4, 3)
    model.load_state_dict({"weight": loaded["0.weight"], "bias": loaded["0.bias"]})
    assert same(model.weight.detach(), reference["0.weight"])


def test_stream_and_path_saves_write_the_same_bytes(tmp_path):
    state = {"w": mf.arange(12, dtype=mf.float32).reshape(3, 4), "step": 5, "lr": 0.5, "name": "x",
             "flags": [True, None, (1, 2)], "half": mf.ones(2, dtype=mf.float16)}
    mf.save(state, tmp_path / "a.safetensors")
    buf = io.BytesIO()
    mf.save(state, buf)
    assert buf.getvalue() == (tmp_path / "a.safetensors").read_bytes()
    with open(tmp_path / "b.safetensors", "wb") as handle:
        mf.save(state, handle)
    assert (tmp_path / "b.safetensors").read_bytes() == buf.getvalue()
    with open(tmp_path / "b.safetensors", "rb") as handle:
        loaded = mf.load(handle)
    assert loaded["w"].tolist() == state["w"].tolist() and loaded["half"].dtype == mf.float16
    assert loaded["flags"] == [True, None, [1, 2]] and loaded["step"] == 5 and loaded["name"] == "x"
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors", "b.safetensors"]


def test_streams_are_read_and_written_at_their_position():
    buf = io.BytesIO()
    buf.write(b"prefix")
    mf.save({"x": mf.ones(3)}, buf)
    assert buf.getvalue().startswith(b"prefix")
    buf.seek(len(b"prefix"))
    assert mf.load(buf)["x"].tolist() == [1.0, 1.0, 1.0]
    buf.seek(0)
    with pytest.raises(mf.errors.Error, match="<BytesIO>"):
        mf.load(buf)  # the prefix is not part of a checkpoint


def test_paths_stay_atomic_and_pathlike(tmp_path):
    path = tmp_path / "ckpt"
    mf.save({"x": mf.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="can't store an object of type object"):
        mf.save({"x": mf.zeros(2), "bad": object()}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["ckpt"]
    assert mf.load(path)["x"].tolist() == mf.load(str(path))["x"].tolist() == [1.0, 1.0]
    buf = io.BytesIO(b"old")
    with pytest.raises(TypeError, match="can't store"):
        mf.save({"bad": object()}, buf)
    assert buf.getvalue() == b"old"  # nothing written to the stream either


def test_loading_a_safetensors_file_written_without_torch_or_meshflow():
    """A file laid out by hand as the safetensors README describes loads as
    {name: tensor}, through a stream as through a path."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([-1, 7], dtype=np.int64)
    header = {"b": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
              "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]},
              "__metadata__": {"format": "pt"}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    raw = struct.pack("<Q", len(text)) + text + b.tobytes() + a.tobytes()
    loaded = mf.load(io.BytesIO(raw))
    assert same(loaded["a"], torch.from_numpy(a)) and same(loaded["b"], torch.from_numpy(b))
    assert set(loaded) == {"a", "b"}


@pytest.mark.parametrize("map_location", [None, "cpu", mf.device("cpu"), {"cuda:0": "cpu"}, {"cpu": "cpu"},
                                          {"cpu": mf.device("cpu")}])
def test_map_location_to_the_cpu(map_location):
    reference = torch_state()
    buf = io.BytesIO()
    mf.save({k: to_mf(v) for k, v in reference.items()}, buf)
    buf.seek(0)
    loaded = mf.load(buf, map_location=map_location)
    tbuf = io.BytesIO()
    torch.save(reference, tbuf)
    tbuf.seek(0)
    torch_map = map_location if not isinstance(map_location, (mf.device, dict)) else \
        str(map_location) if isinstance(map_location, mf.device) else {k: str(v) for k, v in map_location.items()}
    theirs = torch.load(tbuf, map_location=torch_map)
    for key, value in theirs.items():
        assert same(loaded[key], value) and loaded[key].device == mf.device("cpu")
    buf.seek(0)
    assert set(mf.load(buf, map_location="cpu:0")) == set(theirs)  # which torch's restore does not know


def test_map_location_callable():
    buf = io.BytesIO()
    mf.save({"a": mf.ones(2), "nested": [{"b": mf.zeros(1)}], "n": 3}, buf)
    seen = []

    def keep(storage, location):
        seen.append(location)

    buf.seek(0)
    loaded = mf.load(buf, map_location=keep)
    assert seen == ["cpu", "cpu"] and loaded["a"].tolist() == [1.0, 1.0] and loaded["n"] == 3
    buf.seek(0)
    doubled = mf.load(buf, map_location=lambda storage, location: storage * 2)
    assert doubled["a"].tolist() == [2.0, 2.0] and doubled["nested"][0]["b"].tolist() == [0.0]
    buf.seek(0)
    with pytest.raises(TypeError, match="map_location returned str"):
        mf.load(buf, map_location=lambda storage, location: "cpu")


@pytest.mark.parametrize("map_location", ["cuda", "cuda:0", mf.device("cuda:1"), {"cpu": "cuda:0"}])
def test_map_location_to_an_unavailable_device(map_location):
    assert not torch.cuda.is_available()
    tbuf = io.BytesIO()
    torch.save({"x": torch.ones(1)}, tbuf)
    tbuf.seek(0)
    if not isinstance(map_location, (mf.device, dict)):
        with pytest.raises(RuntimeError):  # torch, on this CPU-only machine
            torch.load(tbuf, map_location=map_location)
    buf = io.BytesIO()
    mf.save({"x": mf.ones(1)}, buf)
    buf.seek(0)
    if mf.cuda.device_count() >= 2:  # the emulated device (tests/python/devices.py): the load lands there
        assert mf.load(buf, map_location=map_location)["x"].device.type == "cuda"
        return
    with pytest.raises(RuntimeError, match="device 'cuda(:[01])?'.*not available"):
        mf.load(buf, map_location=map_location)


def test_bad_map_locations():
    buf = io.BytesIO()
    mf.save({"x": mf.ones(1)}, buf)
    tbuf = io.BytesIO()
    torch.save({"x": torch.ones(1)}, tbuf)
    tbuf.seek(0)
    with pytest.raises(TypeError):
        torch.load(tbuf, map_location=5)
    with pytest.raises(TypeError, match="map_location must be"):
        mf.load(io.BytesIO(buf.getvalue()), map_location=5)
    with pytest.raises(ValueError, match="bogus"):
        mf.load(io.BytesIO(buf.getvalue()), map_location="bogus")


class Payload:
    """Unpickling it would run code: it records that it ran."""

    ran = []

    def __reduce__(self):
        return (Payload.ran.append, ("unpickled",))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_weights_only_refuses_a_pickled_class_without_running_it(protocol, tmp_path):
    data = pickle.dumps({"weight": torch.ones(2).numpy(), "evil": Payload()}, protocol=protocol)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(io.BytesIO(data), weights_only=True)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed.*never unpickles"):
        mf.load(io.BytesIO(data), weights_only=True)
    (tmp_path / "evil.pt").write_bytes(data)
    with pytest.raises(pickle.UnpicklingError, match="evil.pt"):
        mf.load(tmp_path / "evil.pt", weights_only=True)
    # Without weights_only meshflow still does not unpickle (torch would run it).
    with pytest.raises(mf.errors.Error, match="is a pickle.*never unpickles"):
        mf.load(io.BytesIO(data))
    assert Payload.ran == []


def test_weights_only_refuses_a_torch_archive_and_loads_meshflow_checkpoints():
    tbuf = io.BytesIO()
    torch.save({"x": torch.ones(2)}, tbuf)
    with pytest.raises(pickle.UnpicklingError, match="torch.save archive"):
        mf.load(io.BytesIO(tbuf.getvalue()), weights_only=True)
    with pytest.raises(mf.errors.Error, match="torch.save archive"):
        mf.load(io.BytesIO(tbuf.getvalue()))
    state = {"t": mf.ones(2), "list": [1, 2.5, "s", None, False], "nested": {"d": (mf.zeros(1),)}}
    buf = io.BytesIO()
    mf.save(state, buf)
    buf.seek(0)
    loaded = mf.load(buf, weights_only=True)
    assert loaded["list"] == [1, 2.5, "s", None, False] and loaded["nested"]["d"][0].tolist() == [0.0]


def test_torch_load_arguments():
    buf = io.BytesIO()
    mf.save({"x": mf.ones(1)}, buf)
    data = buf.getvalue()
    # pickle_module and the Unpickler arguments are accepted (nothing is unpickled)
    assert mf.load(io.BytesIO(data), None, pickle, encoding="latin1")["x"].tolist() == [1.0]
    tbuf = io.BytesIO()
    torch.save({"x": torch.ones(1)}, tbuf)
    for module in (pickle,):
        tbuf.seek(0)
        with pytest.raises(RuntimeError, match="Can not safely load weights when"):
            torch.load(tbuf, pickle_module=module, weights_only=True)
        with pytest.raises(RuntimeError, match="Can not safely load weights when explicit pickle_module"):
            mf.load(io.BytesIO(data), pickle_module=module, weights_only=True)
    tbuf.seek(0)
    with pytest.raises(TypeError):
        torch.load(tbuf, no_such_argument=1)
    with pytest.raises(TypeError, match="no_such_argument"):
        mf.load(io.BytesIO(data), no_such_argument=1)
    assert mf.load(io.BytesIO(data), verify=False)["x"].tolist() == [1.0]


def test_truncated_and_corrupt_streams_raise_clear_errors():
    buf = io.BytesIO()
    mf.save({"w": mf.arange(64, dtype=mf.float32), "step": 1}, buf)
    data = buf.getvalue()
    for cut in (0, 1, 7, 8, 20, len(data) // 2, len(data) - 1):
        with pytest.raises(mf.errors.Error, match="<BytesIO>") as error:
            mf.load(io.BytesIO(data[:cut]))
        assert "meshflow-load-" not in str(error.value)  # names the stream, not a temporary copy
    corrupt = bytearray(data)
    corrupt[-3] ^= 0xFF  # a byte of the tensor's data
    with pytest.raises(mf.errors.Error, match='tensor "w" fails its checksum'):
        mf.load(io.BytesIO(bytes(corrupt)))
    assert mf.load(io.BytesIO(bytes(corrupt)), verify=False)["step"] == 1
    with pytest.raises(mf.errors.Error, match="not a valid safetensors file"):
        mf.load(io.BytesIO(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      "))


def test_a_truncated_file_handle_is_named_in_the_error(tmp_path):
    buf = io.BytesIO()
    mf.save({"w": mf.ones(8)}, buf)
    path = tmp_path / "short.safetensors"
    path.write_bytes(buf.getvalue()[:-4])
    with open(path, "rb") as handle, pytest.raises(mf.errors.Error, match="short.safetensors"):
        mf.load(handle)


def test_streams_of_the_wrong_kind(tmp_path):
    with pytest.raises(TypeError, match="text stream"):
        mf.save({"x": mf.ones(1)}, io.StringIO())
    with pytest.raises(TypeError, match="text stream"):
        mf.load(io.StringIO("abc"))
    with open(tmp_path / "t.txt", "w") as handle, pytest.raises(TypeError, match="binary mode"):
        mf.save({"x": mf.ones(1)}, handle)
    with pytest.raises(TypeError, match="file-like object with read"):
        mf.load(12.5)
    with pytest.raises(TypeError, match="file-like object with write"):
        mf.save({"x": mf.ones(1)}, object())


def test_global_checkpoints_need_a_path(tmp_path):
    t = mf.ones(2, placement=mf.placement("cpu", [0]), sbp=mf.sbp.broadcast)
    with pytest.raises(ValueError, match="needs a path"):
        mf.save({"t": t}, io.BytesIO())
    mf.save({"t": t}, tmp_path / "g")
    assert mf.load(tmp_path / "g")["t"].tolist() == [1.0, 1.0]
    with open(tmp_path / "g", "rb") as handle, pytest.raises(mf.errors.Error, match="load it by its path"):
        mf.load(handle)
