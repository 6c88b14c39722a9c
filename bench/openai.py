#!/usr/bin/env python3
"""What the OpenAI-compatible API adds over `POST /api/agents/{agent}/messages`, same run.

    bench/openai.py TROUPE_BINARY [--rounds 6] [--per-round 200]

Starts a model that answers at once (an OpenAI-compatible server in this process, a fixed
reply with usage), then `troupe run` on a fresh SQLite file with rate limits off, and sends
messages one after the other over one keep-alive connection, alternating blocks of the three
kinds (ABC, CBA, …) so that drift on a shared machine lands on all of them:

- `messages`: `POST /api/agents/bench/messages` in one room;
- `v1 stateless`: `POST /v1/chat/completions` with a two-turn conversation and a system message;
- `v1 stateful`: `POST /v1/chat/completions` with `X-Troupe-Room` and the new message only.

Prints p50 and p90 per kind (ms) and each /v1 kind's ratio to `messages`.
"""

import argparse
import http.client
import http.server
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPLY = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}


class Model(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_model():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def start_troupe(binary, model_port, workdir):
    personas = os.path.join(workdir, "personas")
    os.makedirs(personas)
    with open(os.path.join(personas, "bench.json"), "w") as f:
        json.dump({"name": "Bench", "modelProvider": "openai", "bio": ["A benchmark persona."],
                   "lore": [], "messageExamples": [], "postExamples": [], "topics": [],
                   "adjectives": [], "style": {"all": [], "chat": [], "post": []}}, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TROUPE_", "OPENAI_", "RUST_LOG"))}
    env.update({
        "TROUPE_HTTP_ADDR": "127.0.0.1:0", "TROUPE_PERSONAS": personas,
        "TROUPE_DATABASE_URL": f"sqlite://{workdir}/troupe.db",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model_port}/v1", "OPENAI_API_KEY": "bench",
        "TROUPE_LOG": "warn,troupe=info", "NO_COLOR": "1",
        # Throughput-style runs: the limits would turn messages into cheap 429s.
        "TROUPE_RATE_USER_PER_MIN": "0", "TROUPE_RATE_ROOM_PER_MIN": "0",
        "TROUPE_RATE_AGENT_PER_MIN": "0", "TROUPE_RATE_API_PER_MIN": "0",
        "TROUPE_MEMORY_FACTS_EVERY": "0",
    })
    proc = subprocess.Popen([binary, "run"], cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, int(m.group(1))
    raise SystemExit("troupe exited before listening")


def kinds():
    conversation = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Good morning."},
                    {"role": "assistant", "content": "Good morning to you."}]
    return {
        "messages": lambda n: ("/api/agents/bench/messages", {}, {"roomId": "bench", "userId": "u", "text": f"message {n}"}),
        "v1 stateless": lambda n: ("/v1/chat/completions", {}, {
            "model": "bench", "user": "u",
            "messages": conversation + [{"role": "user", "content": f"message {n}"}]}),
        "v1 stateful": lambda n: ("/v1/chat/completions", {"X-Troupe-Room": "bench-v1"}, {
            "model": "bench", "user": "u", "messages": [{"role": "user", "content": f"message {n}"}]}),
    }


def run_block(conn, make, count, start):
    times = []
    for n in range(start, start + count):
        path, headers, body = make(n)
        data = json.dumps(body)
        t = time.perf_counter()
        conn.request("POST", path, data, {"content-type": "application/json", **headers})
        response = conn.getresponse()
        payload = response.read()
        times.append((time.perf_counter() - t) * 1000)
        if response.status != 200:
            raise SystemExit(f"{path}: {response.status} {payload[:300]!r}")
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("troupe")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--per-round", type=int, default=200)
    args = p.parse_args()
    model_port = start_model()
    with tempfile.TemporaryDirectory(prefix="troupe-openai-bench-") as workdir:
        proc, port = start_troupe(os.path.abspath(args.troupe), model_port, workdir)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port)
            makers = kinds()
            names = list(makers)
            for name in names:  # warm-up
                run_block(conn, makers[name], 20, 0)
            times = {name: [] for name in names}
            for r in range(args.rounds):
                for name in names if r % 2 == 0 else reversed(names):
                    times[name] += run_block(conn, makers[name], args.per_round, 1000 * (r + 1))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    base = statistics.median(times["messages"])
    print(f"{args.rounds} rounds × {args.per_round} messages per kind, alternated; rate limits off")
    print("| kind | p50 (ms) | p90 (ms) | p50 vs messages |\n|---|---|---|---|")
    for name in names:
        t = sorted(times[name])
        p50, p90 = statistics.median(t), t[int(len(t) * 0.9)]
        print(f"| {name} | {p50:.2f} | {p90:.2f} | {p50 / base:.2f}× |")


if __name__ == "__main__":
    main()
