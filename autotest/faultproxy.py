# SPDX-License-Identifier: MIT
"""A forwarding HTTP proxy, in the test's process, that answers chosen requests with a transient
failure (503, or another status) instead of passing them on, or after passing them on (the
answer lost): the real
store behind it (Azurite, the GCS store) sees only what gets through, so a client's retry is
observed on the store's own state, not assumed. The request's Host reaches the store as
X-Forwarded-Host, so that a URL the store hands out (a GCS session's) leads back here."""

import http.client
import socket
import http.server
import threading

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authenticate", "proxy-authorization"}


class FaultProxy:
    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        # [predicate(method, path) -> bool, times left, after forwarding, status answered]
        self.faults = []
        self.log = []  # (method, path, status) of every request, in order
        self.lock = threading.Lock()
        self.server = None

    def fail(self, predicate, times, after_forwarding=False, status=503):
        """Answer the next `times` requests for which predicate(method, path) holds with
        `status` (503 unless told: 403, 429, 500...): without passing them on, or
        (`after_forwarding`) once the store has carried them out."""
        with self.lock:
            self.faults.append([predicate, times, after_forwarding, status])
        return self

    def faults_left(self):
        with self.lock:
            return sum(fault[1] for fault in self.faults)

    def _take_fault(self, method, path):
        """None, or (whether the fault to inject comes after forwarding, its status)."""
        with self.lock:
            for fault in self.faults:
                if fault[1] > 0 and fault[0](method, path):
                    fault[1] -= 1
                    return fault[2], fault[3]
        return None

    def start(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._take_fault(self.command, self.path)
                if fault is not None and not fault[0]:
                    self._inject(fault[1])
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port,
                                                      timeout=120)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in HOP_BY_HOP and k.lower() != "host"}
                headers["Host"] = f"127.0.0.1:{proxy.upstream_port}"
                headers["X-Forwarded-Host"] = self.headers.get("Host", "")
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                if fault is not None:
                    upstream.close()
                    self._inject(fault[1])
                    return
                with proxy.lock:  # before the answer: a client that has it finds it logged
                    proxy.log.append((self.command, self.path, answer.status))
                self.send_response(answer.status, answer.reason)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                content_length = answer.getheader("Content-Length")
                self.send_header("Content-Length",
                                 content_length if self.command == "HEAD" and content_length
                                 else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()

            def _inject(self, status):
                with proxy.lock:
                    proxy.log.append((self.command, self.path, status))
                self.send_response(status, "Injected fault")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self):
        return self.server.server_address[1]

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def unused_port():
    """A loopback port nothing listens on (a connection to it is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
