#!/usr/bin/env bash
# Installs the newest PyTorch release from PyPI into bench/.venv-torch, a venv of
# its own, so benchmarks can compare against it next to Debian's PyTorch 1.13,
# and nanobind (bench/binding_floor.py compiles a module with it).
# Never used by tests or CI. Skips each install when the venv already has it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-torch"
if ! { [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; }; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet torch numpy
fi
if ! "$venv/bin/python" -c 'import nanobind' 2>/dev/null; then
  "$venv/bin/pip" install --quiet nanobind==3.1.0
fi
"$venv/bin/python" -c 'import torch, nanobind; print("bench venv: torch", torch.__version__, "nanobind", nanobind.__version__)'
