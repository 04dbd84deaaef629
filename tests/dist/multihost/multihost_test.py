#!/usr/bin/env python3
"""`loom train` spread over two hosts, started by `loom launch --hostfile` as on a cluster. The
hosts are network namespaces made by two_hosts.sh, which runs this script on host A; mpirun
reaches host B through rsh_agent.sh (where a cluster has ssh). Two ranks per host, mpirun's
default by-slot mapping (ranks 0-1 on A, 2-3 on B), shared memory inside a host, TCP between them.

  hsdp    HSDP, dp_replicate 2 x dp_shard 2: each host holds one replica sharded over its two
          ranks, the replicas' grad all-reduce crosses the link. Step-1 loss identical to one
          process, 20-step curve within 1e-5 (the parity cases' criteria for HSDP 2x2). Open MPI
          must see two hosts: with shared memory alone (btl self,vader) it cannot connect them.
  tp      tp 2 inside each host, FSDP 2 across: step 1 within 1e-6 relative, curve within 1e-5.
  killed  the ranks of host B are killed (kill -9) mid-run: the job ends on host A within the
          collective watchdog's timeout, naming host B.
          Both fault cases pin Open MPI's ports (docs/distributed.md's firewall recipe) and check,
          while the job runs, that every connection between the hosts was accepted on one of them.
  hung    the ranks of host B are stopped (SIGSTOP: a host that hangs with its connections open, which
          MPI cannot notice): host A's watchdog ends the job within the timeout plus 10 s.

In hsdp and tp, each direction of the link carries at least one fp32 copy of the parameters per
step (HSDP: the replica all-reduce of both ranks' grad shards; TP x FSDP: the parameter gather and
the grad reduce-scatter between the FSDP pairs), read from the veth's counters on both ends.

usage: multihost_test.py --loom PATH --mpirun PATH --case hsdp|tp|killed|hung
"""
import argparse
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import parity_test  # noqa: E402  (the fixtures and comparisons of the one-host parity cases)

WATCHDOG_S = 10  # LOOM_COLLECTIVE_TIMEOUT_S for the fault cases
# The fault cases pin Open MPI's listening ports as docs/distributed.md tells firewalled clusters to:
# the TCP BTL's range (btl_tcp_port_min_v4, btl_tcp_port_range_v4) and the daemons' OOB port.
BTL_PORT_MIN, BTL_PORT_RANGE, OOB_PORT = 23000, 100, 23200


class Hosts:
    """The two hosts two_hosts.sh made, and the loom launch options that spread ranks over them."""

    def __init__(self, work):
        try:
            self.a, self.b = os.environ["LOOM_MH_HOSTS"].split()
            self.agent, self.subnet, self.iface = (os.environ[k] for k in ("LOOM_MH_AGENT", "LOOM_MH_SUBNET",
                                                                           "LOOM_MH_IF"))
        except (KeyError, ValueError):
            raise SystemExit("FAIL: run this through two_hosts.sh (LOOM_MH_HOSTS and friends are not set)")
        self.hostfile = os.path.join(work, "hostfile")
        with open(self.hostfile, "w") as f:
            f.write("%s slots=2\n%s slots=2\n" % (self.a, self.b))

    def launch_options(self, btl=None, pinned_ports=False):
        options = ["--hostfile", self.hostfile, "--mca", "plm_rsh_agent", self.agent,
                   # the docs' recipe where only the first host may ssh to the others
                   "--mca", "plm_rsh_no_tree_spawn", "1",
                   "--mca", "btl_tcp_if_include", self.subnet, "--mca", "oob_tcp_if_include", self.subnet]
        if pinned_ports:
            options += ["--mca", "btl_tcp_port_min_v4", str(BTL_PORT_MIN), "--mca", "btl_tcp_port_range_v4",
                        str(BTL_PORT_RANGE), "--mca", "oob_tcp_static_ipv4_ports", str(OOB_PORT)]
        return options + (["--mca", "btl", btl] if btl else [])

    def check_pinned_ports(self):
        """Every TCP connection between the hosts was accepted on a pinned port (the side that
        dialled uses an ephemeral one): a firewall open for those ports alone lets the job run."""
        pinned = set(range(BTL_PORT_MIN, BTL_PORT_MIN + BTL_PORT_RANGE)) | {OOB_PORT}
        link, seen = ipaddress.ip_network(self.subnet), 0
        for host in (self.a, self.b):
            out = subprocess.check_output(self.in_host(host, ["ss", "-Htn", "state", "established"]), text=True)
            for line in out.splitlines():
                (local_ip, local_port), (_, peer_port) = (f.rsplit(":", 1) for f in line.split()[2:4])
                if ipaddress.ip_address(local_ip) not in link:
                    continue
                seen += 1
                if int(local_port) not in pinned and int(peer_port) not in pinned:
                    raise SystemExit("FAIL: %s: connection %s joins no pinned port (%d-%d, %d)" % (
                        host, line.strip(), BTL_PORT_MIN, BTL_PORT_MIN + BTL_PORT_RANGE - 1, OOB_PORT))
        if seen == 0:
            raise SystemExit("FAIL: no TCP connection between the hosts while the job ran")
        print("  %d connection ends between the hosts, each joining a pinned port (btl %d-%d, oob %d)" % (
            seen, BTL_PORT_MIN, BTL_PORT_MIN + BTL_PORT_RANGE - 1, OOB_PORT))

    def in_host(self, host, cmd):
        return cmd if host == self.a else ["ip", "netns", "exec", host] + cmd

    def link_bytes(self):
        """{(host, "tx"|"rx"): bytes} of the veth on both ends."""
        out = {}
        for host in (self.a, self.b):
            for d in ("tx", "rx"):
                path = "/sys/class/net/%s/statistics/%s_bytes" % (self.iface, d)
                out[(host, d)] = int(subprocess.check_output(self.in_host(host, ["cat", path]), text=True))
        return out

    def loom_pids(self, host):
        pids = subprocess.run(["ip", "netns", "pids", host], stdout=subprocess.PIPE, text=True).stdout.split()
        found = []
        for pid in pids:
            try:
                with open("/proc/%s/comm" % pid) as f:
                    if f.read().strip() == "loom":
                        found.append(int(pid))
            except OSError:
                pass  # gone meanwhile
        return found


