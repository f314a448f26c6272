"""Draw the scale curves of docs/performance.md from the benchmarks' JSON (matplotlib).

    .venv/bin/python benchmarks/plots.py [--scale build/bench/scale.json] [--storm build/bench/storm.json]

Writes ``docs/img/scale.png`` (server cost per request against the number of nodes, log-log)
and ``docs/img/storm.png`` (req/s and p99 of node-config-server against nginx per case). A file
that is missing is skipped with a message; matplotlib comes with the ``bench`` extra.
"""

import argparse
import json
import os
import sys
from typing import Any, Dict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMG = os.path.join(REPO, "docs", "img")


def plot_scale(doc: Dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for case, by_size in doc["cases"].items():
        sizes = sorted(int(n) for n in by_size)
        med = [by_size[str(n)]["median_s"] * 1e3 for n in sizes]
        lo = [by_size[str(n)]["min_s"] * 1e3 for n in sizes]
        hi = [by_size[str(n)]["p99_s"] * 1e3 for n in sizes]
        line, = ax.plot(sizes, med, marker="o", label=case)
        ax.fill_between(sizes, lo, hi, color=line.get_color(), alpha=0.12)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes in the store")
    ax.set_ylabel("server time per request (ms)")
    ax.set_title("node-config-server cost per request vs fleet size\n(median; band: min to p99)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_storm(doc: Dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["cases"])
    rps = [doc["cases"][n]["rps"] for n in names]
    p99 = [doc["cases"][n]["p99_s"] for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.5), dpi=110)
    ys = range(len(names))
    for ax, series, scale, label in ((a, rps, 1, "requests/s"), (b, p99, 1e3, "p99 latency (ms)")):
        med = [s["median"] * scale for s in series]
        err = [[(s["median"] - s["min"]) * scale for s in series], [(s["max"] - s["median"]) * scale for s in series]]
        colors = ["tab:gray" if n.startswith("nginx") else "tab:orange" if "trivial" in n else "tab:blue"
                  for n in names]
        ax.barh(list(ys), med, xerr=err, color=colors)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(names if ax is a else [""] * len(names), fontsize=8)
        ax.set_xlabel(label + " (median, min-max)")
        ax.invert_yaxis()
    s = doc["setup"]
    fig.suptitle(f"config storm: {s['connections']} connections (wrk), {s['body_bytes'] // 1024} KiB body, "
                 f"{s['rounds']} interleaved rounds, {s['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default=os.path.join(REPO, "build", "bench", "scale.json"))
    ap.add_argument("--storm", default=os.path.join(REPO, "build", "bench", "storm.json"))
    args = ap.parse_args()
    os.makedirs(IMG, exist_ok=True)
    for path, draw, name in ((args.scale, plot_scale, "scale.png"), (args.storm, plot_storm, "storm.png")):
        if not os.path.exists(path):
            print(f"{path} not found: run the benchmark first (make bench)", file=sys.stderr)
            continue
        with open(path) as f:
            draw(json.load(f), os.path.join(IMG, name))
        print(f"wrote {os.path.relpath(os.path.join(IMG, name), REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
