#!/usr/bin/env python3
"""Side-by-side driver: troupe against elizaOS 1.7.2 on this machine, in alternation.

Each round runs, one after the other, `troupe bench` (the release binary given by TROUPE_BIN),
elizaOS core and elizaOS with plugin-bootstrap (bench/eliza/bench.ts under bun), with the same
phases and sizes; odd rounds run them in the reverse order, so drift on a shared machine is
spread over all three. Each round also times start to ready for both: `troupe run` on a fresh
SQLite file until `GET /readyz` answers 200, and the elizaOS script until its runtime is
initialized. Peak RSS is the kernel's high-water mark of each process (wait4's ru_maxrss), the
same measure for both sides. It prints every round's figures, then the medians and the ratios.

Only the ratios mean much: absolute times on these machines move 2-3x from day to day.
Usage: see bench/README.md (bench/compare.sh sets things up and calls this).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ELIZA_DIR = os.path.join(HERE, "eliza")
BUN = os.path.join(ELIZA_DIR, "node_modules", ".bin", "bun")

# The persona troupe bench loads (gateway/src/bench/mod.rs), for `troupe run`'s start.
PERSONA = {
    "name": "Bench",
    "bio": ["Bench answers at once, for measuring the gateway."],
    "lore": ["Bench was made to measure."],
    "style": {"all": ["be brief"], "chat": ["answer directly"]},
    "messageExamples": [
        [
            {"user": "{{user1}}", "content": {"text": "hi"}},
            {"user": "Bench", "content": {"text": "hello"}},
        ]
    ],
    "topics": ["latency"],
    "adjectives": ["fast"],
    "clients": [],
}

FIGURES = [
    # key, label, unit, which way is better
    ("p50", "latency p50, one room", "ms", "lower"),
    ("p90", "latency p90, one room", "ms", "lower"),
    ("p99", "latency p99, one room", "ms", "lower"),
    ("tput", "throughput, {rooms} rooms at once", "msg/s", "higher"),
    ("tput_p99", "p99 under that load", "ms", "lower"),
    ("cpu", "CPU per message, one room", "ms/msg", "lower"),
    ("csw", "context switches per message, one room", "/msg", "lower"),
    ("cpu_many", "CPU per message, {rooms} rooms at once", "ms/msg", "lower"),
    ("csw_many", "context switches per message, {rooms} rooms", "/msg", "lower"),
    ("rss", "peak RSS (bench run)", "MiB", "lower"),
    ("ready", "start to ready", "ms", "lower"),
    ("ready_rss", "RSS when ready", "MiB", "lower"),
]


def run_measured(cmd, env, cwd=None, ready_marker=None, timeout=3600):
    """Runs cmd; returns (stdout, stderr, peak RSS in MiB, seconds to ready_marker or None)."""
    started = time.perf_counter()
    out_f = tempfile.TemporaryFile()
    err_f = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=err_f)
    ready_s = None
    # Read stdout line by line, so the moment the READY line arrives is seen on our clock.
    for line in proc.stdout:
        if ready_marker and ready_s is None and line.strip() == ready_marker:
            ready_s = time.perf_counter() - started
        out_f.write(line)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out_f.seek(0)
    err_f.seek(0)
    out = out_f.read().decode(errors="replace")
    err = err_f.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    return out, err, usage.ru_maxrss / 1024.0, ready_s


def troupe_bench(args):
    cmd = [
        args.troupe_bin, "bench",
        "--latency-messages", str(args.latency_messages),
        "--messages", str(args.messages),
        "--rooms", str(args.rooms),
        "--warmup", str(args.warmup),
    ]
    env = dict(os.environ)
    env.pop("TROUPE_LOG", None)
    out, _, peak, _ = run_measured(cmd, env)
    num = r"([0-9.]+)"
    lat = re.search(rf"latency, one room\s+p50 {num} ms\s+p90 {num} ms\s+p99 {num} ms", out)
    tput = re.search(rf"throughput, \d+ rooms\s+{num} messages/s\s+\(p50 {num} ms, p99 {num} ms", out)
    # What each phase cost the process per message (getrusage; start-up not in it).
    cost = re.findall(rf"^cost, .*CPU {num} ms/message\s+{num} context switches/message", out, re.M)
    if not lat or not tput or len(cost) < 2:
        sys.exit(f"could not read troupe bench's output:\n{out}")
    return {
        "p50": float(lat[1]), "p90": float(lat[2]), "p99": float(lat[3]),
        "tput": float(tput[1]), "tput_p99": float(tput[3]),
        "cpu": float(cost[0][0]), "csw": float(cost[0][1]),
        "cpu_many": float(cost[1][0]), "csw_many": float(cost[1][1]), "rss": peak,
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def troupe_ready(args):
    """`troupe run` on a fresh SQLite file: spawn to the first 200 from /readyz."""
    work = tempfile.mkdtemp(prefix="troupe-ready-")
    try:
        personas = os.path.join(work, "personas")
        os.makedirs(personas)
        with open(os.path.join(personas, "bench.json"), "w") as f:
            json.dump(PERSONA, f)
        port = free_port()
        env = dict(os.environ)
        env.update({
            "TROUPE_HTTP_ADDR": f"127.0.0.1:{port}",
            "TROUPE_DATABASE_URL": f"sqlite://{work}/troupe.db",
            "TROUPE_INDEX_DIR": os.path.join(work, "index"),
            "TROUPE_PERSONAS": personas,
            "TROUPE_LOG": "warn",
            # A provider must be configured for the persona to load; nothing is asked of it.
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        })
        started = time.perf_counter()
        proc = subprocess.Popen([args.troupe_bin, "run"], env=env, cwd=work,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/readyz"
        ready_s = None
        deadline = started + 60
        while time.perf_counter() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        ready_s = time.perf_counter() - started
                        break
            except OSError:
                time.sleep(0.002)  # polling a port that is not open yet
        rss = status_kib(proc.pid, "VmRSS") / 1024.0 if proc.poll() is None else 0.0
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        if ready_s is None:
            sys.exit(f"troupe run did not become ready:\n{err.decode(errors='replace')[-4000:]}")
        return {"ready": ready_s * 1000, "ready_rss": rss}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def eliza(args, mode):
    cmd = [
        BUN, "bench.ts", "--mode", mode,
        "--latency-messages", str(args.eliza_latency_messages or args.latency_messages),
        "--messages", str(args.eliza_messages or args.messages),
        "--rooms", str(args.rooms),
        "--warmup", str(args.warmup),
    ]
    env = dict(os.environ)
    # elizaOS logs every message at info; troupe bench logs nothing. Errors only, both sides.
    env["LOG_LEVEL"] = "error"
    out, _, peak, ready_s = run_measured(cmd, env, cwd=ELIZA_DIR, ready_marker=b"READY")
    result = json.loads(out.strip().splitlines()[-1])
    return {
        "p50": result["latency"]["p50_ms"],
        "p90": result["latency"]["p90_ms"],
        "p99": result["latency"]["p99_ms"],
        "tput": result["throughput"]["per_s"],
        "tput_p99": result["throughput"]["p99_ms"],
        # The same measure as troupe's: the process's CPU and context switches over a
        # phase, per message (bench.ts reads them around each phase).
        # (null where the runtime has no process.resourceUsage: then not a number.)
        "cpu": number(result["latency"].get("cpu_ms_per_message")),
        "csw": number(result["latency"].get("switches_per_message")),
        "cpu_many": number(result["throughput"].get("cpu_ms_per_message")),
        "csw_many": number(result["throughput"].get("switches_per_message")),
        "rss": peak,
        "ready": ready_s * 1000,
        "ready_rss": result["rss_mib"]["idle"],
    }


def number(v):
    return float("nan") if v is None else float(v)


def fmt(v, unit):
    if unit == "ms/msg":
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    if unit == "/msg":
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    if unit == "msg/s":
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    if unit == "ms":
        return f"{v:.2f}" if v < 10 else f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--troupe-bin", default=os.environ.get("TROUPE_BIN", "target/release/troupe"))
    p.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", 2)))
    p.add_argument("--latency-messages", type=int, default=int(os.environ.get("LATENCY_MESSAGES", 300)))
    p.add_argument("--messages", type=int, default=int(os.environ.get("MESSAGES", 300)))
    p.add_argument("--rooms", type=int, default=int(os.environ.get("ROOMS", 10)))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--eliza-latency-messages", type=int, default=int(os.environ.get("ELIZA_LATENCY_MESSAGES", 0)),
                   help="elizaOS's count if it should differ (it is 10-100x slower); default: the same")
    p.add_argument("--eliza-messages", type=int, default=int(os.environ.get("ELIZA_MESSAGES", 0)))
    p.add_argument("--skip-bootstrap", action="store_true", help="only elizaOS core")
    p.add_argument("--json", help="also write every round's figures to this file")
    args = p.parse_args()
    args.troupe_bin = os.path.abspath(args.troupe_bin)
    if not os.access(args.troupe_bin, os.X_OK):
        sys.exit(f"no troupe binary at {args.troupe_bin} (set TROUPE_BIN)")
    if not os.access(BUN, os.X_OK):
        sys.exit(f"no bun at {BUN}: run bench/compare.sh, which installs it")

    systems = [("troupe", None), ("elizaOS core", "core")]
    if not args.skip_bootstrap:
        systems.append(("elizaOS + bootstrap", "bootstrap"))
    rounds = {name: [] for name, _ in systems}
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else list(reversed(systems))
        for name, mode in order:
            t = time.perf_counter()
            if mode is None:
                fig = troupe_bench(args)
                fig.update(troupe_ready(args))
            else:
                fig = eliza(args, mode)
            rounds[name].append(fig)
            print(f"round {r + 1} {name:<20} " + "  ".join(f"{k}={fmt(v, 'x')}" for k, v in fig.items())
                  + f"   ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)

    med = {name: {k: statistics.median(f[k] for f in figs) for k in figs[0]} for name, figs in rounds.items()}
    names = [n for n, _ in systems]
    print()
    counts = f"{args.latency_messages} sequential messages in one room, {args.messages} over {args.rooms} rooms at once"
    if args.eliza_latency_messages or args.eliza_messages:
        counts += (f" (elizaOS: {args.eliza_latency_messages or args.latency_messages} and "
                   f"{args.eliza_messages or args.messages})")
    print(f"Side by side, {args.rounds} round(s) alternated, medians; {counts}; zero-latency model.")
    print(f"troupe: {args.troupe_bin} (bench: fresh SQLite file on disk); "
          f"elizaOS 1.7.2 under bun {bun_version()} (PGlite in memory).")
    print("ratio: how many times troupe is better (elizaOS / troupe; for throughput troupe / elizaOS).")
    print()
    head = "| measure | " + " | ".join(names) + " | " + " | ".join(f"ratio vs {n}" for n in names[1:]) + " |"
    print(head)
    print("|" + "---|" * (1 + 2 * len(names) - 1))
    for key, label, unit, better in FIGURES:
        row = [f"{label.format(rooms=args.rooms)} ({unit})"]
        row += [fmt(med[n][key], unit) for n in names]
        t = med["troupe"][key]
        for n in names[1:]:
            e = med[n][key]
            ratio = (e / t if better == "lower" else t / e) if t and e else float("nan")
            row.append(f"{ratio:.1f}×")
        print("| " + " | ".join(row) + " |")
    print()
    print("per round:")
    for name in names:
        for i, f in enumerate(rounds[name]):
            print(f"  {name:<20} round {i + 1}: " + ", ".join(f"{k} {fmt(v, 'x')}" for k, v in f.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": rounds, "medians": med}, f, indent=2)


def bun_version():
    try:
        return subprocess.run([BUN, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
