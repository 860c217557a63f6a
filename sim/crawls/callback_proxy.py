"""A WebSub callback in front of a cluster's processes: ``CallbackProxy(ports, mirror=...)``.

A cluster crawl has one public callback URL (``WHITTLE_WEBSUB_CALLBACK``) and one callback
server per process (``WHITTLE_WEBSUB_LISTEN``); between them, in a deployment, a load
balancer. This is one, in a thread, for the tests and benchmarks: a hub's GET (a
verification of intent) goes to one process in turn (the next one up if it is down), a POST
(a delivery) to one in turn too, or with ``mirror`` to every process at once (a delivery that
reaches several processes, racing each other). It counts the deliveries each process answered
and those it could not take (the process down), and notes when each delivery reached it
(``received``: unix time, the entry and the hub's drawn delay that ``sim.web.websub_hub`` names
in its headers), from which ``sim.bench.cluster_websub`` measures the crawl's own latency.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: the headers of a hub's request passed on
HEADERS = ("content-type", "x-hub-signature", "link")


class CallbackProxy:
    def __init__(self, ports: list[int], *, mirror: bool = False) -> None:
        self.ports = list(ports)
        self.mirror = mirror
        self.answered: Counter = Counter()       # port -> deliveries it answered
        self.missed: Counter = Counter()         # port -> deliveries it could not take
        #: (unix time a delivery reached the proxy, its X-Sim-Entry, its X-Sim-Delay)
        self.received: list[tuple[float, str | None, str | None]] = []
        self._turn = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/websub"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _order(self) -> list[int]:
        """The processes, starting with the next one's turn."""
        with self._lock:
            self._turn += 1
            j = self._turn % len(self.ports)
        return self.ports[j:] + self.ports[:j]

    def _count(self, port: int, status: int | None) -> None:
        with self._lock:
            (self.missed if status is None else self.answered)[port] += 1

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _forward(self, port: int, method: str, body: bytes | None):
                headers = {k: v for k, v in self.headers.items() if k.lower() in HEADERS}
                request = urllib.request.Request(f"http://127.0.0.1:{port}{self.path}",
                                                 data=body, headers=headers, method=method)
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return response.status, response.read()
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read()
                except OSError:
                    return None, b""

            def _answer(self, status: int, body: bytes = b"") -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass                 # the hub hung up meanwhile: nobody to answer

            def do_GET(self) -> None:
                for port in proxy._order():          # the next process that is up answers
                    status, body = self._forward(port, "GET", None)
                    if status is not None:
                        return self._answer(status, body)
                self._answer(502)

            def do_POST(self) -> None:
                at = time.time()                     # the request line and headers read
                with proxy._lock:
                    proxy.received.append((at, self.headers.get("x-sim-entry"),
                                           self.headers.get("x-sim-delay")))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not proxy.mirror:
                    for port in proxy._order():
                        status, _ = self._forward(port, "POST", body)
                        proxy._count(port, status)
                        if status is not None:
                            return self._answer(status)
                    return self._answer(502)
                statuses: list[int | None] = [None] * len(proxy.ports)

                def forward(j: int, port: int) -> None:
                    statuses[j] = self._forward(port, "POST", body)[0]
                    proxy._count(port, statuses[j])

                # to every process at once: they race to report the same entries
                threads = [threading.Thread(target=forward, args=(j, port))
                           for j, port in enumerate(proxy.ports)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                up = [s for s in statuses if s is not None]
                self._answer(up[0] if up else 502)

        return Handler
