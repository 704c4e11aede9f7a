"""The devices the device-generic tests run on (docs/backends.md): the CPU,
and CUDA where a device is visible. A test takes a `device` argument to run
once per device (conftest.py parametrizes it); on a device other than the
CPU it compares against the same reference as on the CPU, with its inputs
and modules moved there and its results read back."""
import meshflow as mf

DEVICES = ["cpu"] + (["cuda"] if mf.cuda.is_available() else [])
