#!/usr/bin/env bash
# A campaign of random public-API calls (tests/fuzz/fuzz.py):
#   tools/fuzz.sh --calls 2000000 --seed 7 [--workers N] [--out DIR] [--only REGEX]
# Builds meshflow first if needed. Prints a summary table and writes a
# standalone reproducer per distinct failure into --out (default build/fuzz);
# exits non-zero on any crash, hang or undocumented exception.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${MESHFLOW_FUZZ_NO_BUILD:-}" ]; then bash "$root/tools/build.sh" >/dev/null; fi
args=("$@")
case " $* " in *" --workers "*) ;; *) args+=(--workers "$(nproc)") ;; esac
PYTHONPATH="${MESHFLOW_PYTHONPATH:-$root/python}" exec /usr/bin/python3 "$root/tests/fuzz/fuzz.py" "${args[@]}"
