#!/usr/bin/env bash
# Installs Slurm and munge (Debian's slurm-wlm 22.05) for tests/test_slurm_real.py, which starts
# and stops its own one-node cluster (tests/slurm_cluster.sh, state in a temp folder). Nothing is
# started here, and the packages start no daemon without systemd. .ci/run calls it before pytest.
set -euo pipefail
if ! command -v sbatch >/dev/null 2>&1 || [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] ||
    [ ! -x /usr/sbin/munged ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
