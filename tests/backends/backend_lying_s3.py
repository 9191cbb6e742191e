"""An S3 endpoint that lies about one object's size: every GET answers ``206`` with a
``Content-Range`` total of ``claimed`` bytes, then sends only the bytes it has and hangs up.

What a broken or hostile object store (or a proxy in between) can do; the S3 backend must
not allocate what it is told. Started and stopped by the test that uses it.
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LyingS3:
    def __init__(self, data: bytes, claimed: int) -> None:
        """Serve ``data`` as the start of an object of ``claimed`` bytes."""
        self.data, self.claimed = data, claimed
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.requests += 1
                match = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                start, end = (int(match[1]), int(match[2])) if match else (0, outer.claimed - 1)
                end = min(end, outer.claimed - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{outer.claimed}")
                self.send_header("Content-Length", str(end - start + 1))
                self.send_header("ETag", '"lying"')
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(outer.data[start:end + 1])  # then the connection closes early
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LyingS3:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
