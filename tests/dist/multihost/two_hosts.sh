#!/usr/bin/env bash
# two_hosts.sh LIMIT_S COMMAND [ARGS...]: runs COMMAND on "host A" of two throwaway hosts and
# removes them afterwards, whatever happens.
#
# Each host is a network namespace with its own hostname (a UTS namespace), so Open MPI counts two
# nodes: no shared memory between them, and everything between the hosts crosses the one veth
# pair that joins them (10.213.0.1 on A, 10.213.0.2 on B; the namespaces see nothing else, so the
# addresses clash with nothing, concurrent runs included). The host's own interfaces and routes
# are never touched: the veth is created inside A with its peer inside B.
#
# COMMAND finds, in its environment:
#   LOOM_MH_HOSTS   "A B": the two hostnames (also the namespaces' names, unique per run)
#   LOOM_MH_AGENT   an rsh agent for mpirun (--mca plm_rsh_agent) that starts a command on B
#   LOOM_MH_SUBNET  the link's subnet, for btl_tcp_if_include / oob_tcp_if_include
#   LOOM_MH_IF      the veth's name on either side (/sys/class/net/$LOOM_MH_IF/statistics)
# COMMAND is killed after LIMIT_S seconds (so the clean-up runs before any outer timeout).
#
# Exit code 77 (CTest's SKIP_RETURN_CODE) where namespaces cannot be made: not root, no
# CAP_NET_ADMIN / CAP_SYS_ADMIN, no ip, ss or unshare (multihost_test.py adds: no Open MPI).
set -u
limit=$1; shift
here=$(cd "$(dirname "$0")" && pwd)

skip() {
  echo "SKIP: $* (the multi-host test needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN, and iproute2's ip and ss" \
       "and util-linux's unshare, to build two hosts out of network namespaces)"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "not running as root (uid $(id -u))"
for tool in ip ss unshare timeout; do
  command -v "$tool" > /dev/null || skip "'$tool' is not installed"
done
unshare --uts true 2> /dev/null || skip "cannot create a UTS namespace (unshare --uts failed)"

run_id="$$-$(date +%s%N | tail -c 6)"
A="loom-mh-$run_id-a"
B="loom-mh-$run_id-b"
IF=mh0
made=()

cleanup() {
  local ns pids
  for ns in "${made[@]}"; do
    # Whatever still runs in a namespace (an orphaned orted or rank) would keep it alive.
    pids=$(ip netns pids "$ns" 2> /dev/null)
    [ -n "$pids" ] && kill -9 $pids 2> /dev/null
    ip netns del "$ns" 2> /dev/null || echo "warning: could not delete network namespace $ns (ip netns del $ns)"
  done
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP

# Hosts left by a run that was killed outright (its shell had no chance to clean up): their
# names carry the pid of the shell that made them.
for ns in $(ip netns list 2> /dev/null | grep -o '^loom-mh-[0-9]*-[0-9]*-[ab]'); do
  pid=${ns#loom-mh-}; pid=${pid%%-*}
  if ! kill -0 "$pid" 2> /dev/null; then
    made+=("$ns")
    echo "removing network namespace $ns left by an earlier run"
  fi
done
cleanup
made=()

ip netns add "$A" 2> /dev/null || skip "cannot create a network namespace (ip netns add failed)"
made+=("$A")
# Configuring it needs CAP_NET_ADMIN, which creating it did not.
ip -n "$A" link set lo up 2> /dev/null || skip "cannot configure a network namespace (no CAP_NET_ADMIN)"
ip netns add "$B" || { echo "FAIL: ip netns add $B"; exit 1; }
made+=("$B")
set -e
ip -n "$A" link add "$IF" type veth peer name "$IF" netns "$B"
ip -n "$A" addr add 10.213.0.1/24 dev "$IF"
ip -n "$B" addr add 10.213.0.2/24 dev "$IF"
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up  # each host reaches itself (Open MPI's own daemons talk over it)
  ip -n "$ns" link set "$IF" up
done
set +e
echo "two hosts: $A (10.213.0.1) and $B (10.213.0.2), joined by veth $IF"

export LOOM_MH_HOSTS="$A $B" LOOM_MH_AGENT="$here/rsh_agent.sh" LOOM_MH_SUBNET=10.213.0.0/24 LOOM_MH_IF=$IF
timeout --kill-after=5 "$limit" ip netns exec "$A" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$A" "$@"
rc=$?
[ "$rc" -eq 124 ] && echo "FAIL: the test ran past ${limit}s and was killed"
exit "$rc"
