#!/usr/bin/env bash
# The main job: installs what is missing, builds tfk in Release and runs
# tfk-info (ISAs of this CPU and a throughput table of every kernel per ISA).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFK_BUILD_BENCH=OFF >/dev/null
cmake --build build -j "$(nproc)"
build/tools/tfk-info