def parameters(run_dir):
    with open(os.path.join(run_dir, "train.log")) as f:
        m = re.search(r"model: (\d+) parameters", f.read())
    if not m:
        raise SystemExit("FAIL: %s/train.log does not give the parameter count" % run_dir)
    return int(m.group(1))


def train_across(args, work, hosts, name, reference, reference_name, step1_identical, **layout):
    before = hosts.link_bytes()
    got, run_dir = parity_test.run(args, work, name, 4, launch_options=hosts.launch_options(), **layout)
    after = hosts.link_bytes()
    with open(os.path.join(run_dir, "train.log")) as f:
        if "(4 processes)" not in f.read():
            raise SystemExit("FAIL: %s/train.log does not show a 4-process run" % run_dir)
    if step1_identical:
        if got[1] != reference[1]:
            raise SystemExit("FAIL: %s step-1 loss %.17g differs from one process %.17g" % (name, got[1], reference[1]))
        print("  %-40s step-1 loss identical (%.17g)" % (name, got[1]))
        parity_test.compare(name, got, reference, 1e-5)
    else:
        parity_test.compare_step1_and_curve(name, got, reference, reference_name)
    need = parity_test.STEPS * 4 * parameters(run_dir)
    for sender, receiver in ((hosts.a, hosts.b), (hosts.b, hosts.a)):
        sent = after[(sender, "tx")] - before[(sender, "tx")]
        received = after[(receiver, "rx")] - before[(receiver, "rx")]
        print("  %s -> %s over the veth: %d bytes sent, %d received (at least %d: %d steps x one fp32 copy of "
              "the parameters)" % (sender, receiver, sent, received, need, parity_test.STEPS))
        if min(sent, received) < need:
            raise SystemExit("FAIL: %s: too few bytes crossed the link from %s to %s; the ranks did not talk "
                             "over it" % (name, sender, receiver))


