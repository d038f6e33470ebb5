#!/usr/bin/env bash
# Runs one command on one node inside an srun step (started by train.slurm / evaluate.slurm):
#
#   node_exec.sh [--rank-nodes NODE1,NODE2,...] [--gpus first:N|last:N] -- COMMAND...
#
#   1. sources RLSR_SETUP (modules, conda, venv) if set;
#   2. with --gpus, narrows CUDA_VISIBLE_DEVICES to the first or last N GPUs of the node;
#   3. replaces @MACHINE_RANK@ in COMMAND by this node's position in --rank-nodes (Slurm node
#      names, matched against SLURMD_NODENAME), or by SLURM_PROCID without --rank-nodes;
#   4. execs COMMAND, so that signals reach it directly.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=slurm/lib.sh
source "$here/lib.sh"

rlsr_source_setup

rank_nodes=""
gpu_select=""
while (($# > 0)); do
    case $1 in
    --rank-nodes) rank_nodes=$2 && shift 2 ;;
    --gpus) gpu_select=$2 && shift 2 ;;
    --) shift && break ;;
    *) rlsr_die "node_exec.sh: unknown option '$1' (usage: node_exec.sh [--rank-nodes L] [--gpus S] -- CMD...)" ;;
    esac
done
(($# > 0)) || rlsr_die "node_exec.sh: no command given after --"

if [[ -n $gpu_select ]]; then
    CUDA_VISIBLE_DEVICES=$(rlsr_select_gpus "$gpu_select" "${CUDA_VISIBLE_DEVICES:-}")
    export CUDA_VISIBLE_DEVICES
fi

rank=$(rlsr_node_rank "$rank_nodes" "${SLURMD_NODENAME:-$(hostname -s)}" "${SLURM_PROCID:-0}")
command=()
for word in "$@"; do
    command+=("${word//"$RLSR_RANK_MARKER"/$rank}")
done
rlsr_log "$(hostname -s) machine_rank=$rank CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}: $(rlsr_quote "${command[@]}")"
exec "${command[@]}"
