#!/bin/sh
# One side of two_hosts.sh, already inside its own net/mount/UTS namespaces:
#   host_side.sh HOSTNAME IFACE IP WORKDIR WORKER [ARGS...]
set -eu
name=$1 iface=$2 ip=$3 work=$4
shift 4
hostname "$name"
# Private tmpfs on the socket dir and the shm dir: the other host cannot see them.
mount -t tmpfs -o size=16m,mode=0700 tmpfs "$work/run"
mount -t tmpfs -o size=16m tmpfs "$work/shm"
# Both hosts by name, as a cluster's DNS would give them (Slurm node lists name hosts).
mount --bind "$work/hosts" /etc/hosts
touch "$work/ready-$name"
i=0
while ! ip link show "$iface" >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 200 ]; then echo "$name: interface $iface never arrived" >&2; exit 3; fi
  sleep 0.05
done
ip link set lo up
ip addr add "$ip/24" dev "$iface"
ip link set "$iface" up
exec "$@" --socket-dir "$work/run/sockets" --shm-dir "$work/shm"
