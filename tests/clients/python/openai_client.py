"""Drives troupe's OpenAI-compatible API with the official `openai` package, as a user would.

Run by tests/tests/openai_api.rs against the real binary and the fake model:

    python3 openai_client.py BASE_URL TOKEN MODEL TAG

It asserts what the SDK itself shows (types, exceptions, the stream's shape), exits
non-zero on the first failure, and prints one JSON object of what it saw for the Rust test
to check against what the fake model received.
"""

import json
import sys
import urllib.request

import openai
from openai import OpenAI

base_url, token, model, tag = sys.argv[1:5]
# No retries: a 429 must reach the test as the SDK's exception, not be waited out.
client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
seen = {"sdk": openai.__version__}


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


# The personas are the models.
ids = [m.id for m in client.models.list()]
check(model in ids, f"models.list() has {model}: {ids}")
check(client.models.retrieve(model).owned_by == "troupe", "retrieve() owned_by troupe")
seen["models"] = ids

# A non-streaming completion, with real usage.
done = client.chat.completions.create(
    model=model,
    user=f"{tag}-plain",
    messages=[{"role": "user", "content": f"{tag} plain: When does the harbour office close?"}],
)
choice = done.choices[0]
check(choice.finish_reason == "stop", f"finish_reason stop: {choice.finish_reason}")
check(choice.message.role == "assistant", "an assistant message")
check(done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens, "usage adds up")
check(done.usage.prompt_tokens > 0, f"prompt tokens counted: {done.usage}")
seen["plain"] = {"text": choice.message.content, "usage": done.usage.model_dump()}

# A streaming one: the chunks join to the answer, the last one carries usage.
chunks = list(
    client.chat.completions.create(
        model=model,
        user=f"{tag}-stream",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"{tag} stream: tell me about the tides"}],
    )
)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(chunks[-1].usage is not None and chunks[-1].choices == [], "usage on the last chunk")
check(all(c.usage is None for c in chunks[:-1]), "usage only on the last chunk")
check(any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks), "a stop chunk")
seen["stream"] = {"text": text, "usage": chunks[-1].usage.model_dump(), "chunks": len(chunks)}

# Stateless: the whole conversation each time, three turns.
history = []
replies = []
for n in (1, 2, 3):
    history.append({"role": "user", "content": f"{tag} stateless turn {n} about the harbour office"})
    r = client.chat.completions.create(
        model=model,
        user=f"{tag}-stateless",
        messages=[{"role": "system", "content": f"{tag} app instruction: answer in English."}] + history,
    )
    answer = r.choices[0].message.content
    replies.append(answer)
    history.append({"role": "assistant", "content": answer})
seen["stateless"] = replies

# Stateful: only the new message, in a named room.
stateful = []
for n in (1, 2, 3):
    r = client.chat.completions.create(
        model=model,
        user=f"{tag}-stateful",
        messages=[{"role": "user", "content": f"{tag} stateful turn {n}"}],
        extra_headers={"X-Troupe-Room": f"{tag}-room"},
    )
    stateful.append(r.choices[0].message.content)
seen["stateful"] = stateful

# The same Idempotency-Key twice: the same answer.
key = {"Idempotency-Key": f"{tag}-idem-1"}
msgs = [{"role": "user", "content": f"{tag} idempotent question"}]
first = client.chat.completions.create(model=model, messages=msgs, extra_headers=key, user=f"{tag}-idem")
again = client.chat.completions.create(model=model, messages=msgs, extra_headers=key, user=f"{tag}-idem")
check(first.choices[0].message.content == again.choices[0].message.content, "the same answer twice")
check(first.id == again.id, "the same id twice")
seen["idempotent"] = first.choices[0].message.content

# Errors, as the SDK's exceptions.
try:
    client.chat.completions.create(model="nobody-here", messages=msgs)
    check(False, "an unknown model raises")
except openai.NotFoundError as e:
    check(e.status_code == 404 and e.code == "model_not_found", f"404 model_not_found: {e}")
try:
    OpenAI(base_url=base_url, api_key="wrong-token", max_retries=0).models.list()
    check(False, "a wrong token raises")
except openai.AuthenticationError as e:
    check(e.status_code == 401, f"401: {e}")
refused = None
for n in range(1, 12):
    try:
        client.chat.completions.create(
            model=model,
            user=f"{tag}-spender",
            messages=[{"role": "user", "content": f"{tag} spend {n}"}],
        )
    except openai.RateLimitError as e:
        check(e.response.headers.get("retry-after") is not None, "429 says when to retry")
        refused = {"after": n - 1, "code": e.code}
        break
check(refused is not None, "an exhausted user budget raises RateLimitError")
seen["budget"] = refused

# The stateful room is one of the persona's rooms.
req = urllib.request.Request(
    base_url.removesuffix("/v1") + f"/api/agents/{model}/rooms",
    headers={"Authorization": f"Bearer {token}"},
)
rooms = [r["room"] for r in json.load(urllib.request.urlopen(req))["rooms"]]
check(f"web:{tag}-room" in rooms, f"the room is listed: {rooms}")

print(json.dumps(seen))
