#!/usr/bin/env bash
# Installs the Debian packages tfk builds, tests and benchmarks with, if any is
# missing. Idempotent: a second run installs nothing and needs no network.
#   scripts/install-deps.sh           build + test dependencies (python3-matplotlib:
#                                     the benchmark report and its test;
#                                     ca-certificates: the HTTPS download of
#                                     scripts/newer-highway.sh)
#   scripts/install-deps.sh --peers   also the libraries benchmarked side by side
set -euo pipefail

pkgs=(cmake ninja-build g++ pkg-config libhwy-dev libtbb-dev libgtest-dev libbenchmark-dev
      python3 python3-matplotlib ca-certificates)
case "${1:-}" in
  "" | --peers) ;;
  *) echo "usage: scripts/install-deps.sh [--peers]" >&2; exit 2 ;;
esac
if [[ "${1:-}" == "--peers" ]]; then
  # Debian's oneDNN is built with the OpenCL GPU runtime: its CMake package
  # requires OpenCL's dev files, which libdnnl-dev only recommends.
  pkgs+=(libdnnl-dev ocl-icd-opencl-dev libopenblas-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "tfk: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    echo "tfk: installing packages needs root: run this as root, or install sudo" >&2
    exit 1
  fi
  sudo_cmd=(sudo env DEBIAN_FRONTEND=noninteractive)  # sudo resets the environment
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
