#!/usr/bin/env python3
"""Turns one `benches/compare.sh` run into a report: `report.md` (every
workload of both systems with req/s, avg/p50/p99 latency, server CPU and
the ratios against etcd) and PNG charts drawn with matplotlib (throughput
and operations per server CPU-second per workload, and each workload's
latency distribution from etcd's benchmark tool's percentiles).

    benches/report.py RUN_DIR OUT_DIR

RUN_DIR is compare.sh's OUT_DIR: its `compare.txt` (compare.sh's standard
output) and the benchmark tool's raw output in `etcd-raw/rN/` and
`wasmraft-etcd-tool-raw/rN/` for each round N. Each figure of etcd's tool is
the median over the rounds; each ratio is the median of the rounds' own
ratios (both systems measured in the same round), with their range.
"""

import re
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# etcd-bench.sh's columns after the workload name.
COLUMNS = ["conns", "clients", "total", "errors", "req_s", "avg", "p50", "p99", "cpu", "ops_cpu"]
NAMES = {
    "a:put-1c-leader": "put 1/1 (leader)",
    "b:put": "put 200/1000",
    "c:get-linearizable": "get linearizable",
    "d:get-serializable": "get serializable",
    "e:hot10-range-lin": "hot keys (10-key range)",
    "f:txn-put": "txn-put 200/1000",
}

BENCH_NAMES = {
    "put-1": "put 1/1 (leader)",
    "put": "put 200/1000",
    "range-l": "get linearizable",
    "range-s": "get, leader lease",
    "range-e": "get eventual (this node's state)",
    "range-l-leader": "get linearizable, at the leader",
    "range-s-leader": "get, leader lease, at the leader",
}


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def tool_rounds(lines, system):
    """The benchmark tool's rows that compare.sh echoed as `# SYSTEM raw rN: `,
    by round and workload."""
    rounds = {}
    pattern = re.compile(r"^# " + re.escape(system) + r" raw r(\d+): (.*)$")
    for line in lines:
        m = pattern.match(line)
        if not m:
            continue
        fields = m.group(2).split()
        if not fields or fields[0].startswith("#") or fields[0] == "workload" or fields[0].startswith("idle"):
            continue
        rounds.setdefault(int(m.group(1)), {})[fields[0]] = {k: number(v) for k, v in zip(COLUMNS, fields[1:])}
    return rounds


def median_row(rows):
    """Each column's median over the rounds' rows of one workload."""
    return {k: statistics.median(v) if (v := [r[k] for r in rows if r.get(k) is not None]) else None
            for k in COLUMNS}


def paired_ratio(ours, etcd, key):
    """The median and range of the rounds' own ratios, as text."""
    ratios = sorted(o[key] / e[key] for o, e in zip(ours, etcd) if o.get(key) and e.get(key))
    if not ratios:
        return "n/a"
    text = f"{statistics.median(ratios):.2f}x"
    if len(ratios) > 1:
        text += f" ({ratios[0]:.2f}-{ratios[-1]:.2f})"
    return text


def bench_rows(lines):
    """wasmraft-bench's rows (`wasmraft | name | conns/clients | ...`)."""
    rows = {}
    for line in lines:
        if not line.startswith("wasmraft | "):
            continue
        f = [x.strip() for x in line.split("|")]
        rows[f[1]] = {"cc": f[2], "total": f[3], "req_s": number(f[4]), "avg": number(f[5]), "p50": number(f[6]),
                      "p99": number(f[7]), "cpu": number(f[8]), "ops_cpu": number(f[9])}
    return rows


def distribution(path):
    """The latency percentiles (percent, ms) in one raw benchmark output."""
    if not path.exists():
        return []
    return [(float(p), float(s) * 1000) for p, s in re.findall(r"([\d.]+)% in ([\d.]+) secs", path.read_text())]


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def fmt(v, digits=0):
    return "n/a" if v is None else f"{v:,.{digits}f}"


