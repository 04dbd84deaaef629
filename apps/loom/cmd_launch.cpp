// loom launch -n N [--hostfile F] [--mca KEY VALUE]... [--threads T] [--dry-run] -- <loom command and its options>
//
// Starts N copies of this loom program under mpirun (one process per device, like msrun in the
// spec), with the flags that work here: as root, more ranks than cores, shared memory between
// the processes of one host and TCP on loopback (or on the hosts' network with a hostfile or
// inside a Slurm allocation of several nodes, where mpirun finds the nodes itself).
// `mpirun -np N loom train ...` works too; this only saves remembering the flags.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "command.h"

namespace {

const char* kUsage =
    "usage: loom launch -n N [--hostfile FILE] [--mca KEY VALUE]... [--threads T] [--mpirun PATH] [--dry-run] -- <command> "
    "[options]\n"
    "  -n N             number of processes (world size)\n"
    "  --hostfile FILE  hosts to spread the processes over (mpirun's hostfile); default: this machine, or the\n"
    "                   nodes of the Slurm allocation it runs in (salloc / sbatch)\n"
    "  --mca KEY VALUE  an Open MPI parameter for mpirun (repeatable); replaces loom's own value for KEY\n"
    "                   (btl self,vader,tcp; mpi_yield_when_idle 1; on one host btl_tcp_if_include and\n"
    "                   oob_tcp_if_include lo), e.g. --mca btl_tcp_if_include eth1 --mca plm_rsh_agent ssh\n"
    "  --threads T      compute threads per process (default: LOOM_NUM_THREADS, else cores / processes)\n"
    "  --mpirun PATH    the MPI launcher (default: mpirun on PATH)\n"
    "  --dry-run        print the mpirun command instead of running it\n"
    "examples: loom launch -n 2 -- train --config configs/llama_a.yaml\n"
    "          loom launch -n 16 --hostfile hosts --mca btl_tcp_if_include 10.0.0.0/24 --mca oob_tcp_if_include \\\n"
    "            10.0.0.0/24 -- train --config big.yaml\n";

using McaParams = std::vector<std::pair<std::string, std::string>>;

// Sets KEY to VALUE, replacing an earlier value (mpirun takes each key once).
void set_mca(McaParams* params, const std::string& key, const std::string& value) {
  for (auto& [k, v] : *params)
    if (k == key) {
      v = value;
      return;
    }
  params->emplace_back(key, value);
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "loom";
  buf[n] = '\0';
  return buf;
}


// Inside a Slurm allocation of several nodes mpirun spreads the ranks over them by itself.
bool in_multi_node_allocation() {
  for (const char* var : {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}) {
    int nodes = 0;
    if (const char* v = std::getenv(var); v && loom::app::parse_positive(v, &nodes)) return nodes > 1;
  }
  return false;
}

int run_launch(const std::vector<std::string>& args) {
  int n = 0, threads = 0;
  std::string hostfile, mpirun = "mpirun";
  bool dry_run = false;
  std::vector<std::string> command;
  McaParams user_mca;
  loom::app::ArgCursor cursor(args, kUsage);
  auto value = [&] { return cursor.value(); };
  while (!cursor.done()) {
    const std::string a = cursor.next();
    if (a == "--") {
      command = cursor.rest();
      break;
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "-n" || a == "-np" || a == "--nproc") {
      const std::string v = value();
      if (!loom::app::parse_positive(v, &n)) {
        std::fprintf(stderr, "error: -n '%s' is not a positive number of processes\n", v.c_str());
        return 2;
      }
    } else if (a == "--hostfile") {
      hostfile = value();
      if (access(hostfile.c_str(), R_OK) != 0) {
        std::fprintf(stderr, "error: --hostfile %s: %s; give a readable file with one host per line "
                     "(\"node1 slots=8\"; docs/distributed.md, \"Several hosts\")\n", hostfile.c_str(), std::strerror(errno));
        return 2;
      }
    } else if (a == "--mca") {
      const std::string key = value();
      if (key.empty() || key[0] == '-' || key.find_first_of(" =\t") != std::string::npos) {
        std::fprintf(stderr, "error: --mca '%s' is not an Open MPI parameter name; write --mca KEY VALUE, e.g. "
                     "--mca btl_tcp_if_include eth1\n", key.c_str());
        return 2;
      }
      // Open MPI's values never start with '-' (exclusion is '^'): this is the next option, not a value.
      if (cursor.done() || cursor.peek().empty() || cursor.peek()[0] == '-') {
        std::fprintf(stderr, "error: --mca %s needs a value; write --mca KEY VALUE, e.g. --mca btl_tcp_if_include eth1\n",
                     key.c_str());
        return 2;
      }
      set_mca(&user_mca, key, value());
    } else if (a == "--threads") {
      const std::string v = value();
      if (!loom::app::parse_positive(v, &threads)) {
        std::fprintf(stderr, "error: --threads '%s' is not a positive integer\n", v.c_str());
        return 2;
      }
    } else if (a == "--mpirun") {
      mpirun = value();
    } else if (a == "--dry-run") {
      dry_run = true;
    } else {
      std::fprintf(stderr, "error: unknown option '%s' (put the loom command after --)\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (n == 0 || command.empty()) {
    std::fprintf(stderr, "error: %s\n%s", n == 0 ? "-n N is required" : "the command to run (after --) is missing",
                 kUsage);
    return 2;
  }
  const bool one_host = hostfile.empty() && !in_multi_node_allocation();
  if (threads == 0) {
    if (const char* env = std::getenv("LOOM_NUM_THREADS"); env && *env) loom::app::parse_positive(env, &threads);
    // One host: share its cores (over several hosts, each host's cores / its ranks is unknown here).
    if (threads == 0) threads = one_host ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n) : 1;
  }
  const std::string t = std::to_string(threads);
  ::setenv("LOOM_NUM_THREADS", t.c_str(), 1);
  ::setenv("OMP_NUM_THREADS", t.c_str(), 1);
  // Open MPI refuses root without both of these.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);

  McaParams mca = {// shared memory within a host, TCP between hosts
                    {"btl", "self,vader,tcp"},
                    // ranks sharing cores give them up while they wait
                    {"mpi_yield_when_idle", "1"}};
  if (one_host) {
    set_mca(&mca, "btl_tcp_if_include", "lo");
    set_mca(&mca, "oob_tcp_if_include", "lo");
  }
  for (const auto& [key, v] : user_mca) set_mca(&mca, key, v);

  std::vector<std::string> argv = {mpirun, "-np", std::to_string(n), "--oversubscribe", "--bind-to", "none"};
  for (const auto& [key, v] : mca) argv.insert(argv.end(), {"--mca", key, v});
  if (!hostfile.empty()) argv.insert(argv.end(), {"--hostfile", hostfile});
  for (const char* var : {"LOOM_NUM_THREADS", "OMP_NUM_THREADS", "LOOM_COLLECTIVE_TIMEOUT_S", "LOOM_DIST_BACKEND"})
    if (std::getenv(var)) argv.insert(argv.end(), {"-x", var});
  argv.push_back(self_path());
  argv.insert(argv.end(), command.begin(), command.end());

  if (dry_run) {
    std::string line;
    for (const auto& s : argv) line += (line.empty() ? "" : " ") + s;
    std::printf("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s\n", line.c_str());
    return 0;
  }
  std::vector<char*> c_argv;
  for (auto& s : argv) c_argv.push_back(s.data());
  c_argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(c_argv[0], c_argv.data());
  std::fprintf(stderr, "error: cannot start '%s': %s. Install Open MPI (apt-get install openmpi-bin) or pass "
               "--mpirun PATH\n", mpirun.c_str(), std::strerror(errno));
  return 127;
}

}  // namespace

LOOM_COMMAND("launch", "start N processes of a loom command under mpirun (distributed training)", run_launch);
