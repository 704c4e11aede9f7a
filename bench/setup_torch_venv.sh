#!/usr/bin/env bash
# Installs the newest PyTorch release from PyPI into bench/.venv-torch, a venv of
# its own, so benchmarks can compare against it next to Debian's PyTorch 1.13.
# Never used by tests or CI. Skips the install when the venv already imports torch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-torch"
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  "$venv/bin/python" -c 'import torch; print("bench venv: torch", torch.__version__)'
  exit 0
fi
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet torch numpy
"$venv/bin/python" -c 'import torch; print("bench venv: torch", torch.__version__)'