def main():
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    lines = (run / "compare.txt").read_text().splitlines()
    etcd_rounds = tool_rounds(lines, "etcd")
    our_rounds = tool_rounds(lines, "wasmraft (etcd tool)")
    rounds = sorted(set(etcd_rounds) & set(our_rounds))
    bench = bench_rows(lines)
    header = [l[2:] for l in lines if l.startswith("# machine:")]
    workloads = [w for w in NAMES if all(w in etcd_rounds[r] and w in our_rounds[r] for r in rounds)] if rounds else []
    # Per workload: each round's row of each system (paired by round), and their medians.
    etcd_by = {w: [etcd_rounds[r][w] for r in rounds] for w in workloads}
    ours_by = {w: [our_rounds[r][w] for r in rounds] for w in workloads}
    etcd = {w: median_row(etcd_by[w]) for w in workloads}
    ours = {w: median_row(ours_by[w]) for w in workloads}
    last = rounds[-1] if rounds else 1

    md = ["# Wasmraft against etcd", ""]
    md += [f"{h}. Both clusters: 3 members on loopback, fsync before every acknowledgement, "
           "8-byte keys and 256-byte values, driven by etcd's own benchmark tool through etcd's API "
           "(`benches/compare.sh`, `benches/report.py`). "
           f"{len(rounds)} rounds, each on fresh clusters of both systems in alternating order: every figure is "
           "the median over the rounds, and every ratio the median of the rounds' own Wasmraft / etcd ratios "
           "(their range in brackets). Server CPU is the three members' user+system seconds." for h in header] + [""]
    md += ["| workload | conns/clients | etcd req/s | Wasmraft req/s | ratio | etcd avg / p50 / p99 ms | "
           "Wasmraft avg / p50 / p99 ms | etcd ops per server CPU-s | Wasmraft | ratio |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for w in workloads:
        e, o = etcd[w], ours[w]
        req_ratio = paired_ratio(ours_by[w], etcd_by[w], "req_s")
        cpu_ratio = paired_ratio(ours_by[w], etcd_by[w], "ops_cpu")
        md.append(
            f"| {NAMES[w]} | {fmt(e['conns'])}/{fmt(e['clients'])} | {fmt(e['req_s'])} | {fmt(o['req_s'])} | "
            f"{req_ratio} | {fmt(e['avg'], 2)} / {fmt(e['p50'], 2)} / {fmt(e['p99'], 2)} | "
            f"{fmt(o['avg'], 2)} / {fmt(o['p50'], 2)} / {fmt(o['p99'], 2)} | {fmt(e['ops_cpu'])} | "
            f"{fmt(o['ops_cpu'])} | {cpu_ratio} |")
    if bench:
        md += ["", "Wasmraft through its own `wasmraft.v1` API (`wasmraft-bench`), once, after the last round:", "",
               "| workload | conns/clients | total | req/s | avg / p50 / p99 ms | ops per server CPU-s |",
               "| --- | --- | --- | --- | --- | --- |"]
        for name, r in bench.items():
            md.append(f"| {BENCH_NAMES.get(name, name)} | {r['cc']} | {r['total']} | {fmt(r['req_s'])} | "
                      f"{fmt(r['avg'], 2)} / {fmt(r['p50'], 2)} / {fmt(r['p99'], 2)} | {fmt(r['ops_cpu'])} |")
        lease, lin = bench.get("range-s"), bench.get("range-l")
        lease_at, lin_at = bench.get("range-s-leader"), bench.get("range-l-leader")
        if lease and lin:
            line = (f"Lease reads against our linearizable reads: {ratio(lease['req_s'], lin['req_s'])} req/s "
                    "over all three members (a follower serves a lease read as a linearizable one)")
            if lease_at and lin_at:
                line += (f", {ratio(lease_at['req_s'], lin_at['req_s'])} req/s and "
                         f"{ratio(lease_at['ops_cpu'], lin_at['ops_cpu'])} per server CPU-s at the leader")
            md += ["", line + "."]

    # Throughput and CPU efficiency, side by side per workload.
    labels = [NAMES[w] for w in workloads]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, key, title in [(axes[0], "req_s", "requests per second"), (axes[1], "ops_cpu", "operations per server CPU-second")]:
        xs = range(len(workloads))
        ax.bar([x - 0.2 for x in xs], [etcd[w][key] or 0 for w in workloads], 0.4, label="etcd 3.6.8", color="#8c8c8c")
        ax.bar([x + 0.2 for x in xs], [ours[w][key] or 0 for w in workloads], 0.4, label="Wasmraft", color="#2b6cb0")
        ax.set_xticks(list(xs), labels, rotation=20, ha="right")
        ax.set_title(title)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)

    # Latency distribution per workload, from the tool's percentiles (the last round's).
    fig, axes = plt.subplots(1, len(workloads), figsize=(3.4 * max(len(workloads), 1), 3.8), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        for name, raw, color in [("etcd 3.6.8", "etcd-raw", "#8c8c8c"), ("Wasmraft", "wasmraft-etcd-tool-raw", "#2b6cb0")]:
            points = distribution(run / raw / f"r{last}" / f"{w}.out")
            if points:
                ax.plot([p for p, _ in points], [ms for _, ms in points], marker="o", markersize=3, label=name, color=color)
        ax.set_title(NAMES[w], fontsize=9)
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency, ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)

    md += ["", "![Throughput and CPU efficiency](throughput.png)", "", "![Latency distribution](latency.png)", ""]
    (out / "report.md").write_text("\n".join(md))
    print(f"report: {out / 'report.md'}")


if __name__ == "__main__":
    main()
