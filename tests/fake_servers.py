"""Real HTTP servers on 127.0.0.1 that speak the outside providers' protocols, so tests exercise
the real SDKs. Each records the requests it received."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeServer", "QuietHandler", "fake_server", "fake_vector", "serve"]

Route = Callable[[dict], tuple[int, dict]]


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic, not normalized vector for `text`."""
    seed = hashlib.sha256(text.encode()).digest()
    return [((seed[i % 32] + i) % 17) - 8.0 for i in range(dim)]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output free of access logs."""

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler],
          closing: threading.Event | None = None) -> Iterator[str]:
    """Serve `handler` on a free 127.0.0.1 port in a thread; yield the base URL. `closing`,
    which slow handlers wait on, is set first on the way out, so shutdown need not wait."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # A short poll interval: shutdown() waits for the serve loop to notice.
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if closing is not None:
            closing.set()
        server.shutdown()
        server.server_close()


class FakeServer:
    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, dict]] = []
        self.url = ""


@contextmanager
def fake_server(routes: dict[str, Route]) -> Iterator[FakeServer]:
    """Serve `routes` (POST path → handler of the JSON body) on a free loopback port."""
    fake = FakeServer(routes)

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            fake.requests.append((self.path, body))
            route = fake.routes.get(self.path)
            status, reply = route(body) if route else (404, {"error": "no such route"})
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serve(Handler) as url:
        fake.url = url
        yield fake
