#!/usr/bin/env bash
# The main job: installs what is missing, builds tfk in Release, runs
# tfk-info (ISAs of this CPU and a quick throughput table of the kernels per
# ISA), then the short benchmark run against the peers and the machine's
# limits, whose report it prints (out/bench/benchmarks.md, plots beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
build/tools/tfk-info
echo
bench/run.sh --short
cat out/bench/benchmarks.md
