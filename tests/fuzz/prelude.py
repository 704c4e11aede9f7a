"""The text every generated call runs after, in the child and in reproducers.

Kept apart from fuzz.py so the child (child.py) can read it without
importing the generators.
"""

PRELUDE = '''\
import collections, math, os, re, sys, tempfile
import numpy as np
import meshflow as mf
from meshflow import nn
import meshflow.nn.functional as F

TMP = os.environ.get("MESHFLOW_FUZZ_TMP") or tempfile.mkdtemp(prefix="mf_fuzz_")


def touch(r, depth=0):
    """Reads every element of a result through its strides, so that an
    out-of-bounds view or a bad kernel write shows up in this call."""
    if isinstance(r, mf.Tensor):
        if r.is_global:
            r = r.to_local()  # None on a rank outside the placement
            if r is None:
                return
        n = r.numel()
        if n <= 64:
            r.tolist()
            repr(r)
        elif n < 1_000_000:
            r.clone()
    elif isinstance(r, (tuple, list)) and depth < 3:
        for v in r[:64]:
            touch(v, depth + 1)
    elif isinstance(r, dict) and depth < 3:
        for v in list(r.values())[:64]:
            touch(v, depth + 1)


def user_error(*args):
    """A user callback that fails: its ValueError must come out unchanged."""
    raise ValueError("a user callback failed")


def _expect(cls, fn):
    """fn() where PyTorch's contract is to raise cls: get_submodule and
    get_parameter raise AttributeError, ModuleDict[missing] KeyError."""
    try:
        return fn()
    except cls:
        return None


def backward(r):
    """backward() from the first floating result that requires grad."""
    if isinstance(r, (tuple, list)):
        r = next((t for t in r if isinstance(t, mf.Tensor) and t.requires_grad), None)
    if isinstance(r, mf.Tensor) and r.requires_grad and r.is_floating_point():
        r.float().sum().backward()
'''
