#!/usr/bin/env bash
# Set up rlsr in ./.venv on a fresh machine (CPU is enough).
#   bash scripts/install.sh          # the package
#   bash scripts/install.sh test     # the package + test tools
#   bash scripts/install.sh vllm     # GPU machines: + vllm==0.31.0
# torch is installed first, pinned, so that pip never swaps in a multi-GB CUDA build on CPU
# machines (vllm 0.31.0 pins the same torch==2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install torch==2.13.0
extras="${1:-}"
if [ -n "$extras" ]; then
  "${PIP[@]}" install -e ".[${extras}]"
else
  "${PIP[@]}" install -e .
fi
echo "rlsr installed in .venv ($(.venv/bin/python -c 'import rlsr; print(rlsr.__version__)'))"
