"""Lets `pytest tests/python` find the meshflow package without PYTHONPATH."""
import pathlib
import sys

_PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2] / "python"
if str(_PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(_PACKAGE_ROOT))
