#!/bin/sh
# rsh_agent.sh HOST COMMAND...: mpirun's remote shell (--mca plm_rsh_agent) for the namespace
# hosts of two_hosts.sh. Where ssh would log into HOST, this enters HOST's network namespace and
# gives it HOST's hostname, then runs COMMAND through a shell as sshd would (the words joined by
# spaces). The environment passes through unchanged (OMPI_ALLOW_RUN_AS_ROOT..., PATH).
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh options mpirun might add
host=${1:?usage: rsh_agent.sh HOST COMMAND...}
shift
if [ ! -e "/run/netns/$host" ]; then
  echo "rsh_agent.sh: no network namespace '$host' (hosts are made by two_hosts.sh)" >&2
  exit 255
fi
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$*"' "$host" "$@"
