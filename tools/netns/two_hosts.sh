#!/bin/sh
# Two "hosts" on one machine: each rank runs in its own network, mount and
# UTS namespace (hostname hostA / hostB), with its own tmpfs on the fd socket
# dir and the shm dir, joined by a veth pair so TCP works between them and
# nothing else is shared. Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN).
#
#   two_hosts.sh WORKDIR WORKER [ARGS...]
# Rank 0 runs in hostA (10.231.0.1), rank 1 in hostB (10.231.0.2); WORKER gets
# --socket-dir WORKDIR/run --shm-dir WORKDIR/shm and the launcher environment.
# Output of each side goes to WORKDIR/out-hostA and WORKDIR/out-hostB.
set -eu
work=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/run" "$work/shm"
suffix=$$
if_a="eA$suffix"
if_b="eB$suffix"
export WORLD_SIZE=2 MASTER_ADDR=10.231.0.1 MASTER_PORT=${MASTER_PORT:-29517}
export ENGRAMLAB_JOB_ID=${ENGRAMLAB_JOB_ID:-twohosts$suffix}
export ENGRAMLAB_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')

RANK=0 LOCAL_RANK=0 unshare --net --mount --uts --propagation private \
  sh "$here/host_side.sh" hostA "$if_a" 10.231.0.1 "$work" "$@" >"$work/out-hostA" 2>&1 &
pid_a=$!
RANK=1 LOCAL_RANK=0 unshare --net --mount --uts --propagation private \
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
