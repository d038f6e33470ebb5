#!/usr/bin/env bash
# Shared helpers for slurm/train.slurm, slurm/evaluate.slurm and slurm/node_exec.sh.
#
# Sourced, never executed. Pure bash (plus curl for health checks) so that the dry-run mode
# works on any machine, with or without Slurm.

# shellcheck disable=SC2034  # used by the scripts that source this file
# Marker that node_exec.sh replaces with the node's machine rank (SLURM_PROCID of its srun task).
RLSR_RANK_MARKER="@MACHINE_RANK@"

rlsr_die() {
    echo "rlsr-slurm: error: $*" >&2
    exit 1
}

rlsr_log() {
    echo "rlsr-slurm: $*" >&2
}

# Prints a command so that a shell (or Python's shlex.split) reads back exactly the same words.
rlsr_quote() {
    local out="" word
    for word in "$@"; do
        out+="$(printf '%q' "$word") "
    done
    printf '%s\n' "${out% }"
}

# Expands one nodelist item with a bracket group, e.g. "gpu[001-003,007]-ib", one host a line.
# Zero padding follows the width of each range's start ("001" -> 3 digits).
_rlsr_expand_item() {
    local item=$1
    if [[ $item != *"["* ]]; then
        printf '%s\n' "$item"
        return 0
    fi
    local prefix=${item%%\[*}
    local rest=${item#*\[}
    local ranges=${rest%%\]*}
    local suffix=${rest#*\]}
    local range start end width n sub
    local -a parts
    IFS=',' read -r -a parts <<<"$ranges"
    for range in "${parts[@]}"; do
        if [[ $range =~ ^([0-9]+)-([0-9]+)$ ]]; then
            start=${BASH_REMATCH[1]}
            end=${BASH_REMATCH[2]}
        elif [[ $range =~ ^[0-9]+$ ]]; then
            start=$range
            end=$range
        else
            rlsr_die "cannot parse nodelist range '$range' in '$item'"
        fi
        width=${#start}
        for ((n = 10#$start; n <= 10#$end; n++)); do
            printf -v sub '%s%0*d%s' "$prefix" "$width" "$n" "$suffix"
            # The suffix may hold another bracket group ("rack[1-2]-n[1-4]").
            _rlsr_expand_item "$sub"
        done
    done
}

# Slurm nodelist ("gpu[001-003],cpu7") -> host names, one a line, in allocation order.
# Uses `scontrol show hostnames` when it answers (set RLSR_NO_SCONTROL=1 to force the pure-bash
# parser, which the tests use); a scontrol without a controller or slurm.conf (a login node's
# view, a dry run on a laptop) falls back to the parser instead of failing.
rlsr_expand_nodelist() {
    local list=$1 hosts
    [[ -n $list ]] || rlsr_die "empty node list (is SLURM_JOB_NODELIST set?)"
    if [[ -z ${RLSR_NO_SCONTROL:-} ]] && command -v scontrol >/dev/null 2>&1 &&
        hosts=$(scontrol show hostnames "$list" 2>/dev/null) && [[ -n $hosts ]]; then
        printf '%s\n' "$hosts"
        return
    fi
    # Split on commas that are not inside brackets.
    local depth=0 item="" ch i
    for ((i = 0; i < ${#list}; i++)); do
        ch=${list:i:1}
        case $ch in
        "[") depth=$((depth + 1)) ;;
        "]") depth=$((depth - 1)) ;;
        esac
        if [[ $ch == "," && $depth -eq 0 ]]; then
            _rlsr_expand_item "$item"
            item=""
        else
            item+=$ch
        fi
    done
    [[ -n $item ]] && _rlsr_expand_item "$item"
    return 0
}

# GPUs on each node: RLSR_GPUS_PER_NODE, else what Slurm allocated, else what the node shows.
# 0 only when named (sbatch --gpus-per-node=0, RLSR_GPUS_PER_NODE=0): a CPU node. When nothing
# names a count (no GPU request, no CUDA_VISIBLE_DEVICES, nvidia-smi absent or listing none) the
# job stops: a guessed 0 would run a GPU job on CPUs, or start vLLM on no GPU.
rlsr_gpus_per_node() {
    local n=${RLSR_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
    if [[ -z $n && -n ${SLURM_GPUS_PER_NODE:-} ]]; then
        n=${SLURM_GPUS_PER_NODE##*:} # "h100:4" -> "4"
    fi
    if [[ -z $n && -n ${CUDA_VISIBLE_DEVICES:-} && ${CUDA_VISIBLE_DEVICES} != NoDevFiles ]]; then
        local -a ids
        IFS=',' read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"
        n=${#ids[@]}
    fi
    if [[ -z $n ]] && command -v nvidia-smi >/dev/null 2>&1; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
        [[ $n != 0 ]] || n=""
    fi
    [[ -n $n ]] ||
        rlsr_die "cannot detect how many GPUs each node has (no GPU request, CUDA_VISIBLE_DEVICES" \
            "or nvidia-smi GPU); set RLSR_GPUS_PER_NODE=N, or request them with sbatch" \
            "--gpus-per-node=N (0: a CPU node)"
    [[ $n =~ ^(0|[1-9][0-9]*)$ ]] ||
        rlsr_die "cannot tell how many GPUs each node has (got '${n}'); request them with" \
            "'sbatch --gpus-per-node=N' (0: a CPU node) or set RLSR_GPUS_PER_NODE=N"
    echo "$n"
}

# Sources RLSR_SETUP (module loads, conda, a venv) if set; a missing file is named with the fix.
rlsr_source_setup() {
    [[ -n ${RLSR_SETUP:-} ]] || return 0
    [[ -f $RLSR_SETUP ]] ||
        rlsr_die "RLSR_SETUP=$RLSR_SETUP does not exist on $(hostname -s); point it at a script" \
            "that activates rlsr's environment on every node (e.g. one line: source /path/to/rlsr/.venv/bin/activate)"
    set +u # module and conda scripts read unset variables
    # shellcheck disable=SC1090
    source "$RLSR_SETUP"
    set -u
}

# True when PYTHON runs and imports rlsr with the config stack the scripts ask it for.
rlsr_python_has_rlsr() {
    "$1" -c 'import rlsr, hydra, omegaconf' >/dev/null 2>&1
}

# The python of rlsr's environment: RLSR_PYTHON if set, else `python` on PATH when it imports
# rlsr (an activated environment, RLSR_SETUP's), else the repository's .venv (scripts/install.sh);
# else the job stops naming how to activate one.
rlsr_find_python() {
    local root=$1 candidate
    if [[ -n ${RLSR_PYTHON:-} ]]; then
        rlsr_python_has_rlsr "$RLSR_PYTHON" ||
            rlsr_die "RLSR_PYTHON=$RLSR_PYTHON on $(hostname -s) cannot import rlsr; set" \
                "RLSR_PYTHON to the python of rlsr's environment (e.g. $root/.venv/bin/python), or unset it and" \
                "set RLSR_SETUP to a script that activates that environment" \
                "(RLSR_SETUP=${RLSR_SETUP:-unset})"
        echo "$RLSR_PYTHON"
        return 0
    fi
    for candidate in python "$root/.venv/bin/python"; do
        if rlsr_python_has_rlsr "$candidate"; then
            echo "$candidate"
            return 0
        fi
    done
    rlsr_die "no python on $(hostname -s) imports rlsr (not \`python\` on PATH, not $root/.venv);" \
        "activate rlsr's environment first (source $root/.venv/bin/activate, built by bash" \
        "scripts/install.sh), or set RLSR_SETUP to a script that activates it on every node" \
        "(RLSR_SETUP=${RLSR_SETUP:-unset}), or RLSR_PYTHON to its python"
}

# A port derived from the job id, so that jobs sharing a node do not collide and a requeued job
# (same id) gets the same port. All bases + 4999 stay below 32768, the start of Linux's
# ephemeral range, where outgoing connections pick their ports.
rlsr_job_port() {
    local base=$1 job=${SLURM_JOB_ID:-0}
    [[ $job =~ ^[0-9]+$ ]] || rlsr_die "SLURM_JOB_ID must be a number, got '$job'"
    echo $((base + 10#$job % 5000))
}

# True when something on this host already listens on the port (bash /dev/tcp, no tools needed).
rlsr_port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Waits until URL answers HTTP 200, while the server process PID is alive.
# Fails with a message naming the URL, the time waited and the server log.
rlsr_wait_for_http() {
    local url=$1 timeout=$2 pid=$3 log=${4:-"the job log"}
    local start=$SECONDS
    rlsr_log "waiting up to ${timeout}s for $url"
    while true; do
        if curl --silent --fail --max-time 5 --output /dev/null "$url"; then
            rlsr_log "ready after $((SECONDS - start))s: $url"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            rlsr_die "the server process exited before $url answered; see $log" \
                "(a port clash? set the port variable to another value)"
        fi
        if ((SECONDS - start >= timeout)); then
            rlsr_die "no answer from $url after ${timeout}s; see $log. A large model may need" \
                "more time: raise the timeout variable (RLSR_VLLM_TIMEOUT / RLSR_JUDGE_TIMEOUT)"
        fi
        sleep "${RLSR_POLL_INTERVAL:-5}"
    done
}

# Picks an executable: the override if given, else the name on PATH, else the repo's .venv.
rlsr_find_bin() {
    local override=$1 name=$2 root=$3
    if [[ -n $override ]]; then
        echo "$override"
    elif command -v "$name" >/dev/null 2>&1; then
        echo "$name"
    elif [[ -x $root/.venv/bin/$name ]]; then
        echo "$root/.venv/bin/$name"
    else
        echo "$name"
    fi
}

# Narrows a GPU list: spec "first:N" or "last:N" applied to VISIBLE (comma-separated ids, as
# Slurm sets CUDA_VISIBLE_DEVICES) or, when VISIBLE is empty, to 0..GPUS-1 (rlsr_gpus_per_node).
rlsr_select_gpus() {
    local spec=$1 visible=$2
    local -a ids
    if [[ -n $visible ]]; then
        IFS=',' read -r -a ids <<<"$visible"
    else
        local total i
        total=$(rlsr_gpus_per_node) || exit 1
        for ((i = 0; i < total; i++)); do ids+=("$i"); done
    fi
    [[ $spec =~ ^(first|last):([1-9][0-9]*)$ ]] ||
        rlsr_die "GPU selection must look like 'first:N' or 'last:N', got '$spec'"
    local which=${BASH_REMATCH[1]} count=${BASH_REMATCH[2]}
    ((count <= ${#ids[@]})) ||
        rlsr_die "asked for $count GPUs ($spec) but the node shows ${#ids[@]} (${ids[*]})"
    local -a chosen
    if [[ $which == first ]]; then
        chosen=("${ids[@]:0:count}")
    else
        chosen=("${ids[@]:${#ids[@]}-count}")
    fi
    local IFS=,
    echo "${chosen[*]}"
}

# Machine rank of NODE = its index in NODES (comma-separated); FALLBACK when NODES is empty.
rlsr_node_rank() {
    local nodes=$1 node=$2 fallback=$3
    if [[ -z $nodes ]]; then
        echo "$fallback"
        return 0
    fi
    local -a list
    local i
    IFS=',' read -r -a list <<<"$nodes"
    for i in "${!list[@]}"; do
        if [[ ${list[i]} == "$node" || ${list[i]} == "${node%%.*}" ]]; then
            echo "$i"
            return 0
        fi
    done
    rlsr_die "node '$node' is not one of the training nodes ($nodes)"
}
