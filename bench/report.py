#!/usr/bin/env python3
"""Turns tfk_bench's Google Benchmark JSON into a Markdown report with plots.

    report.py BENCH_JSON [--cpu CPU_JSON] [--command CMD] --out REPORT_MD [--img DIR]

For each kernel: a table of shapes x threads with one column per ISA (median
of the repetitions, min-max beside it, a warning sign where the spread
(max - min) / median exceeds 10 %), the dispatched ISA's share of the machine limit
measured in the same run (FMA peak of that ISA for matmul; copy bandwidth of
the same bytes for memory-bound kernels, a read-modify-write pass for
in-place ones, the triad for the add (two reads and a write), read
bandwidth for decoding matmuls, attention and blocks;
the bandwidth benchmark of the nearest size, none if it is more than 1.5x
away; "above it" where the kernel beat it), and the ratio to the
best peer (oneDNN, OpenBLAS) run in the same binary. The dispatched ISA is
the one tfk runs by default, the best the CPU supports (not the fastest of the
ISAs in that run, which where they tie would pick the luckiest of their
medians). Plots (PNG, matplotlib):
throughput per ISA per kernel, and matmul GFLOP/s against M with the FMA
peak as a line.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
from collections import defaultdict

SPREAD_LIMIT = 0.10

# Benchmark name patterns (the "/real_time" suffix is stripped first).
PATTERNS = [
    ("peak", re.compile(r"^peak/fma/(?P<isa>\w+)/threads:(?P<t>\d+)$")),
    ("tile", re.compile(r"^peak/tile/(?P<isa>\w+)/(?P<tile>mr\d+_nr\d+)/threads:(?P<t>\d+)$")),
    ("memory", re.compile(r"^memory/(?P<kind>\w+)/(?P<n>\d+)/threads:(?P<t>\d+)$")),
    ("tfk", re.compile(r"^matmul/tfk_linear/(?P<shape>[^/]+)/(?P<isa>\w+)/threads:(?P<t>\d+)$")),
    ("peer", re.compile(r"^matmul/(?P<peer>openblas|onednn_packed)/(?P<shape>[^/]+)/threads:(?P<t>\d+)$")),
    ("peer", re.compile(r"^onednn/(?P<kernel>\w+)/(?P<shape>[^/]+)/threads:(?P<t>\d+)$")),
    ("tfk", re.compile(r"^(?P<kernel>\w+)/(?P<shape>[^/]+)/(?P<isa>[A-Z][A-Z0-9_]*)/threads:(?P<t>\d+)$")),
]

PEER_NAMES = {"openblas": "OpenBLAS", "onednn_packed": "oneDNN", "onednn": "oneDNN"}
IN_PLACE = {"rope_half", "rope_interleaved"}
TWO_INPUTS = {"add"}  # two reads and a write: read against the triad
KERNEL_ORDER = ["matmul", "matmul_unpacked", "attention", "block", "softmax", "relu", "gelu_erf", "gelu_tanh", "silu", "add", "layernorm", "rmsnorm",
                "rope_half", "rope_interleaved"]
ISA_ORDER = ["AVX10_2", "AVX3_SPR", "AVX3_ZEN4", "AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3"]
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class Result:
    """Repetitions of one benchmark: throughput values and bytes per iteration."""

    def __init__(self, unit):
        self.unit = unit  # "GFLOP/s" or "GB/s"
        self.values = []
        self.gbps = []  # GB/s as well, when a GFLOP/s benchmark also counts bytes
        self.bytes = None
        self.label = ""  # Google Benchmark's label (the memory benchmarks' way)

    @property
    def median(self):
        return statistics.median(self.values)

    @property
    def lo(self):
        return min(self.values)

    @property
    def hi(self):
        return max(self.values)

    @property
    def spread(self):
        return (self.hi - self.lo) / self.median if self.median else 0.0


def load(path):
    """Returns ({run_name: Result}, context) from a Google Benchmark JSON file.

    Iterations (one per repetition) are preferred; a file holding only
    aggregates contributes its medians."""
    with open(path) as f:
        data = json.load(f)
    iterations = defaultdict(list)
    medians = {}
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = b
        else:
            iterations[name].append(b)
    results = {}
    for name in set(iterations) | set(medians):
        entries = iterations.get(name) or [medians[name]]
        first = entries[0]
        unit = "GFLOP/s" if "GFLOPS" in first else "GB/s"
        r = Result(unit)
        r.label = first.get("label", "")
        for e in entries:
            if unit == "GFLOP/s":
                r.values.append(e["GFLOPS"] / 1e9 if e["GFLOPS"] > 1e6 else e["GFLOPS"])
            if e.get("bytes_per_second"):
                gbps = e["bytes_per_second"] / 1e9
                r.gbps.append(gbps)
                if unit == "GB/s":
                    r.values.append(gbps)
                secs = e["real_time"] * TIME_UNITS[e.get("time_unit", "ns")]
                r.bytes = e["bytes_per_second"] * secs
        if r.values:
            results[name.removesuffix("/real_time")] = r
    return results, data.get("context", {})


def classify(results):
    """Sorts results into tfk kernels, peers, FMA peaks, matmul register
    tiles and memory limits."""
    tfk = defaultdict(dict)    # kernel -> {(shape, threads): {isa: Result}}
    peers = defaultdict(dict)  # kernel -> {(shape, threads): {peer: Result}}
    peak = {}                  # (isa, threads) -> Result
    tiles = {}                 # (isa, threads) -> (tile name, Result)
    memory = defaultdict(dict)  # kind -> {(n, threads): Result}
    for name, r in results.items():
        for kind, pattern in PATTERNS:
            m = pattern.match(name)
            if not m:
                continue
            g = m.groupdict()
            t = int(g["t"])
            if kind == "peak":
                peak[(g["isa"], t)] = r
            elif kind == "tile":
                tiles[(g["isa"], t)] = (g["tile"], r)
            elif kind == "memory":
                memory[g["kind"]][(int(g["n"]), t)] = r
            elif kind == "tfk":
                kernel = g.get("kernel") or "matmul"
                tfk[kernel].setdefault((g["shape"], t), {})[g["isa"]] = r
            else:
                peer = g.get("peer") or "onednn"
                kernel = g.get("kernel") or "matmul"
                peers[kernel].setdefault((g["shape"], t), {})[PEER_NAMES[peer]] = r
            break
    return tfk, peers, peak, tiles, memory


def isa_key(isa):
    return ISA_ORDER.index(isa) if isa in ISA_ORDER else len(ISA_ORDER)


def shape_key(shape):
    """Shapes of one kind together ("decode_...", "prefill_..."), then by size."""
    return (re.sub(r"\d+", "", shape), [int(x) for x in re.findall(r"\d+", shape)])


# A limit measured on more than this many times the bytes, or fewer than
# 1 / this, is not the same size: no share is given.
MAX_SIZE_RATIO = 1.5


def closest_memory(memory, kind, nbytes, threads):
    """The `kind` bandwidth benchmark whose bytes moved are closest (log scale),
    or None if none is within MAX_SIZE_RATIO. Sizes equally far (within the
    rounding of bytes_per_second x time) go to the larger one, whatever the
    noise."""
    best = None
    for (n, t), r in memory.get(kind, {}).items():
        if t != threads or r.bytes is None:
            continue
        d = abs(math.log(max(r.bytes, 1) / max(nbytes, 1)))
        if d > math.log(MAX_SIZE_RATIO):
            continue
        key = (round(d, 3), -r.bytes)
        if best is None or key < best[0]:
            best = (key, r)
    return best[1] if best else None


# tfk's own GEMM, the yardstick of attention prefill (docs/attention.md).
GEMM_SHAPE = "M512_K4096_N4096"


def limit_for(kernel, shape, threads, isa, r, peak, memory, tfk=None):
    """(limit value, what it is) for the share-of-machine column, or None."""
    if kernel in ("attention", "block") and "decode" in shape and r.gbps:
        # Decoding reads the KV cache (attention) or the weights (block) once.
        lim = closest_memory(memory, "read", r.bytes or 0, threads)
        if lim:
            gbps = statistics.median(r.gbps)
            return gbps / lim.median, f"read bandwidth ({gbps:.3g} GB/s)"
        return None
    if kernel == "attention":
        gemm = (tfk or {}).get("matmul", {}).get((GEMM_SHAPE, threads), {}).get(isa)
        if gemm:
            return r.median / gemm.median, f"tfk matmul {GEMM_SHAPE}"
    if kernel in ("attention", "block"):
        p = peak.get((isa, threads))
        return (r.median / p.median, f"{isa} FMA peak") if p else None
    if kernel in ("matmul", "matmul_unpacked"):
        m = re.search(r"(?:^|_)M(\d+)_", shape)
        if m and int(m.group(1)) <= 8 and r.gbps:
            lim = closest_memory(memory, "read", r.bytes or 0, threads)
            if lim:
                return statistics.median(r.gbps) / lim.median, "read bandwidth"
        p = peak.get((isa, threads))
        return (r.median / p.median, f"{isa} FMA peak") if p else None
    if r.unit != "GB/s" or r.bytes is None:
        return None
    kind = "rmw" if kernel in IN_PLACE else "triad" if kernel in TWO_INPUTS else "copy"
    lim = closest_memory(memory, kind, r.bytes, threads)
    if lim is None:
        return None
    return r.median / lim.median, {"rmw": "read-modify-write"}.get(kind, kind) + " bandwidth"


def fmt(r):
    flag = " ⚠" if r.spread > SPREAD_LIMIT else ""
    return f"{r.median:.3g} ({r.lo:.3g}–{r.hi:.3g}){flag}"


def kernel_table(kernel, rows, peer_rows, peak, memory, tfk=None):
    isas = sorted({isa for by_isa in rows.values() for isa in by_isa}, key=isa_key)
    unit = next(iter(next(iter(rows.values())).values())).unit
    lines = [f"| shape | threads | " + " | ".join(isas) +
             " | dispatched ISA: share of limit | best peer | tfk / best peer |",
             "|---|---|" + "---|" * len(isas) + "---|---|---|"]
    for (shape, t) in sorted(rows, key=lambda k: (shape_key(k[0]), k[1])):
        by_isa = rows[(shape, t)]
        cells = [fmt(by_isa[i]) if i in by_isa else "" for i in isas]
        best_isa = min(by_isa, key=isa_key)  # the one tfk dispatches to
        best = by_isa[best_isa]
        lim = limit_for(kernel, shape, t, best_isa, best, peak, memory, tfk)
        share = f"{100 * lim[0]:.0f} % of {lim[1]} ({best_isa})" if lim else ""
        if lim and lim[0] > 1:
            share += ", above it"
        peers = peer_rows.get((shape, t), {})
        if peers:
            pname = max(peers, key=lambda p: peers[p].median)
            peer_cell = f"{pname} {fmt(peers[pname])}"
            ratio = f"{best.median / peers[pname].median:.2f}"
        else:
            peer_cell, ratio = "", ""
        lines.append(f"| {shape} | {t} | " + " | ".join(cells) + f" | {share} | {peer_cell} | {ratio} |")
    return unit, lines


def plot_kernel(kernel, rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(rows, key=lambda k: (shape_key(k[0]), k[1]))
    isas = sorted({isa for by_isa in rows.values() for isa in by_isa}, key=isa_key)
    unit = next(iter(rows[keys[0]].values())).unit
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys)), 3.6))
    width = 0.8 / max(len(isas), 1)
    for j, isa in enumerate(isas):
        xs = [i + j * width for i, k in enumerate(keys) if isa in rows[k]]
        ys = [rows[k][isa].median for k in keys if isa in rows[k]]
        err = [[rows[k][isa].median - rows[k][isa].lo for k in keys if isa in rows[k]],
               [rows[k][isa].hi - rows[k][isa].median for k in keys if isa in rows[k]]]
        ax.bar(xs, ys, width, yerr=err, label=isa, capsize=2)
    ax.set_xticks([i + width * (len(isas) - 1) / 2 for i in range(len(keys))])
    ax.set_xticklabels([f"{s}\n{t} thr" for s, t in keys], fontsize=7)
    ax.set_ylabel(unit)
    ax.set_title(f"tfk {kernel}: median and min-max per ISA")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_matmul(rows, peers, peak, path):
    """GFLOP/s against M per (K, N); False (nothing drawn) without M_K_N shapes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_kn = defaultdict(list)
    for (shape, t), by_isa in rows.items():
        m = re.match(r"M(\d+)_K(\d+)_N(\d+)$", shape)  # not the _L<layers> shapes
        if m:
            by_kn[(int(m.group(2)), int(m.group(3)), t)].append((int(m.group(1)), shape, by_isa))
    threads = sorted({t for (_, _, t) in by_kn})
    if not threads:
        return False
    fig, axes = plt.subplots(1, len(threads), figsize=(6 * len(threads), 4), squeeze=False)
    for ax, t in zip(axes[0], threads):
        for (k, n, tt), pts in sorted(by_kn.items()):
            if tt != t or len(pts) < 2:
                continue
            pts.sort()
            best = [p[2][min(p[2], key=isa_key)].median for p in pts]  # dispatched ISA
            ax.plot([p[0] for p in pts], best, marker="o", label=f"tfk K={k} N={n}")
            peer_best = []
            for p in pts:
                pr = peers.get((p[1], t), {})
                peer_best.append(max((r.median for r in pr.values()), default=float("nan")))
            if any(not math.isnan(v) for v in peer_best):
                ax.plot([p[0] for p in pts], peer_best, linestyle=":", marker=".",
                        label=f"best peer K={k} N={n}")
        for (isa, pt), r in peak.items():
            if pt == t:
                ax.axhline(r.median, linestyle="--", linewidth=1, color="gray")
                ax.text(1, r.median, f" {isa} FMA peak", fontsize=7, va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"matmul, {t} thread(s)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def limits_section(peak, tiles, memory):
    lines = ["| limit | threads | value |", "|---|---|---|"]
    for (isa, t), r in sorted(peak.items(), key=lambda kv: (isa_key(kv[0][0]), kv[0][1])):
        lines.append(f"| FMA peak {isa} | {t} | {fmt(r)} GFLOP/s |")
        if (isa, t) in tiles:
            tile, rt = tiles[(isa, t)]
            lines.append(f"| matmul register tile {isa} {tile}, operands in L2 | {t} | "
                         f"{fmt(rt)} GFLOP/s ({100 * rt.median / r.median:.0f} % of the FMA peak) |")
    for kind in sorted(memory):
        for (n, t), r in sorted(memory[kind].items()):
            size = f"{(r.bytes or 0) / 2**20:.0f} MiB moved" if r.bytes else f"{n} floats"
            way = f", {r.label}" if r.label else ""
            lines.append(f"| {kind} ({size}{way}) | {t} | {fmt(r)} GB/s |")
    return lines


def render(results, context, cpu, command, img_dir, img_rel):
    tfk, peers, peak, tiles, memory = classify(results)
    out = ["# tfk benchmarks", ""]
    model = cpu.get("model") or context.get("host_name", "unknown CPU")
    out.append(f"Produced on **{model}** "
               f"({context.get('num_cpus', cpu.get('cores', '?'))} CPUs, "
               f"{context.get('mhz_per_cpu', '?')} MHz) on {context.get('date', cpu.get('date', '?'))}, "
               f"with:")
    out += ["", "```sh", command or cpu.get("command", "(command not recorded)"), "```", ""]
    if context.get("tfk_supported_isas"):
        out.append(f"tfk {context.get('tfk_version', '')}: ISAs compiled "
                   f"{context.get('tfk_compiled_isas', '?')}, supported here "
                   f"{context['tfk_supported_isas']}.")
    if cpu.get("flags"):
        out.append(f"CPU flags of note: {cpu['flags']}.")
    caches = context.get("caches") or []
    if caches:
        out.append("Caches: " + ", ".join(
            f"L{c['level']} {c['type'].lower()} {c['size'] // 1024} KiB" for c in caches) + ".")
    if context.get("openblas_corename"):
        out.append(f"OpenBLAS kernel: {context['openblas_corename']}.")
    out += ["", "Each cell: median over repetitions (min–max); ⚠ marks a spread over "
            f"{SPREAD_LIMIT:.0%}. Shares of a limit use the limit measured in the same run; "
            "the peer ratio compares tfk on the ISA it dispatches to (the best the CPU "
            "supports) with the best peer at the same threads.", ""]
    out += ["## Machine limits", ""] + limits_section(peak, tiles, memory) + [""]
    os.makedirs(img_dir, exist_ok=True)
    for kernel in sorted(tfk, key=lambda k: KERNEL_ORDER.index(k) if k in KERNEL_ORDER else 99):
        rows = tfk[kernel]
        unit, table = kernel_table(kernel, rows, peers.get(kernel, {}), peak, memory, tfk)
        out += [f"## {kernel} ({unit})", ""] + table + [""]
        png = f"{kernel}.png"
        plot_kernel(kernel, rows, os.path.join(img_dir, png))
        out += [f"![{kernel}]({img_rel}/{png})", ""]
        if kernel == "matmul" and plot_matmul(rows, peers.get("matmul", {}), peak,
                                              os.path.join(img_dir, "matmul_vs_m.png")):
            out += [f"![matmul GFLOP/s against M]({img_rel}/matmul_vs_m.png)", ""]
    out += ["## Spread", ""] + spread_section(results)
    return "\n".join(out) + "\n"


SPREAD_SHOWN = 10


def spread_section(results):
    """How many figures have a spread over SPREAD_LIMIT (their cells carry ⚠)
    and a table of the widest SPREAD_SHOWN, widest first."""
    flagged = sorted((r.spread, n) for n, r in results.items() if r.spread > SPREAD_LIMIT)
    if not flagged:
        return [f"No figure has a spread over {SPREAD_LIMIT:.0%}."]
    widest = flagged[::-1][:SPREAD_SHOWN]
    out = [f"{len(flagged)} of {len(results)} figures have a spread (max − min over the median) "
           f"over {SPREAD_LIMIT:.0%}; their cells above carry ⚠. The widest "
           f"{len(widest)}:", "", "| benchmark | median (min–max) | spread |", "|---|---|---|"]
    for spread, name in widest:
        r = results[name]
        out.append(f"| `{name}` | {r.median:.3g} ({r.lo:.3g}–{r.hi:.3g}) {r.unit} | {spread:.0%} |")
    return out


# One line of tfk-ab (bench/tfk_ab.cc): its reference side (A: copy, peak or
# oneDNN) against tfk (B).
PAIRED_LINE = re.compile(
    r"^(?P<what>.+?), (?P<threads>\d+) threads?, (?P<rounds>\d+) rounds of \d+ calls: "
    r"A \((?P<ref>copy|peak|oneDNN)\) (?P<ref_rate>[0-9.e+-]+) (?P<unit>GB/s|GFLOP/s), "
    r"B (?P<rate>[0-9.e+-]+) (?:GB/s|GFLOP/s); B / A speedup: median (?P<median>[0-9.]+) "
    r"\(quartiles (?P<q1>[0-9.]+)-(?P<q3>[0-9.]+)\)$")


def paired_section(lines):
    """The tfk-ab lines as a table: tfk's rate over its reference's, the
    median and quartiles of per-round ratios (each round times both back to
    back), which a slow spell of the host hits on both sides. Lines that are
    not tfk-ab comparison lines are skipped."""
    out = ["Each row: tfk against a reference timed alternately in one process "
           "(`tfk-ab`, `bench/tfk_ab.cc`): the median of per-round ratios and their "
           "quartiles. `copy` is a copy of the same bytes with streaming stores, the "
           "limit of a kernel on inputs from memory; `peak` is the FMA loop of the FMA "
           "peak doing the same flops on the same threads and ISA, the limit of a "
           "compute-bound matmul; oneDNN is the peer's primitive (its weights packed once "
           "for linear).", "",
           "| kernel and shape | threads | reference | reference rate | tfk rate | "
           "tfk / reference (quartiles) |", "|---|---|---|---|---|---|"]
    rows = 0
    for line in lines:
        m = PAIRED_LINE.match(line.strip())
        if not m:
            continue
        rows += 1
        out.append(f"| {m['what']} | {m['threads']} | {m['ref']} | {m['ref_rate']} {m['unit']} | "
                   f"{m['rate']} {m['unit']} | {float(m['median']):.2f} "
                   f"({float(m['q1']):.2f}–{float(m['q3']):.2f}) |")
    return out if rows else []


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json")
    ap.add_argument("--cpu", help="CPU description JSON written by bench/run.sh")
    ap.add_argument("--command", help="the command that produced the JSON")
    ap.add_argument("--out", required=True, help="Markdown report to write")
    ap.add_argument("--img", help="folder for the PNG plots (default: img/ beside --out)")
    ap.add_argument("--paired", help="tfk-ab output lines (bench/run.sh) for a section of "
                    "paired ratios")
    args = ap.parse_args(argv)
    results, context = load(args.bench_json)
    if not results:
        print(f"report.py: no benchmarks in {args.bench_json}", file=sys.stderr)
        return 1
    cpu = {}
    if args.cpu:
        with open(args.cpu) as f:
            cpu = json.load(f)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    img_dir = args.img or os.path.join(out_dir, "img")
    img_rel = os.path.relpath(img_dir, out_dir)
    text = render(results, context, cpu, args.command, img_dir, img_rel)
    if args.paired:
        with open(args.paired) as f:
            paired = paired_section(f.read().splitlines())
        if paired:
            text += "\n## Paired with a limit or a peer\n\n" + "\n".join(paired) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(f"report.py: wrote {args.out} and plots in {img_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
