#!/usr/bin/env python3
"""Tests bench/report.py on a small recorded tfk_bench JSON (tests/data)."""
import copy
import json
import os
import re
import statistics
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import report  # noqa: E402

SAMPLE = os.path.join(HERE, "data", "bench_sample.json")


def medians(data, name, key, scale):
    vals = [b[key] / scale for b in data["benchmarks"]
            if b["run_name"] == name and b.get("run_type") != "aggregate"]
    return statistics.median(vals)


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        with open(SAMPLE) as f:
            self.data = json.load(f)

    def tearDown(self):
        self.tmp.cleanup()

    def run_report(self, data):
        path = os.path.join(self.tmp.name, "bench.json")
        with open(path, "w") as f:
            json.dump(data, f)
        out = os.path.join(self.tmp.name, "report.md")
        self.assertEqual(report.main([path, "--command", "bench/run.sh --short", "--out", out]), 0)
        with open(out) as f:
            return f.read()

    def row(self, text, section, first_cells):
        """The table row of `section` that starts with the given cells."""
        part = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
        prefix = "| " + " | ".join(first_cells) + " |"
        rows = [line for line in part.splitlines() if line.startswith(prefix)]
        self.assertEqual(len(rows), 1, f"{prefix} in {section}")
        return rows[0]

    def test_tables_and_plots(self):
        text = self.run_report(self.data)
        for heading in ("## Machine limits", "## matmul (GFLOP/s)", "## softmax (GB/s)", "## Spread"):
            self.assertIn(heading, text)
        self.assertIn("bench/run.sh --short", text)  # the command is recorded
        self.assertIn("recorded-sample", text)        # and the machine
        for png in ("matmul.png", "matmul_vs_m.png", "softmax.png"):
            path = os.path.join(self.tmp.name, "img", png)
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)
            self.assertIn(f"](img/{png})", text)
        # Both ISAs of the sample are columns of the softmax table.
        self.assertIn("| shape | threads | AVX2 | SSE4 |", text)

    def test_matmul_of_layer_shapes_only(self):
        # Only M_K_N_L<layers> shapes (a filtered run): no plot against M,
        # and no reference to one.
        data = copy.deepcopy(self.data)
        for b in data["benchmarks"]:
            for key in ("name", "run_name"):
                if b.get(key, "").startswith("matmul/"):
                    b[key] = re.sub(r"(M\d+_K\d+_N\d+)(?!_L)", r"\1_L4", b[key])
        text = self.run_report(data)
        self.assertIn("## matmul (GFLOP/s)", text)
        self.assertIn("_L4", text)
        self.assertNotIn("matmul_vs_m.png", text)

    def test_ratio_to_best_peer_and_share_of_limits(self):
        text = self.run_report(self.data)
        sm = medians(self.data, "softmax/64x2048/AVX2/threads:1/real_time", "bytes_per_second", 1e9)
        peer = medians(self.data, "onednn/softmax/64x2048/threads:1/real_time", "bytes_per_second", 1e9)
        row = self.row(text, "softmax", ["64x2048", "1"])
        self.assertTrue(row.endswith(f"| {sm / peer:.2f} |"), row)

        mm = medians(self.data, "matmul/tfk_linear/M64_K1024_N1024/AVX2/threads:2/real_time", "GFLOPS", 1e9)
        peak = medians(self.data, "peak/fma/AVX2/threads:2/real_time", "GFLOPS", 1e9)
        ob = medians(self.data, "matmul/openblas/M64_K1024_N1024/threads:2/real_time", "GFLOPS", 1e9)
        od = medians(self.data, "matmul/onednn_packed/M64_K1024_N1024/threads:2/real_time", "GFLOPS", 1e9)
        row = self.row(text, "matmul", ["M64_K1024_N1024", "2"])
        self.assertIn(f"| {100 * mm / peak:.0f} % of AVX2 FMA peak (AVX2) |", row)
        self.assertTrue(row.endswith(f"| {mm / max(ob, od):.2f} |"), row)

    def test_attention_shares(self):
        """Attention prefill is read against tfk's own GEMM, decoding against
        the read bandwidth (entries made from the sample's by renaming)."""
        data = copy.deepcopy(self.data)
        extra = []
        for b in data["benchmarks"]:
            name = b["run_name"]
            if name == "matmul/tfk_linear/M64_K1024_N1024/AVX2/threads:1/real_time":
                gemm = dict(b, run_name=name.replace("M64_K1024_N1024", "M512_K4096_N4096"))
                gemm["name"] = gemm["run_name"]
                prefill = dict(b, run_name="attention/prefill_causal_L512_H32x32_D128/AVX2/"
                               "threads:1/real_time", GFLOPS=b["GFLOPS"] * 0.75)
                prefill["name"] = prefill["run_name"]
                extra += [gemm, prefill]
            if name == "matmul/tfk_linear/M1_K1024_N1024/AVX2/threads:1/real_time":
                dec = dict(b, run_name="attention/decode_f32_L2048_H32x32_D128/AVX2/"
                           "threads:1/real_time")
                dec["name"] = dec["run_name"]
                extra.append(dec)
        data["benchmarks"] += extra
        text = self.run_report(data)
        self.assertIn("## attention (GFLOP/s)", text)
        row = self.row(text, "attention", ["prefill_causal_L512_H32x32_D128", "1"])
        self.assertIn("| 75 % of tfk matmul M512_K4096_N4096 (AVX2) |", row)
        gbps = medians(self.data, "matmul/tfk_linear/M1_K1024_N1024/AVX2/threads:1/real_time",
                       "bytes_per_second", 1e9)
        read = medians(self.data, "memory/read/1048576/threads:1/real_time", "bytes_per_second", 1e9)
        row = self.row(text, "attention", ["decode_f32_L2048_H32x32_D128", "1"])
        self.assertIn(f"| {100 * gbps / read:.0f} % of read bandwidth ({gbps:.3g} GB/s) (AVX2)",
                      row)

    def test_register_tile_beside_the_peak(self):
        """A peak/tile entry (made from the sample's AVX2 peak at 80 % of its
        rate) is listed with the machine limits as a share of that peak."""
        data = copy.deepcopy(self.data)
        extra = []
        for b in data["benchmarks"]:
            if b["run_name"] == "peak/fma/AVX2/threads:2/real_time":
                tile = dict(b, run_name="peak/tile/AVX2/mr3_nr32/threads:2/real_time",
                            GFLOPS=b["GFLOPS"] * 0.8)
                tile["name"] = tile["run_name"]
                extra.append(tile)
        self.assertTrue(extra)
        data["benchmarks"] += extra
        text = self.run_report(data)
        peak = medians(self.data, "peak/fma/AVX2/threads:2/real_time", "GFLOPS", 1)
        row = self.row(text, "Machine limits", ["matmul register tile AVX2 mr3_nr32, operands in L2", "2"])
        self.assertIn(f"| {0.8 * peak:.3g} (", row)
        self.assertTrue(row.endswith("(80 % of the FMA peak) |"), row)
        # No tile entry, no tile row; the matmul tables do not take it as a kernel.
        self.assertNotIn("register tile", self.run_report(self.data))
        self.assertNotIn("mr3_nr32", text.split("## Machine limits", 1)[1].split("\n## ", 1)[1])

    def test_spread_over_ten_percent_is_flagged(self):
        text = self.run_report(self.data)
        self.assertNotIn("⚠", self.row(text, "softmax", ["64x2048", "1"]).split("|")[3])
        data = copy.deepcopy(self.data)
        for b in data["benchmarks"]:
            if (b["run_name"] == "softmax/64x2048/AVX2/threads:1/real_time"
                    and b.get("run_type") != "aggregate"):
                b["bytes_per_second"] *= 1.5  # one slow-down... the first repetition only
                break
        text = self.run_report(data)
        self.assertIn("⚠", self.row(text, "softmax", ["64x2048", "1"]).split("|")[3])
        self.assertIn("`softmax/64x2048/AVX2/threads:1`", text.split("## Spread", 1)[1])

    def test_spread_section_lists_the_widest(self):
        results = {}
        for i in range(15):
            r = report.Result("GB/s")
            r.values = [10.0, 10.0 + i, 10.0]  # spread i / 10: flagged from i = 2
            results[f"k/{i}"] = r
        lines = report.spread_section(results)
        self.assertTrue(lines[0].startswith("13 of 15 figures have a spread"), lines[0])
        rows = [l for l in lines if l.startswith("| `")]
        self.assertEqual(len(rows), report.SPREAD_SHOWN)
        self.assertTrue(rows[0].startswith("| `k/14` | 10 (10–24) GB/s | 140% |"), rows[0])
        self.assertTrue(rows[-1].startswith("| `k/5` |"), rows[-1])
        calm = {"k/0": results["k/0"]}
        self.assertEqual(report.spread_section(calm), ["No figure has a spread over 10%."])

    def test_memory_limit_of_the_same_size(self):
        """The limit is the bandwidth benchmark of the nearest size; equally far
        sizes go to the larger whatever the rounding of bytes, and none more
        than 1.5x away is taken."""
        def res(nbytes, gbps, label=""):
            r = report.Result("GB/s")
            r.values, r.bytes, r.label = [gbps], nbytes, label
            return r
        mib = 2**20
        for noise in (1 - 1e-9, 1.0, 1 + 1e-9):
            memory = {"read": {(25, 1): res(100 * mib * noise, 30.0),
                               (36, 1): res(144 * mib / noise, 15.0),
                               (30, 2): res(120 * mib, 40.0)}}
            self.assertEqual(report.closest_memory(memory, "read", 120 * mib, 1).median, 15.0)
        self.assertEqual(report.closest_memory(memory, "read", 110 * mib, 1).median, 30.0)
        self.assertIsNone(report.closest_memory(memory, "read", 250 * mib, 1))
        self.assertIsNone(report.closest_memory(memory, "read", 60 * mib, 1))
        self.assertIsNone(report.closest_memory(memory, "copy", 64 * mib, 1))

    def test_share_above_the_limit_and_the_limits_way(self):
        """softmax [64, 2048] moves 1 MiB: read against a copy of 1 MiB (made
        from the sample's 2 MiB copies), not the 2 MiB one; a kernel faster
        than its limit says so; the limits table names the way each
        bandwidth benchmark ran (its label)."""
        text = self.run_report(self.data)
        self.assertNotIn("% of copy", self.row(text, "softmax", ["64x2048", "1"]))
        sm = medians(self.data, "softmax/64x2048/AVX2/threads:1/real_time", "bytes_per_second", 1e9)
        for factor, above in ((0.5, False), (2.0, True)):
            data = copy.deepcopy(self.data)
            extra = []
            for b in data["benchmarks"]:
                if b["run_name"] == "memory/copy/262144/threads:1/real_time":
                    bps = sm * 1e9 / factor  # 1 MiB in the time this rate takes
                    secs = 2**20 / bps / report.TIME_UNITS[b.get("time_unit", "ns")]
                    c = dict(b, run_name="memory/copy/131072/threads:1/real_time",
                             real_time=secs, label="streaming stores", bytes_per_second=bps)
                    c["name"] = c["run_name"]
                    extra.append(c)
            self.assertTrue(extra)
            data["benchmarks"] += extra
            text = self.run_report(data)
            self.assertIn("| copy (1 MiB moved, streaming stores) | 1 |",
                          text.split("## Machine limits", 1)[1])
            share = self.row(text, "softmax", ["64x2048", "1"]).split("|")[-4]
            self.assertIn(f"{100 * factor:.0f} % of copy bandwidth", share)
            self.assertEqual("above it" in share, above, share)

    def test_add_is_read_against_the_triad(self):
        """The add (two reads and a write) is read against the triad of the
        same bytes, never against a copy: made here from the sample's
        softmax [64, 2048] (1 MiB) and its 2 MiB copies renamed."""
        data = copy.deepcopy(self.data)
        extra = []
        for b in data["benchmarks"]:
            for old, new in (("softmax/64x2048/", "add/87381/"),
                             ("memory/copy/262144/", "memory/triad/87381/")):
                if b["run_name"].startswith(old):
                    c = dict(b, run_name=b["run_name"].replace(old, new))
                    c["name"] = c["run_name"]
                    if new.startswith("memory"):  # 1 MiB in the time of 1.25 MiB
                        c["real_time"] = b["real_time"] * 0.625
                        c["bytes_per_second"] = b["bytes_per_second"] * 0.8
                    extra.append(c)
        data["benchmarks"] += extra
        text = self.run_report(data)
        add = medians(data, "add/87381/AVX2/threads:1/real_time", "bytes_per_second", 1e9)
        triad = medians(data, "memory/triad/87381/threads:1/real_time", "bytes_per_second", 1e9)
        share = self.row(text, "add", ["87381", "1"]).split("|")[-4]
        self.assertIn(f"{100 * add / triad:.0f} % of triad bandwidth", share)
        self.assertIn("| triad (", text.split("## Machine limits", 1)[1])

    def test_empty_input_is_an_error(self):
        path = os.path.join(self.tmp.name, "empty.json")
        with open(path, "w") as f:
            json.dump({"context": {}, "benchmarks": []}, f)
        self.assertEqual(report.main([path, "--out", os.path.join(self.tmp.name, "r.md")]), 1)

    def test_paired_section_from_tfk_ab_lines(self):
        # Three comparison lines of tfk-ab (the reference as A, tfk as B),
        # one of them over layers, and lines that are not comparisons.
        lines = [
            "gelu_erf 16777216, 1 thread, 21 rounds of 7 calls: A (copy) 19.2 GB/s, B 17 GB/s; "
            "B / A speedup: median 0.843 (quartiles 0.835-0.892)",
            "tfk-ab: onednn: tfk-ab was built without oneDNN (libdnnl-dev)",
            "linear 8 4096 4096 (4 layers), 2 threads, 21 rounds of 13 calls: A (oneDNN) 60.3 "
            "GFLOP/s, B 74.6 GFLOP/s; B / A speedup: median 1.239 (quartiles 1.205-1.279)",
            "linear 512 4096 4096, 1 thread, 21 rounds of 1 calls: A (peak) 167 GFLOP/s, B 120 "
            "GFLOP/s; B / A speedup: median 0.729 (quartiles 0.726-0.761)",
            "relu 100, 1 thread, 3 rounds of 9 calls: A 1 GB/s, B 1 GB/s; B / A speedup: "
            "median 1.000 (quartiles 1.000-1.000)",  # two builds: no reference
        ]
        paired = os.path.join(self.tmp.name, "paired.txt")
        with open(paired, "w") as f:
            f.write("\n".join(lines) + "\n")
        path = os.path.join(self.tmp.name, "bench.json")
        with open(path, "w") as f:
            json.dump(self.data, f)
        out = os.path.join(self.tmp.name, "report.md")
        self.assertEqual(report.main([path, "--paired", paired, "--out", out]), 0)
        with open(out) as f:
            text = f.read()
        section = "Paired with a limit or a peer"
        self.assertEqual(self.row(text, section, ["gelu_erf 16777216", "1", "copy"]),
                         "| gelu_erf 16777216 | 1 | copy | 19.2 GB/s | 17 GB/s | 0.84 (0.83–0.89) |")
        self.assertEqual(
            self.row(text, section, ["linear 8 4096 4096 (4 layers)", "2", "oneDNN"]),
            "| linear 8 4096 4096 (4 layers) | 2 | oneDNN | 60.3 GFLOP/s | 74.6 GFLOP/s | "
            "1.24 (1.21–1.28) |")
        self.assertEqual(
            self.row(text, section, ["linear 512 4096 4096", "1", "peak"]),
            "| linear 512 4096 4096 | 1 | peak | 167 GFLOP/s | 120 GFLOP/s | 0.73 (0.73–0.76) |")
        part = text.split(f"## {section}", 1)[1]
        self.assertEqual(len([x for x in part.splitlines() if x.startswith("| ") and
                              not x.startswith("| kernel")]), 3)
        # Without comparison lines there is no section.
        with open(paired, "w") as f:
            f.write(lines[1] + "\n")
        self.assertEqual(report.main([path, "--paired", paired, "--out", out]), 0)
        with open(out) as f:
            self.assertNotIn(section, f.read())


if __name__ == "__main__":
    unittest.main()
