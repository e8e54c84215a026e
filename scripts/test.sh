#!/usr/bin/env bash
# Installs what is missing, builds tfk and runs every test three times: a
# Release build, a static-library build, and a build under AddressSanitizer +
# UndefinedBehaviorSanitizer; a fourth time built with clang where clang++ is
# installed (tfk builds with g++ >= 12 and clang >= 14); a fifth against a
# newer Highway than Debian's 1.0.3 (scripts/newer-highway.sh).
#   scripts/test.sh            all of them
#   scripts/test.sh --quick    the Release build only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure --no-tests=error

if [[ "${1:-}" != "--quick" ]]; then
  # The static library: same tests, and its install tree used by a consumer.
  cmake -S . -B build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DTFK_BUILD_BENCH=OFF -DTFK_BUILD_TOOLS=OFF
  cmake --build build-static -j "$jobs"
  ctest --test-dir build-static -j "$jobs" --output-on-failure --no-tests=error

  cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFK_SANITIZE=ON \
    -DTFK_BUILD_BENCH=OFF -DTFK_BUILD_TOOLS=OFF
  cmake --build build-sanitize -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-sanitize -j "$jobs" --output-on-failure --no-tests=error

  # The same sources with the other compiler: Highway's per-target
  # attributes and tfk's templates compile differently under clang.
  if [[ -z "${CXX:-}" ]] && command -v clang++ >/dev/null; then
    CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTFK_BUILD_BENCH=OFF -DTFK_BUILD_TOOLS=OFF
    cmake --build build-clang -j "$jobs"
    ctest --test-dir build-clang -j "$jobs" --output-on-failure --no-tests=error
  else
    echo "test.sh: clang++ not found (or CXX set): the clang build is skipped"
  fi

  # Highway 1.2, whose x86 targets go beyond 1.0.3's (AVX3_DL, AVX3_ZEN4,
  # AVX3_SPR, AVX10_2): the same sources and tests.
  scripts/newer-highway.sh
fi
