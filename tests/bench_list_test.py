#!/usr/bin/env python3
"""tfk_bench --benchmark_list_tests lists every kernel on every ISA this CPU
supports (as tfk-info reports them), at 1 thread and at all threads."""
import os
import re
import subprocess
import sys

bench, info = sys.argv[1], sys.argv[2]
isas = re.search(r"supported ISAs on this CPU:\s*(.*)",
                 subprocess.run([info, "--isas"], capture_output=True, text=True, check=True).stdout)
isas = isas.group(1).split()
names = subprocess.run([bench, "--benchmark_list_tests"], capture_output=True, text=True,
                       check=True).stdout.split()
kernels = ["softmax", "relu", "gelu_erf", "gelu_tanh", "layernorm", "rmsnorm", "rope_half",
           "rope_interleaved", "matmul/tfk_linear", "matmul_unpacked", "attention", "block", "silu", "add"]
threads = {"1", str(os.cpu_count())} if os.cpu_count() > 1 else {"1"}
missing = []
for kernel in kernels + ["peak/fma", "peak/tile"]:
    for isa in isas:
        for t in threads:
            # The register tile's label names its tile after the ISA.
            tile = r"/mr\d+_nr\d+" if kernel == "peak/tile" else ""
            pattern = re.compile(rf"^{kernel}/(.*/)?{isa}{tile}/threads:{t}(/real_time)?$")
            if not any(pattern.match(n) for n in names):
                missing.append(f"{kernel} on {isa} at {t} threads")
for limit in ["memory/copy", "memory/read", "memory/rmw", "memory/triad"]:
    if not any(n.startswith(limit) for n in names):
        missing.append(limit)
if missing:
    print("missing from --benchmark_list_tests:", ", ".join(missing))
    sys.exit(1)
print(f"{len(names)} benchmarks: {len(kernels)} kernels x ISAs {', '.join(isas)} x threads {sorted(threads)}")
