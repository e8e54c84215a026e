#!/usr/bin/env bash
# Measures every kernel on every ISA this CPU supports, at 1 and all threads,
# beside its peers (oneDNN, OpenBLAS) and the machine's limits (FMA peak,
# memory bandwidth), in one process; then the targets' ratios to a copy, to
# oneDNN and to the FMA peak, paired round by round (tfk-ab); then writes the
# report.
#
#   bench/run.sh --short   a subset, about 2 minutes on 2 cores; report in
#                          out/bench/benchmarks.md (the default)
#   bench/run.sh --full    every shape, 5 repetitions; report in
#                          docs/benchmarks.md with plots in docs/img/
#   --out DIR              where bench.json and cpu.json go (default out/bench)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=short
out=out/bench
while (($#)); do
  case "$1" in
    --short) mode=short ;;
    --full) mode=full ;;
    --out)
      (($# >= 2)) || { echo "usage: bench/run.sh [--short|--full] [--out DIR]" >&2; exit 2; }
      out="$2"; shift ;;
    *) echo "usage: bench/run.sh [--short|--full] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done

scripts/install-deps.sh --peers
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tfk_bench tfk-ab
mkdir -p "$out"

# CPU description for the report.
/usr/bin/python3 - "$out/cpu.json" "bench/run.sh --$mode" <<'PY'
import json, subprocess, sys, datetime
info = {}
for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
    key, _, value = line.partition(":")
    info[key.strip()] = value.strip()
flags = info.get("Flags", "").split()
wanted = [f for f in flags if f.startswith(("avx", "fma", "sse4", "amx"))]
json.dump({"model": info.get("Model name", "unknown"), "cores": info.get("CPU(s)"),
           "flags": " ".join(sorted(wanted)), "command": sys.argv[2],
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")},
          open(sys.argv[1], "w"), indent=1)
PY

if [[ $mode == short ]]; then
  # Cache-resident shapes, decoding and small prefill matmuls, the limits.
  filter='peak/|memory/(copy|rmw|read)/|memory/triad/262144/|softmax/(64x2048|8192x512)|(relu|gelu_erf|gelu_tanh|silu|add)/262144|layernorm/512x1024|rope_half|matmul/[a-z_]+/M(1|8|64|512)_K1024_N1024/|matmul/tfk_linear/M512_K4096_N4096/|attention/(prefill_causal_L512_H32x32|decode_(f32|bf16)_L2048_H32x32)|block/decode_D1024'
  reps=3
  min_time=0.05
  report="$out/benchmarks.md"
else
  filter='.'
  reps=5
  min_time=0.2
  report=docs/benchmarks.md
fi

# OpenBLAS is slowed by OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE where they are
# set: unset here only, for this command. The repetitions of all benchmarks
# run in one random interleaved order, so a slow spell of a shared host falls
# on tfk and its peers alike instead of on whichever ran during it (in order,
# one full run here had tfk's M = 1 matmul at 0.78x oneDNN where the two
# alternated in the same hour gave 1.04-1.12x).
#
# OpenBLAS 0.3.21 (Debian 12) does not know every newer CPU: on a Xeon of
# family 6 model 207 its own detection falls back to its Prescott (SSE3)
# kernels, 17 GFLOP/s against 146 with its AVX-512 ones. Where it picks a core
# below the CPU's ISA, name the best core it has for this CPU's flags instead
# (the label and the JSON context record the core it ran).
openblas_env=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
core=$(env "${openblas_env[@]}" /usr/bin/python3 -c '
import ctypes
try:
    lib = ctypes.CDLL("libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    print(lib.openblas_get_corename().decode())
except OSError:
    pass' 2>/dev/null || true)
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
want=
if [[ $flags == *" avx512f "* ]]; then
  [[ $flags == *" avx512_bf16 "* ]] && want=Cooperlake || want=SkylakeX
elif [[ $flags == *" avx2 "* ]]; then
  want=Haswell
fi
case "${core,,}" in
  prescott|core2|penryn|dunnington|nehalem|atom|katmai|coppermine|northwood|banias|unknown)
    if [[ -n $want ]]; then
      echo "OpenBLAS chose its $core kernels on this CPU; benchmarking it with OPENBLAS_CORETYPE=$want" >&2
      openblas_env=(-u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=$want)
    fi ;;
esac
env "${openblas_env[@]}" build/bench/tfk_bench \
  --benchmark_filter="$filter" --benchmark_repetitions=$reps \
  --benchmark_enable_random_interleaving=true \
  --benchmark_min_time=$min_time \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json >"$out/bench.txt"

# The targets' ratios paired round by round (tfk-ab): tfk against a copy of
# the same bytes on inputs from memory, against oneDNN on cache-resident ones
# and on the matmul, and the compute-bound matmul against the FMA peak. Where
# tfk-ab has no oneDNN side, those rows are left out.
paired_cases=(
  "copy softmax 65536 2048" "copy softmax 2048 32000" "copy relu 16777216"
  "copy gelu_erf 16777216" "copy gelu_tanh 16777216" "copy layernorm 2048 4096"
  "copy rmsnorm 2048 4096"
  "onednn softmax 64 2048" "onednn relu 262144" "onednn gelu_erf 262144"
  "onednn gelu_tanh 262144" "onednn layernorm 512 1024"
  "onednn linear 8 4096 4096 --layers 4" "onednn linear 64 1024 1024"
  "onednn linear 64 1024 4096" "onednn linear 64 4096 1024" "onednn linear 64 4096 4096"
  "onednn linear 512 4096 4096" "onednn linear 2048 1024 1024"
  "peak linear 512 4096 4096" "peak linear 2048 1024 1024")
rounds=21
if [[ $mode == short ]]; then
  paired_cases=("copy gelu_erf 16777216" "onednn gelu_erf 262144" "onednn linear 64 1024 1024")
  rounds=7
fi
lib=$(readlink -f build/lib/libtfk.so)
: >"$out/paired.txt"
for threads in $(printf '%s\n' 1 "$(nproc)" | sort -un); do
  for c in "${paired_cases[@]}"; do
    read -r ref args <<<"$c"
    # shellcheck disable=SC2086  # args: the kernel and its dimensions
    build/bench/tfk-ab "$ref" "$lib" $args --threads "$threads" --rounds $rounds \
      >>"$out/paired.txt" 2>"$out/paired.err" || echo "tfk-ab $c: $(cat "$out/paired.err")" >&2
  done
done

/usr/bin/python3 bench/report.py "$out/bench.json" --cpu "$out/cpu.json" \
  --command "bench/run.sh --$mode" --paired "$out/paired.txt" --out "$report"
