#!/usr/bin/env bash
# Builds tfk against a Highway release newer than Debian 12's 1.0.3 and runs
# every test there: the newer release compiles more x86 targets (AVX3_DL,
# AVX3_ZEN4, AVX3_SPR, AVX10_2), and the tests run each one the CPU supports.
#
# Debian 12 packages only 1.0.3, so the source comes from PyPI: NumPy 2.3.5's
# source archive carries Highway 1.2 (numpy/_core/src/highway), fetched by a
# pinned address and checked against its sha256. Highway is built and
# installed under build-hwy-new/ only; nothing outside the checkout changes.
#   scripts/newer-highway.sh          download (once), build, test
# Exits 0 with a notice, having tested nothing, where the archive cannot be
# downloaded (an offline machine); any build or test failure fails it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
root=build-hwy-new
url=https://files.pythonhosted.org/packages/76/65/21b3bc86aac7b8f2862db1e808f1ea22b028e30a225a34a5ede9bf8678f2/numpy-2.3.5.tar.gz
sha=784db1dcdab56bf0517743e746dfb0f885fc68d948aba86eeec2cba234bdf1c0
archive=$root/numpy-2.3.5.tar.gz
mkdir -p "$root"

if [[ ! -f $archive ]]; then
  if ! python3 - "$url" "$archive.part" <<'EOF'; then
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
    f.write(r.read())
EOF
    rm -f "$archive.part"
    echo "newer-highway.sh: could not download $url: the newer-Highway build is skipped"
    exit 0
  fi
  # Checked before it is kept: a wrong file is removed, not cached.
  if ! echo "$sha  $archive.part" | sha256sum --check --quiet; then
    rm -f "$archive.part"
    echo "newer-highway.sh: $url does not match its sha256" >&2
    exit 1
  fi
  mv "$archive.part" "$archive"
fi
echo "$sha  $archive" | sha256sum --check --quiet

src=$root/src
rm -rf "$src" && mkdir -p "$src"
tar -xzf "$archive" -C "$src" --strip-components=4 numpy-2.3.5/numpy/_core/src/highway
grep -q '^project(hwy VERSION 1\.2' "$src/highway/CMakeLists.txt"

# Highway itself: the library only (its tests, examples and contrib are not
# tfk's to run).
cmake -S "$src/highway" -B "$root/hwy-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF -DHWY_ENABLE_TESTS=OFF -DHWY_ENABLE_EXAMPLES=OFF \
  -DHWY_ENABLE_CONTRIB=OFF -DHWY_ENABLE_INSTALL=ON -DCMAKE_INSTALL_PREFIX="$PWD/$root/prefix" \
  >/dev/null
cmake --build "$root/hwy-build" -j "$jobs" >/dev/null
cmake --install "$root/hwy-build" >/dev/null

# tfk against it (hwy_DIR wins over the system's 1.0.3), benchmarks and tools
# included: they dispatch through the same tables.
cmake -S . -B "$root/tfk" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -Dhwy_DIR="$PWD/$root/prefix/lib/cmake/hwy"
grep -q -- "-isystem $PWD/$root/prefix/include" "$root/tfk/build.ninja"
cmake --build "$root/tfk" -j "$jobs"
ctest --test-dir "$root/tfk" -j "$jobs" --output-on-failure --no-tests=error
