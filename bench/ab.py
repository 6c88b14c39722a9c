#!/usr/bin/env python3
"""Two troupe binaries against each other: `troupe bench` alternated A B A B, medians, ratios.

    bench/ab.py A_BINARY B_BINARY [--rounds 4] [--latency-messages 2000] [--messages 4000] [--rooms 200]

For build-profile changes (docs/deploy.md) and any before/after on one machine: the same
benchmark, the same sizes, one binary then the other, so drift on a shared machine lands on
both. The ratio is B / A for times and memory, and A / B for throughput: above 1 means B is
worse.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import troupe_bench, fmt  # noqa: E402

FIGURES = [("p50", "ms"), ("p90", "ms"), ("p99", "ms"), ("tput", "msg/s"), ("tput_p99", "ms"),
           ("cpu", "ms/msg"), ("csw", "/msg"), ("cpu_many", "ms/msg"), ("csw_many", "/msg"), ("rss", "MiB")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--latency-messages", type=int, default=2000)
    p.add_argument("--messages", type=int, default=4000)
    p.add_argument("--rooms", type=int, default=200)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    runs = {"A": [], "B": []}
    for r in range(args.rounds):
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            args.troupe_bin = os.path.abspath(args.a if name == "A" else args.b)
            fig = troupe_bench(args)
            runs[name].append(fig)
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {fmt(v, u)}" for (k, u), v in
                                                       zip(FIGURES, (fig[k] for k, _ in FIGURES))),
                  file=sys.stderr, flush=True)
    print(f"A = {args.a}\nB = {args.b}\n{args.rounds} rounds alternated (ABBA…), medians; "
          f"troupe bench --latency-messages {args.latency_messages} --messages {args.messages} --rooms {args.rooms}")
    print("| measure | A | B | B vs A |\n|---|---|---|---|")
    for key, unit in FIGURES:
        a = statistics.median(f[key] for f in runs["A"])
        b = statistics.median(f[key] for f in runs["B"])
        ratio = a / b if unit == "msg/s" else b / a
        print(f"| {key} ({unit}) | {fmt(a, unit)} | {fmt(b, unit)} | {ratio:.2f}× |")


if __name__ == "__main__":
    main()
