"""A chat-completions server on loopback for tests of the clients (the judge, the critic, the sampler): a real
HTTP server whose answers a test decides, and the numbered-list reader for the prompts those clients send."""

from __future__ import annotations

import json


class ChatServer:
    """A real HTTP server on loopback speaking the chat-completions protocol; ``answer(text) -> str`` decides what
    the "model" says. Records every prompt and the most requests it held at once."""

    def __init__(self, answer, delay_s: float = 0.0, body_answer=None):
        import http.server
        import threading
        import time

        self.prompts: list[str] = []
        self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][0]["content"]
                with lock:
                    outer.prompts.append(text)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                time.sleep(delay_s)
                content = body_answer(body) if body_answer is not None else answer(text)
                out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                with lock:
                    outer.in_flight -= 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def listed(text: str, header: str) -> list[str]:
    """The numbered lines after ``header`` in a prompt."""
    block = text.split(header, 1)[1].split("\n\n", 1)[0]
    return [ln.split(". ", 1)[1] for ln in block.strip().splitlines()]
