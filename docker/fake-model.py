#!/usr/bin/env python3
"""A stand-in OpenAI-compatible model for docker/build-local.sh's smoke test.

It answers POST /v1/chat/completions (plain JSON, or server-sent events when the request asks
for `stream: true`) with one fixed reply, and POST /v1/embeddings with a small fixed vector,
on 127.0.0.1 and a free port, which it prints on its first line. Every chat request is
counted, and GET /calls answers the count, so the script can see the reply came from here.
The real fake, with scripts and recorded prompts, is tests/src/fake_openai.rs; this one only
has to exist without a Rust build.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = sys.argv[1] if len(sys.argv) > 1 else "Hello from the smoke test model."
calls = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/calls":
            with lock:
                self.send_json(200, {"calls": calls})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        global calls
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.send_json(400, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}})
        model = body.get("model", "fake")
        if self.path == "/v1/embeddings":
            inputs = body.get("input", [])
            inputs = inputs if isinstance(inputs, list) else [inputs]
            data = [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]} for i in range(len(inputs))]
            return self.send_json(200, {"object": "list", "data": data, "model": model,
                                        "usage": {"prompt_tokens": 1, "total_tokens": 1}})
        if self.path != "/v1/chat/completions":
            return self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
        with lock:
            calls += 1
        created = int(time.time())
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            return self.send_json(200, {
                "id": "chatcmpl-smoke", "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY},
                             "finish_reason": "stop"}],
                "usage": usage,
            })
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": REPLY}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": usage},
        ]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for c in chunks:
            c.update({"id": "chatcmpl-smoke", "object": "chat.completion.chunk", "created": created, "model": model})
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
