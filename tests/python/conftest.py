"""Lets `pytest tests/python` find the meshflow package without PYTHONPATH."""
import importlib.util
import os
import pathlib
import sys

_PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2] / "python"
# A meshflow on PYTHONPATH (tools/test.sh --sanitize runs another build) wins.
if importlib.util.find_spec("meshflow") is None and str(_PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(_PACKAGE_ROOT))


def pytest_configure(config):
    # Note [Emulated device]: MESHFLOW_EMULATE_CUDA=1 runs the tests' "cuda"
    # device on host memory, through the shared device kernels.
    if os.environ.get("MESHFLOW_EMULATE_CUDA") == "1":
        import meshflow
        meshflow._C._emulate_cuda(2)
    # PyTorch's own deprecation notices (x.T on non-matrices, ...) are not findings.
    config.addinivalue_line("filterwarnings", "ignore::UserWarning:torch")
    config.addinivalue_line("filterwarnings", "ignore::UserWarning:opinfo")
    # The deprecated F.upsample* warn on every call, as torch's do (test_resample.py checks they do).
    config.addinivalue_line("filterwarnings", "ignore:nn.functional.upsample:UserWarning")


def pytest_generate_tests(metafunc):
    """A test with a `device` argument that does not parametrize it itself
    runs on every device of devices.DEVICES."""
    if "device" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        if "device" in names:
            return
    from devices import DEVICES
    metafunc.parametrize("device", DEVICES)
