#!/usr/bin/env bash
# Starts or stops a real one-node Slurm cluster for the tests of the Slurm executor: Debian's
# slurm-wlm and munge, a generated slurm.conf and munge key, state and spool under DIR, ports
# picked free. Nothing outside DIR is written; every daemon is started with a pid file and is
# stopped again by that pid.
#
#   scripts/slurm-cluster.sh start DIR   # prints SLURM_CONF=DIR/slurm.conf when the node is idle
#   scripts/slurm-cluster.sh stop DIR    # stops slurmd, slurmctld and munged by pid
#
# Needs root (slurmd runs jobs as their user) and the packages slurm-wlm and munge.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
	echo "usage: $0 start|stop DIR" >&2
	exit 2
fi

stop() {
	# Cancel every job first, so no batch step outlives the cluster.
	if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
		SLURM_CONF="$dir/slurm.conf" scancel --quiet --user="$(id -un)" 2>/dev/null || true
		for _ in $(seq 50); do
			[ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h -o %i 2>/dev/null)" ] && break
			sleep 0.1
		done
	fi
	# The three daemons are told to stop at once and then waited for together: one after the
	# other, each taking a second or two to shut down, they took about 5 s of every test that
	# starts a cluster.
	local pids=()
	for d in slurmd slurmctld munged; do
		f="$dir/$d.pid"
		[ -f "$f" ] || continue
		pid=$(cat "$f" 2>/dev/null || true)
		rm -f "$f"
		[ -n "$pid" ] || continue
		kill "$pid" 2>/dev/null && pids+=("$pid")
	done
	for _ in $(seq 100); do
		local alive=()
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive+=("$pid")
		done
		pids=("${alive[@]}")
		[ ${#pids[@]} -eq 0 ] && break
		sleep 0.05
	done
	for pid in "${pids[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
	done
	# A batch step left behind (its slurmstepd runs the script from this cluster's spool).
	for p in $(pgrep -f "$dir/spool" 2>/dev/null); do
		pp=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
		kill -9 "$p" 2>/dev/null || true
		if [ -n "$pp" ] && [ "$(ps -o comm= -p "$pp" 2>/dev/null)" = slurmstepd ]; then
			kill -9 "$pp" 2>/dev/null || true
		fi
	done
}

freeport() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

case "$cmd" in
stop)
	stop
	exit 0
	;;
start) ;;
*)
	echo "usage: $0 start|stop DIR" >&2
	exit 2
	;;
esac

for b in slurmctld slurmd munged sbatch; do
	command -v "$b" >/dev/null || {
		echo "$b not found: apt-get install slurm-wlm munge" >&2
		exit 1
	}
done
mkdir -p "$dir"/{state,spool,munge,log}
dir=$(cd "$dir" && pwd)
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
sock="$dir/munge/munge.socket"
munged --key-file="$dir/munge/munge.key" --socket="$sock" --pid-file="$dir/munged.pid" \
	--log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed" --force

host=$(hostname -s)
cpus=$(nproc)
memmb=$(awk '/MemTotal/ {print int($2/1024) - 512}' /proc/meminfo)
ctlport=$(freeport)
dport=$(freeport)
cat >"$dir/slurm.conf" <<CONF
ClusterName=runnertest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctlport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge=3600
SchedulerParameters=sched_interval=1
MaxArraySize=10001
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memmb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
	if sinfo -h -o '%t' 2>/dev/null | grep -qx idle; then
		echo "SLURM_CONF=$SLURM_CONF"
		exit 0
	fi
	sleep 0.1
done
echo "the Slurm node did not become idle in 10 s; logs in $dir/log" >&2
sinfo >&2 || true
stop
exit 1
