# Sourced by the bench scripts: prints the CPU, its core count, what each process runs ($1) and
# the matrix path Loom takes on it (`loom cpu`), so every figure stands next to the path it ran on.
print_cpu_header() {
  local loom_bin=${LOOM_BIN:-build/apps/loom/loom}
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, $1"
  [ -x "$loom_bin" ] && "$loom_bin" cpu | grep '^cpu matrix path' || echo "cpu matrix path: unknown ($loom_bin not built)"
}