def hsdp(args, work, hosts):
    # Shared memory cannot join two hosts: without TCP, Open MPI must refuse to connect them.
    config, run_dir = parity_test.write_config(work, "hsdp_vader_only", shard=2)
    cmd = ([args.loom, "launch", "-n", "4", "--mpirun", args.mpirun, "--threads", "1"]
           + hosts.launch_options(btl="self,vader") + ["--", "train", "--config", config, "--output", run_dir])
    # Open MPI prints the verdict at once, then leaves the ranks waiting on a collective that
    # cannot start (the watchdog would end them later): stop the job once it has spoken.
    job = subprocess.Popen(cmd, env=parity_test.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, deadline = "", time.time() + 30
    try:
        for line in job.stdout:
            out += line
            if "BTLs attempted:" in out or time.time() > deadline:  # the message's last line
                break
    finally:
        job.terminate()
        job.wait(timeout=30)
    if "unable to reach each other" not in out or not re.search(r"is on host: %s" % re.escape(hosts.b), out):
        print(out)
        raise SystemExit("FAIL: with btl self,vader Open MPI should find host B unreachable")
    print("  btl self,vader alone: Open MPI cannot reach host B (two hosts, no shared memory between them)")
    ref, _ = parity_test.run(args, work, "one_process", 1)
    train_across(args, work, hosts, "hsdp_2x2_two_hosts", ref, "one_process", True, shard=2)


def tp(args, work, hosts):
    ref, _ = parity_test.run(args, work, "one_process", 1)
    train_across(args, work, hosts, "tp2_fsdp2_two_hosts", ref, "one_process", False,
                 parallel_extra="\n  tensor_parallel: 2")


def fault(args, work, hosts, how):
    """Stops host B's ranks by `how` (a signal) once the run is stepping; returns (seconds from the
    signal to the end of the job on host A, its exit code, its output)."""
    config, run_dir = parity_test.write_config(work, "hsdp_" + how, steps=100000, shard=2)
    cmd = ([args.loom, "launch", "-n", "4", "--mpirun", args.mpirun, "--threads", "1"]
           + hosts.launch_options(pinned_ports=True) + ["--", "train", "--config", config, "--output", run_dir])
    log_path = os.path.join(work, how + ".out")
    env = dict(parity_test.ENV, LOOM_COLLECTIVE_TIMEOUT_S=str(WATCHDOG_S))
    with open(log_path, "w") as log:
        job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            metrics, deadline = os.path.join(run_dir, "metrics.jsonl"), time.time() + 60
            while not (os.path.exists(metrics) and open(metrics).read().count("\n") >= 3):
                if job.poll() is not None or time.time() > deadline:
                    raise SystemExit("FAIL: the run did not reach step 3 (exit %s):\n%s" % (job.poll(), open(log_path).read()))
                time.sleep(0.1)
            hosts.check_pinned_ports()
            victims = hosts.loom_pids(hosts.b)
            if len(victims) != 2:
                raise SystemExit("FAIL: expected host B's 2 ranks among its processes, found loom pids %s" % victims)
            sig = signal.SIGKILL if how == "killed" else signal.SIGSTOP
            t0 = time.time()
            for pid in victims:
                os.kill(pid, sig)
            print("  step %d: sent %s to host B's ranks %s" % (open(metrics).read().count("\n"), sig.name, victims))
            rc = job.wait(timeout=3 * WATCHDOG_S + 30)
            took = time.time() - t0
        finally:
            if job.poll() is None:
                job.kill()
    with open(log_path) as f:
        out = f.read()
    left = hosts.loom_pids(hosts.a) + hosts.loom_pids(hosts.b)
    if left:
        raise SystemExit("FAIL: loom processes %s still run after the job ended" % left)
    return took, rc, out


def killed(args, work, hosts):
    took, rc, out = fault(args, work, hosts, "killed")
    # Open MPI sees the ranks die (their daemon on B reports it) and ends the job itself.
    expected = r"process rank [23] with PID \d+ on node %s exited on signal 9" % re.escape(hosts.b)
    print("  the job ended %.1fs after the kill, exit code %d" % (took, rc))
    if rc == 0 or not re.search(expected, out) or took > WATCHDOG_S:
        print(out)
        raise SystemExit("FAIL: expected a non-zero exit naming host B ('%s') within the %ds watchdog timeout" % (
            expected, WATCHDOG_S))
    print("  " + re.search(expected, out).group(0))


def hung(args, work, hosts):
    took, rc, out = fault(args, work, hosts, "hung")
    # Nothing died, no connection closed: only host A's watchdog can end the job.
    expected = r"\[rank [01]\] error: collective \w+ on mesh axis '\w+' \(group of \d ranks\) did not finish within"
    # The timeout, then MPI_Abort's kill sequence over both hosts (1-3 s measured here, under load).
    bound = WATCHDOG_S + 10
    print("  the job ended %.1fs after the stop, exit code %d" % (took, rc))
    if rc == 0 or not re.search(expected, out) or took > bound:
        print(out)
        raise SystemExit("FAIL: expected host A's watchdog ('%s') to end the job within %d s" % (expected, bound))
    print("  " + re.search(expected + r"[^;]*", out).group(0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--case", choices=["hsdp", "tp", "killed", "hung"], required=True)
    args = ap.parse_args()
    version = subprocess.run([args.mpirun, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "Open MPI" not in version.stdout:
        print("SKIP: %s is not Open MPI's mpirun (hostfile, --mca and rsh agent are Open MPI's)" % args.mpirun)
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="loom-multihost-")
    try:
        hosts = Hosts(work)
        parity_test.write_data(os.path.join(work, "data"))
        {"hsdp": hsdp, "tp": tp, "killed": killed, "hung": hung}[args.case](args, work, hosts)
        print("PASS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
