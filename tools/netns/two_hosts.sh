#!/bin/sh
# Two "hosts" on one machine: each rank runs in its own network, mount and
# UTS namespace (hostname hostA / hostB), with its own tmpfs on the fd socket
# dir and the shm dir and an /etc/hosts that names both, joined by a veth pair
# so TCP works between them and nothing else is shared. Needs root (or
# CAP_SYS_ADMIN + CAP_NET_ADMIN).
#
#   [LAUNCHER=plain|torchrun|slurm|ompi] two_hosts.sh WORKDIR WORKER [ARGS...]
# Rank 0 runs in hostA (10.231.0.1), rank 1 in hostB (10.231.0.2); WORKER gets
# --socket-dir WORKDIR/run --shm-dir WORKDIR/shm and the environment the named
# launcher gives its ranks:
#   plain     RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT ENGRAMLAB_JOB_ID (engramlab launch's)
#   torchrun  the same plus TORCHELASTIC_RUN_ID and TORCHELASTIC_USE_AGENT_STORE=True, LOCAL_WORLD_SIZE
#   slurm     SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_JOB_ID SLURM_STEP_ID SLURM_STEP_NODELIST=hostA,hostB
#   ompi      OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} PMIX_NAMESPACE, and MASTER_ADDR (mpirun -x)
#   engramlab NODE=0 / NODE=1 only: WORKER is an `engramlab launch --nnodes 2 --node-rank $NODE ...` line
# ENGRAMLAB_JOB_TOKEN is set once for both, as a user does before the launcher.
# Output of each side goes to WORKDIR/out-hostA and WORKDIR/out-hostB.
set -eu
work=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/run" "$work/shm"
printf '127.0.0.1 localhost\n10.231.0.1 hostA\n10.231.0.2 hostB\n' > "$work/hosts"
suffix=$$
if_a="eA$suffix"
if_b="eB$suffix"
launcher=${LAUNCHER:-plain}
port=${MASTER_PORT:-29517}
export ENGRAMLAB_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

# side RANK: the launcher's variables for that rank, as `env` arguments.
side() {
  case $launcher in
    plain) echo "RANK=$1 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=10.231.0.1 MASTER_PORT=$port ENGRAMLAB_JOB_ID=${ENGRAMLAB_JOB_ID:-twohosts$suffix}" ;;
    torchrun) echo "RANK=$1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=$1 MASTER_ADDR=10.231.0.1 MASTER_PORT=$port TORCHELASTIC_RUN_ID=twohosts$suffix TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0" ;;
    slurm) echo "SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=1 SLURM_JOB_ID=$suffix SLURM_STEP_ID=0 SLURM_STEP_NODELIST=hostA,hostB" ;;
    engramlab) echo "NODE=$1" ;;
    ompi) echo "OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1 PMIX_NAMESPACE=prterun-twohosts-$suffix@1 MASTER_ADDR=10.231.0.1" ;;
    *) echo "two_hosts: unknown LAUNCHER=$launcher" >&2; exit 2 ;;
  esac
}
vars_a=$(side 0)
vars_b=$(side 1)
# The caller's launcher variables must not leak into the other launcher's run.
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT ENGRAMLAB_JOB_ID 2>/dev/null || true

env $vars_a unshare --net --mount --uts --propagation private \
  sh "$here/host_side.sh" hostA "$if_a" 10.231.0.1 "$work" "$@" >"$work/out-hostA" 2>&1 &
pid_a=$!
env $vars_b unshare --net --mount --uts --propagation private \
  sh "$here/host_side.sh" hostB "$if_b" 10.231.0.2 "$work" "$@" >"$work/out-hostB" 2>&1 &
pid_b=$!

# Move the veth ends only once each side has entered its namespaces.
i=0
while [ ! -e "$work/ready-hostA" ] || [ ! -e "$work/ready-hostB" ]; do
  i=$((i + 1))
  if [ $i -gt 200 ]; then echo "two_hosts: namespaces never became ready" >&2; kill $pid_a $pid_b; exit 3; fi
  sleep 0.05
done
ip link add "$if_a" type veth peer name "$if_b"
ip link set "$if_a" netns $pid_a
ip link set "$if_b" netns $pid_b

status=0
wait $pid_a || status=$?
wait $pid_b || status=$?
exit $status
