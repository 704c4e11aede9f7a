"""meshflow.io: checkpoints in the safetensors format.

save(obj, f) / load(f) store a tree of None, bool, int, float, str, Tensor,
list and dict (str keys) in one safetensors file, like torch.save / torch.load
for state dicts (tuples load as lists). save_file / load_file read and write
plain safetensors files of named tensors, as the safetensors package does.
Every save is atomic: the file holds either its old content or the new one.
"""
import os

from meshflow._C import _io

__all__ = ["save", "load", "save_file", "load_file", "load_file_with_metadata"]


def save(obj, f):
    """Saves obj (None, bool, int, float, str, Tensor, list, tuple, dict) to path f."""
    _io.save(obj, os.fspath(f))


def load(f):
    """Loads what save wrote; a safetensors file from elsewhere loads as {name: tensor}."""
    return _io.load(os.fspath(f))


def save_file(tensors, filename, metadata=None):
    """Writes {name: tensor} and optional {str: str} metadata as a safetensors file."""
    _io.save_file(dict(tensors), os.fspath(filename), dict(metadata or {}))


def load_file(filename):
    """Reads a safetensors file into {name: tensor}."""
    return _io.load_file(os.fspath(filename))[0]


def load_file_with_metadata(filename):
    """Reads a safetensors file into ({name: tensor}, {str: str} metadata)."""
    tensors, metadata = _io.load_file(os.fspath(filename))
    return tensors, metadata
