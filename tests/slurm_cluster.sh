#!/usr/bin/env bash
# A one-node Slurm cluster in a folder, for the tests that submit for real (tests/test_slurm_real.py)
# and for trying slurm/ on a laptop (docs/slurm.md, "A laptop-size Slurm").
#
#   tests/slurm_cluster.sh start DIR   # writes DIR/slurm.conf, starts munged, slurmctld, slurmd;
#                                      # waits until the node is idle; prints SLURM_CONF=DIR/slurm.conf
#   export SLURM_CONF=DIR/slurm.conf   # then sbatch, squeue, sinfo, scontrol talk to it
#   tests/slurm_cluster.sh stop DIR    # stops the three daemons by the pids in DIR/*.pid
#
# Needs root (slurmd runs jobs as their user) and Debian's slurm-wlm + munge
# (`apt-get install -y slurm-wlm munge`, Slurm 22.05). Everything lives in DIR: the config, the
# munge key and socket (so a system munged, if any, is left alone), state, spool, logs and pids;
# the ports are free ones picked at start. No systemd. Settings (environment):
#   RLSR_SLURM_CPUS    CPUs of the node (default: nproc); each job takes one by default
#   RLSR_SLURM_MEMORY  RealMemory of the node in MB (default 4096; jobs ask for none)
set -euo pipefail

die() {
    echo "slurm_cluster: error: $*" >&2
    exit 1
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local dir=$1
    for tool in munged slurmctld slurmd sinfo; do
        command -v "$tool" >/dev/null 2>&1 || [[ -x /usr/sbin/$tool ]] ||
            die "$tool not found; install Slurm with: apt-get install -y slurm-wlm munge"
    done
    [[ $(id -u) == 0 ]] || die "must run as root (slurmd starts jobs as their user)"
    id munge >/dev/null 2>&1 || die "no 'munge' user; install munge: apt-get install -y munge"
    export PATH=$PATH:/usr/sbin
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    # munged runs as the munge user: it must traverse DIR, and it refuses a key or socket folder
    # that others can write.
    chmod 755 "$dir"
    mkdir -p "$dir/munge" "$dir/munge-socket" "$dir/state" "$dir/spool" "$dir/log"
    chown munge:munge "$dir/munge" "$dir/munge-socket"
    chmod 700 "$dir/munge"
    chmod 755 "$dir/munge-socket" # clients (slurmctld, slurmd, sbatch) connect to the socket
    if [[ ! -f $dir/munge/munge.key ]]; then
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
        chown munge:munge "$dir/munge/munge.key"
        chmod 400 "$dir/munge/munge.key"
    fi
    local socket=$dir/munge-socket/munge.socket
    runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$socket" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed" ||
        die "munged did not start; see $dir/munge/munged.log"
    cp "$dir/munge/munged.pid" "$dir/munged.pid"

    local cpus=${RLSR_SLURM_CPUS:-$(nproc)} host ctld_port slurmd_port
    host=$(hostname -s)
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    first_job_id=$(($(date +%s) % 50000000 + 1000))
    cat >"$dir/slurm.conf" <<EOF
# One-node test cluster written by tests/slurm_cluster.sh
ClusterName=rlsrtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
# finished jobs stay in scontrol for an hour (sweep.py --status reads them there; no sacct)
MinJobAge=3600
# job ids differ from one start to the next, so logs/<name>-<id>.out of an earlier start are not
# appended to (the scripts open their logs with --open-mode=append)
FirstJobId=$first_job_id
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=${RLSR_SLURM_MEMORY:-4096} State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    # -i: ignore state from an earlier start in DIR (clean job list, job ids from 1)
    slurmctld -i || die "slurmctld did not start; see $dir/log/slurmctld.log"
    slurmd || die "slurmd did not start; see $dir/log/slurmd.log"
    local deadline=$((SECONDS + 60)) state=""
    while ((SECONDS < deadline)); do
        state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
        [[ $state == idle ]] && break
        sleep 0.5
    done
    [[ $state == idle ]] || {
        stop "$dir"
        die "the node is not idle after 60 s (state '$state'); see $dir/log/"
    }
    echo "SLURM_CONF=$dir/slurm.conf"
}

# Stops the daemons started in DIR, by pid: slurmd (and its jobs), slurmctld, munged.
stop() {
    local dir=$1 name pid
    export SLURM_CONF=$dir/slurm.conf
    # cancel what is left so that slurmd ends the job processes it started
    [[ ! -f $dir/slurm.conf ]] || scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for name in slurmd slurmctld munged; do
        [[ -f $dir/$name.pid ]] || continue
        pid=$(<"$dir/$name.pid")
        [[ $pid =~ ^[0-9]+$ ]] || continue
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$dir/$name.pid"
    done
}

case ${1:-} in
start) start "${2:?usage: slurm_cluster.sh start DIR}" ;;
stop) stop "${2:?usage: slurm_cluster.sh stop DIR}" ;;
*) die "usage: slurm_cluster.sh start|stop DIR" ;;
esac
