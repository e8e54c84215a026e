#!/usr/bin/env bash
# Installs what is missing, builds tfk and runs every test twice: a Release
# build, then a build under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/test.sh            both
#   scripts/test.sh --quick    the Release build only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFK_BUILD_BENCH=OFF
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure

if [[ "${1:-}" != "--quick" ]]; then
  cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFK_SANITIZE=ON \
    -DTFK_BUILD_BENCH=OFF -DTFK_BUILD_TOOLS=OFF
  cmake --build build-sanitize -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-sanitize -j "$jobs" --output-on-failure
fi
