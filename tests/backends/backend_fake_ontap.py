"""A fake ONTAP cluster: exactly the REST endpoints the ontap backend uses, on loopback.

Bodies are shaped like the real API (``records``/``num_records``/``_links``, error objects,
202 + job for a volume POST), so netapp-ontap's own schemas parse them. State is plain dicts
the tests edit (take a volume offline, change an export rule, fill the volume ...).
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

GIB = 1024**3


class FakeOntap:
    def __init__(self, username: str = "admin", password: str = "netapp1!", port: int = 0) -> None:
        self.credentials = (username, password)
        self.svm = {"name": "svm1", "uuid": str(uuid.uuid4())}
        self.volumes: list[dict[str, Any]] = []
        self.policies: list[dict[str, Any]] = []
        self.buckets: list[dict[str, Any]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []
        self.port = port

    # --------------------------------------------------------------- state helpers

    def add_volume(self, name: str, junction: str | None, *, state: str = "online", policy: str = "default",
                   size_gb: float = 100, available_gb: float = 80) -> dict[str, Any]:
        vol: dict[str, Any] = {
            "uuid": str(uuid.uuid4()), "name": name, "state": state,
            "svm": {"name": self.svm["name"], "uuid": self.svm["uuid"]},
            "nas": {"export_policy": {"name": policy}},
            "space": {"size": int(size_gb * GIB), "available": int(available_gb * GIB)},
        }
        if junction:
            vol["nas"]["path"] = junction
        self.volumes.append(vol)
        return vol

    def add_policy(self, name: str, rules: list[dict[str, Any]]) -> None:
        self.policies.append({"id": len(self.policies) + 1, "name": name,
                              "svm": {"name": self.svm["name"], "uuid": self.svm["uuid"]}, "rules": rules})

    @staticmethod
    def rule(index: int, match: str, rw: str = "any", ro: str = "any") -> dict[str, Any]:
        return {"index": index, "clients": [{"match": match}], "protocols": ["any"], "ro_rule": [ro],
                "rw_rule": [rw], "superuser": ["any"], "anonymous_user": "65534"}

    def add_bucket(self, name: str) -> None:
        self.buckets.append({"uuid": str(uuid.uuid4()), "name": name,
                             "svm": {"name": self.svm["name"], "uuid": self.svm["uuid"]},
                             "volume": {"name": f"fg_oss_{name}", "uuid": str(uuid.uuid4())},
                             "size": 100 * GIB, "logical_used_size": 0})

    # --------------------------------------------------------------- server

    def start(self) -> FakeOntap:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _authorized(self) -> bool:
                expected = base64.b64encode(":".join(fake.credentials).encode()).decode()
                if self.headers.get("Authorization") == f"Basic {expected}":
                    return True
                self._send(401, {"error": {"message": "not authorized for that command", "code": "6"}})
                return False

            def _send(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/hal+json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                fake.requests.append(f"GET {self.path}")
                if not self._authorized():
                    return
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                collections = {
                    "/api/storage/volumes": fake.volumes,
                    "/api/protocols/nfs/export-policies": fake.policies,
                    "/api/protocols/s3/buckets": fake.buckets,
                }
                if url.path in collections:
                    records = [r for r in collections[url.path] if _matches(r, query)]
                    self._send(200, {"records": records, "num_records": len(records),
                                     "_links": {"self": {"href": self.path}}})
                elif url.path.startswith("/api/cluster/jobs/"):
                    job = fake.jobs.get(url.path.rsplit("/", 1)[1])
                    if job is None:
                        self._send(404, {"error": {"message": "entry doesn't exist", "code": "4"}})
                    else:
                        self._send(200, job)
                else:
                    self._send(404, {"error": {"message": f"API not found: {url.path}", "code": "3"}})

            def do_POST(self) -> None:
                fake.requests.append(f"POST {self.path}")
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if urlsplit(self.path).path != "/api/storage/volumes":
                    self._send(404, {"error": {"message": "API not found", "code": "3"}})
                    return
                vol = fake.add_volume(body["name"], body.get("nas", {}).get("path"),
                                      size_gb=body.get("size", 100 * GIB) / GIB,
                                      available_gb=body.get("size", 100 * GIB) / GIB * 0.95)
                job_id = str(uuid.uuid4())
                fake.jobs[job_id] = {"uuid": job_id, "state": "success", "code": 0, "message": "success",
                                     "description": f"POST /api/storage/volumes/{vol['uuid']}",
                                     "_links": {"self": {"href": f"/api/cluster/jobs/{job_id}"}}}
                self._send(202, {"job": {"uuid": job_id, "_links": {"self": {"href": f"/api/cluster/jobs/{job_id}"}}}})

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _matches(record: dict[str, Any], query: dict[str, str]) -> bool:
    """ONTAP query parameters: dotted field names compared with the record's values."""
    for name, wanted in query.items():
        if name in ("fields", "max_records", "return_records", "return_timeout"):
            continue
        value: Any = record
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or str(value) != wanted:
            return False
    return True
