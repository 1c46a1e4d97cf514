#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 reverse proxy for stoker's network tests.

It sits between a client (stoker's libcurl engine, curl, botocore) and a real
server (nginx, moto) on loopback and forwards every request, except the ones a
test chose to break. It is stdlib only, so it runs in the test process
(FaultProxy, or servers.fault_proxy()) and as a separate process
(`fault_proxy.py UPSTREAM --port 0 ...`, for benchmarks), with the same rules.

How it works. A ThreadingHTTPServer accepts client connections; one thread per
client connection reads requests one after another (keep-alive) and owns one
keep-alive connection to the upstream, which it reuses for that client's
requests (reconnecting once when the upstream had closed an idle connection).
Request bodies (PUT/POST, Content-Length or chunked; `Expect: 100-continue` is
answered) are read whole, then forwarded with a Content-Length. Response bodies
are streamed through a 1 MiB buffer, so large shards cost no memory. The Host
header is forwarded as the client sent it, so a SigV4 signature made for the
proxy's address stays valid at a server that checks it.

Faults. Every forwarded request gets a number (1, 2, ... in arrival order over
all connections, from the start or the last clear()) and at most one fault:

  reset       the connection is closed with RST (SO_LINGER 0) after the request
              (and its body) was read; nothing is forwarded. Client: ECONNRESET
              (curl: "Recv failure: Connection reset by peer").
  500 / 503   an injected status with a short text body; nothing is forwarded.
  429         like 503, with `Retry-After: <retry_after>`.
  truncate    forwarded; the client gets the upstream's status and full
              Content-Length but only the first half of the body, then FIN.
              Client: a short body (Python IncompleteRead, curl error 18). A
              response without a body cannot be truncated: it is reset instead
              (recorded as "reset").
  stall       forwarded after `stall_s` seconds of silence (before the first byte).
  stall_body  the headers and half the body, `stall_s` seconds of silence, then the
              rest (a low-speed stall mid-transfer).

A lying range server (a broken proxy or CDN). These apply to a GET of one range
("Range: bytes=A-B"); any other request is forwarded untouched (fault None). The
parameter (the number after the kind, as for stalls) is a byte count K:

  shift       asks the upstream for bytes A+K..B+K (K default: half the range, at
              least 1) and passes its honest 206 on: the right length, other bytes,
              a Content-Range that says so.
  lie         forwards the request unchanged and rewrites the 206's Content-Range
              to name bytes K further on (default 1000): the right bytes, a wrong
              Content-Range.
  short       asks for A..A+(B-A)//2: fewer bytes, with a Content-Range and a
              Content-Length that say so.
  long        asks for A-K..B (A..B+K when A < K; K default 4096): more bytes, said
              likewise.
  whole       drops the Range: a 200 with the whole object.
  shift_lie   asks for A+K..B+K and says A..B: undetectable from the answer alone
              (no HTTP client can tell; for documenting the limit, not for tests that
              expect detection).

Which request gets which fault comes from
  * `schedule`, a dict {request number: fault}, e.g. {3: "reset", 7: "503",
    9: ("stall", 2.5)}; numbers are ints (JSON keys may be strings); or
  * `rates`, probabilities {"reset": 0.05, "status": 0.05, "truncate": 0.01,
    "stall": (0.01, 2.0), "stall_body": (0.01, 2.0)}. "status" injects 503 (60%),
    500 (20%) or 429 with Retry-After (20%). The draw for a request is seeded by
    (seed, method, path, Range, how many identical requests came before), never
    by arrival order, so the same run faults the same requests however threads
    interleave, and a retry of a faulted request gets a fresh draw.
The schedule wins over the rates for the numbers it names.

`latency_ms` delays each response's first byte (an RTT where the kernel cannot
emulate one: no netem). It does not delay TCP connects.

`down` makes the proxy a server that stays down: "reset" (or True) answers every
request with RST; "hang" never answers (until down is cleared or the proxy stops).

Every forwarded request is recorded: n, conn (connection serial), method, path,
range, req_bytes, fault, status (what the client got; None on reset/hang),
upstream_status (None when not forwarded), bytes (body bytes sent to the
client). In-process: FaultProxy.requests(). Separate process: GET
/__stoker_proxy/stats (JSON {"requests": [...], "counts": {...}, "config": {...}});
POST /__stoker_proxy/config with a JSON object of the keyword arguments to
change (schedule, rates, latency_ms, down, seed, stall_s, retry_after); POST
/__stoker_proxy/clear forgets the records and restarts the numbering. Control
requests are never faulted, delayed or recorded.
"""
import argparse
import hashlib
import http.client
import http.server
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

CONTROL = "/__stoker_proxy/"
RANGE_FAULTS = ("shift", "lie", "short", "long", "whole", "shift_lie")
FAULTS = ("reset", "500", "503", "429", "truncate", "stall", "stall_body") + RANGE_FAULTS
RATE_KINDS = ("reset", "status", "truncate", "stall", "stall_body") + RANGE_FAULTS
# Headers that describe one connection, never forwarded (RFC 9110 7.6.1), plus
# Expect (answered here) and Content-Length / Transfer-Encoding (set here).
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
       "upgrade", "expect", "content-length", "proxy-authorization", "proxy-authenticate"}
BUF = 1 << 20


def _parse_fault(f, stall_s):
    """A schedule entry -> (kind, seconds). Accepts "503", 503, "stall",
    ("stall", 2.5), ["stall_body", 1] and "stall:2.5". (For a range fault the
    number is its byte count K, None when not given: the kind's default.)"""
    secs = None if str(f[0] if isinstance(f, (list, tuple)) else f).split(":")[0] in RANGE_FAULTS \
        else stall_s
    if isinstance(f, (list, tuple)):
        f, secs = f[0], float(f[1])
    f = str(f)
    if ":" in f:
        f, s = f.split(":", 1)
        secs = float(s)
    if f not in FAULTS:
        raise ValueError("unknown fault %r (one of %s)" % (f, ", ".join(FAULTS)))
    return f, secs


def _parse_rates(rates, stall_s):
    out = {}
    for k, v in (rates or {}).items():
        if k not in RATE_KINDS:
            raise ValueError("unknown rate %r (one of %s)" % (k, ", ".join(RATE_KINDS)))
        if isinstance(v, (list, tuple)):
            p, secs = float(v[0]), float(v[1])
        else:
            p, secs = float(v), None if k in RANGE_FAULTS else stall_s
        if not 0 <= p <= 1:
            raise ValueError("rate %s=%r is not a probability" % (k, p))
        out[k] = (p, secs)
    return out


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stoker-fault-proxy"

    # -- connection lifetime -------------------------------------------------
    def setup(self):
        super().setup()
        self.proxy = self.server.proxy
        # Headers and body go out in separate writes: without NODELAY, Nagle and the
        # client's delayed ACK would hold a small response for 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn_id = self.proxy._conn_opened(self.connection)
        self.up = None           # keep-alive connection to the upstream (this thread's)
        self.buf = None          # streaming buffer, allocated on the first body

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        self._up_close()
        self.proxy._conn_closed(self.connection)

    def log_message(self, fmt, *args):
        if self.proxy.verbose:
            sys.stderr.write("fault_proxy: %s\n" % (fmt % args))

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (ConnectionError, BrokenPipeError, socket.timeout, OSError):
            self.close_connection = True
            self._up_close()

    def __getattr__(self, name):
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    # -- helpers ---------------------------------------------------------------
    def _up_close(self):
        if self.up is not None:
            self.up.close()
            self.up = None

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            parts = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(parts)
        n = self.headers.get("Content-Length")
        if n is None:
            return None
        return self.rfile.read(int(n))

    def _reset(self):
        """Close the client connection with RST."""
        self.close_connection = True
        self._up_close()
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()
        except OSError:
            pass

    def _send_status(self, code, extra=()):
        body = ("%d injected by stoker's fault proxy\n" % code).encode()
        self.send_response_only(code)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            return len(body)
        return 0

    def _forward(self, body, range_header=None):
        """Send the request upstream (with `range_header` for its Range, when
        given; "" drops it); returns the response (headers read)."""
        for _ in range(2):
            fresh = self.up is None
            if fresh:
                u = self.proxy.upstream
                self.up = http.client.HTTPConnection(u.hostname, u.port or 80,
                                                     timeout=self.proxy.upstream_timeout)
                self.up.connect()
                self.up.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self.up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                host = False
                for k, v in self.headers.items():
                    if k.lower() in HOP or (range_header is not None and k.lower() == "range"):
                        continue
                    host = host or k.lower() == "host"
                    self.up.putheader(k, v)
                if range_header:
                    self.up.putheader("Range", range_header)
                if not host:
                    self.up.putheader("Host", self.proxy.upstream.netloc)
                if body is not None:
                    self.up.putheader("Content-Length", str(len(body)))
                self.up.endheaders(body)
                return self.up.getresponse()
            except (ConnectionError, http.client.BadStatusLine, BrokenPipeError):
                # An idle keep-alive connection the upstream had closed: retry once.
                self._up_close()
                if fresh:
                    raise
        raise AssertionError("unreachable")

    def _write_body(self, resp, n, record):
        """Copy n body bytes from resp to the client; False when the upstream ended early."""
        if self.buf is None:
            self.buf = memoryview(bytearray(BUF))
        while n > 0:
            k = resp.readinto(self.buf[:min(n, BUF)])
            if not k:
                return False
            self.wfile.write(self.buf[:k])
            record["bytes"] += k
            n -= k
        return True

    # -- one request -------------------------------------------------------------
    def _handle(self):
        body = self._read_body()
        if self.path.startswith(CONTROL):
            return self._control(body)
        p = self.proxy
        record, kind, secs = p._begin(self, body)
        try:
            self._serve(record, kind, secs, body)
        finally:
            p._end(record)

    def _serve(self, record, kind, secs, body):
        p = self.proxy
        down = p.down
        if down:
            record["fault"] = "down"
            if down == "hang":
                while p.down == "hang" and not p._stop.wait(0.05):
                    pass
            self._reset()
            return
        if kind == "reset":
            self._reset()
            return
        if p.latency_ms:
            p._stop.wait(p.latency_ms / 1000.0)
        if kind in ("500", "503", "429"):
            extra = [("Retry-After", str(p.retry_after))] if kind == "429" else []
            record["status"] = int(kind)
            record["bytes"] = self._send_status(int(kind), extra)
            return
        if kind == "stall":
            p._stop.wait(secs)
        range_header, relabel = None, None
        if kind in RANGE_FAULTS:
            range_header, relabel = self._range_fault(kind, secs)
            if range_header is None and relabel is None:
                kind = record["fault"] = None    # not a GET of one range: untouched
        try:
            resp = self._forward(body, range_header)
        except (OSError, http.client.HTTPException) as e:
            self._up_close()
            record["fault"] = record["fault"] or "upstream_error"
            record["error"] = str(e)
            record["status"] = 502
            self.close_connection = True
            record["bytes"] = self._send_status(502)
            return
        record["upstream_status"] = resp.status
        no_body = (self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200)
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
        if relabel is not None:
            headers = [(k, relabel(v) if k.lower() == "content-range" else v) for k, v in headers]
        cl = resp.getheader("Content-Length")
        if no_body:
            # (read() of a body-less response closes it, so that the upstream
            # connection takes the next request: HEAD, then GET, on one keep-alive
            # connection)
            resp.read()
            length, data = 0, b""
            if cl is not None:
                headers.append(("Content-Length", cl))
        elif cl is None or resp.chunked:
            data = resp.read()           # unknown length: buffer it, send a Content-Length
            length = len(data)
            headers.append(("Content-Length", str(length)))
        else:
            data, length = None, int(cl)
            headers.append(("Content-Length", cl))
        if kind == "truncate" and length < 2:
            record["fault"] = "reset"    # nothing to cut: break the connection instead
            self._reset()
            return
        self.send_response_only(resp.status, resp.reason)
        for k, v in headers:
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        record["status"] = resp.status
        if data is not None:
            cut = length // 2 if kind in ("truncate", "stall_body") else length
            self.wfile.write(data[:cut])
            record["bytes"] += cut
            if kind == "stall_body":
                p._stop.wait(secs)
                self.wfile.write(data[cut:])
                record["bytes"] += length - cut
        else:
            first = length // 2 if kind in ("truncate", "stall_body") else length
            ok = self._write_body(resp, first, record)
            if ok and kind == "stall_body":
                p._stop.wait(secs)
                ok = self._write_body(resp, length - first, record)
            if not ok:   # the upstream ended early: pass the short body on, then close
                record["error"] = "upstream body ended early"
                kind = "truncate"
        if kind == "truncate":
            self.close_connection = True
            self._up_close()
            self.wfile.flush()
        elif resp.will_close:
            self._up_close()

    def _range_fault(self, kind, k):
        """(Range header to send upstream or None, Content-Range rewriter or None)
        for a range fault; (None, None) when the request is not a GET of one range."""
        rng = self.headers.get("Range", "")
        if self.command != "GET" or not rng.startswith("bytes=") or "," in rng:
            return None, None
        try:
            a, b = (int(x) for x in rng[6:].split("-"))
        except ValueError:
            return None, None
        n = b - a + 1
        if kind == "shift":
            k = int(k) if k is not None else max(1, n // 2)
            return "bytes=%d-%d" % (a + k, b + k), None
        if kind == "shift_lie":
            k = int(k) if k is not None else max(1, n // 2)
            return "bytes=%d-%d" % (a + k, b + k), lambda v: "bytes %d-%d/%s" % (a, b, v.split("/")[-1])
        if kind == "lie":
            k = int(k) if k is not None else 1000
            return None, lambda v: "bytes %d-%d/%s" % (a + k, b + k, v.split("/")[-1])
        if kind == "short":
            return "bytes=%d-%d" % (a, a + (b - a) // 2), None
        if kind == "long":   # (earlier where it can: a range that ends the object cannot grow)
            k = int(k) if k is not None else 4096
            return ("bytes=%d-%d" % (a - k, b) if a >= k else "bytes=%d-%d" % (a, b + k)), None
        return "", None     # whole: no Range at all

    def _control(self, body):
        p = self.proxy
        what = self.path[len(CONTROL):].split("?", 1)[0]
        code, out = 200, {}
        try:
            if what == "stats" and self.command == "GET":
                out = p.stats()
            elif what == "config" and self.command == "POST":
                p.configure(**json.loads(body or b"{}"))
                out = {"config": p.config()}
            elif what == "clear" and self.command == "POST":
                p.clear()
            else:
                code, out = 404, {"error": "unknown control request %s %s" % (self.command, self.path)}
        except (ValueError, TypeError) as e:
            code, out = 400, {"error": str(e)}
        data = json.dumps(out).encode()
        self.send_response_only(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FaultProxy:
    """The proxy in this process: FaultProxy(upstream, ...).start() or `with`.

    Thread-safety: every method may be called from any thread while the proxy
    runs; the records and configuration are guarded by one lock."""

    def __init__(self, upstream, schedule=None, rates=None, latency_ms=0, seed=0, down=False,
                 host="127.0.0.1", port=0, stall_s=2.0, retry_after=1, upstream_timeout=120,
                 verbose=False):
        self.upstream = urllib.parse.urlsplit(upstream)
        if self.upstream.scheme != "http" or not self.upstream.hostname:
            raise ValueError("upstream must be http://HOST:PORT, not %r" % upstream)
        self.upstream_timeout = upstream_timeout
        self.verbose = verbose
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)   # notified when a request finishes
        self._stop = threading.Event()
        self._conns = set()          # open client sockets (guarded by _lock), shut at stop()
        self._conn_serial = 0
        self._records = []           # guarded by _lock
        self._seen = {}              # (method, path, range) -> requests so far, for rates
        self._n = 0
        self.stall_s = float(stall_s)
        self.retry_after = retry_after
        self.schedule, self.rates = {}, {}
        self.latency_ms, self.seed, self.down = 0, 0, False
        self.configure(schedule=schedule, rates=rates, latency_ms=latency_ms, seed=seed, down=down)
        self._server = _Server((host, port), _Handler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self._thread = None

    # -- lifetime --------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- configuration and records ---------------------------------------------
    def configure(self, schedule=None, rates=None, latency_ms=None, seed=None, down=None,
                  stall_s=None, retry_after=None):
        """Change the given settings (None keeps one); takes effect for the next request."""
        with self._lock:
            if stall_s is not None:
                self.stall_s = float(stall_s)
            if retry_after is not None:
                self.retry_after = retry_after
            if schedule is not None:
                self.schedule = {int(k): _parse_fault(v, self.stall_s) for k, v in schedule.items()}
            if rates is not None:
                self.rates = _parse_rates(rates, self.stall_s)
            if latency_ms is not None:
                self.latency_ms = float(latency_ms)
            if seed is not None:
                self.seed = int(seed)
            if down is not None:
                if down is True:
                    down = "reset"
                if down not in (False, "reset", "hang"):
                    raise ValueError("down must be False, True, 'reset' or 'hang', not %r" % (down,))
                self.down = down

    def config(self):
        with self._lock:
            return {"upstream": self.upstream.geturl(), "latency_ms": self.latency_ms,
                    "seed": self.seed, "down": self.down, "stall_s": self.stall_s,
                    "retry_after": self.retry_after,
                    "schedule": {str(k): list(v) for k, v in self.schedule.items()},
                    "rates": {k: list(v) for k, v in self.rates.items()}}

    def requests(self, settle=2.0):
        """A copy of the records of the requests so far (see the module doc). A
        handler finishes its record a moment after the client has the last byte:
        this waits up to `settle` seconds for requests in progress to finish (a
        stalled or hung one is returned as it stands, with "done": False)."""
        deadline = time.monotonic() + settle
        with self._done:
            while not all(r["done"] for r in self._records):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._done.wait(left)
            return [dict(r) for r in self._records]

    def counts(self, settle=2.0):
        """{"requests": N, "faults": {kind: N}, "bytes": body bytes sent}."""
        recs = self.requests(settle)
        faults = {}
        for r in recs:
            if r["fault"]:
                faults[r["fault"]] = faults.get(r["fault"], 0) + 1
        return {"requests": len(recs), "faults": faults, "bytes": sum(r["bytes"] for r in recs)}

    def stats(self, settle=2.0):
        return {"requests": self.requests(settle), "counts": self.counts(0), "config": self.config()}

    def clear(self):
        """Forget the records; the next request is number 1 again."""
        with self._lock:
            self._records = []
            self._seen = {}
            self._n = 0

    # -- called by the handler threads ---------------------------------------------
    def _conn_opened(self, sock):
        with self._lock:
            self._conns.add(sock)
            self._conn_serial += 1
            return self._conn_serial

    def _conn_closed(self, sock):
        with self._lock:
            self._conns.discard(sock)

    def _draw(self, key, attempt):
        h = hashlib.blake2b(repr((self.seed, key, attempt)).encode(), digest_size=8).digest()
        rng = random.Random(int.from_bytes(h, "little"))
        u = rng.random()
        for kind in RATE_KINDS:
            p, secs = self.rates.get(kind, (0.0, self.stall_s))
            if u < p:
                if kind == "status":
                    v = rng.random()
                    kind = "503" if v < 0.6 else "500" if v < 0.8 else "429"
                return kind, secs
            u -= p
        return None, 0.0

    def _begin(self, h, body):
        rng_header = h.headers.get("Range")
        key = (h.command, h.path, rng_header)
        with self._lock:
            self._n += 1
            n = self._n
            attempt = self._seen.get(key, 0)
            self._seen[key] = attempt + 1
            if n in self.schedule:
                kind, secs = self.schedule[n]
            elif self.rates:
                kind, secs = self._draw(key, attempt)
            else:
                kind, secs = None, 0.0
            rec = {"n": n, "conn": h.conn_id, "method": h.command, "path": h.path,
                   "range": rng_header, "req_bytes": len(body) if body is not None else 0,
                   "fault": kind, "status": None, "upstream_status": None, "bytes": 0,
                   "t": time.time(), "done": False}
            self._records.append(rec)
        return rec, kind, secs

    def _end(self, rec):
        with self._done:
            rec["done"] = True
            self._done.notify_all()


def main(argv=None):
    ap = argparse.ArgumentParser(description="stoker's fault-injecting HTTP/1.1 reverse proxy "
                                 "(see the module docstring for the faults).")
    ap.add_argument("upstream", help="http://HOST:PORT of the real server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--port-file", help="write the port number to this file once listening")
    ap.add_argument("--schedule", default="{}", help='JSON {"3": "reset", "7": "503", "9": ["stall", 2]}')
    ap.add_argument("--reset", type=float, default=0.0, help="probability of a reset")
    ap.add_argument("--status", type=float, default=0.0, help="probability of 503/500/429")
    ap.add_argument("--truncate", type=float, default=0.0, help="probability of a truncated body")
    ap.add_argument("--stall", default=None, help="P:SECONDS, a stall before the first byte")
    ap.add_argument("--stall-body", default=None, help="P:SECONDS, a stall mid-body")
    ap.add_argument("--stall-s", type=float, default=2.0, help="seconds of a scheduled stall")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="delay of each response's first byte")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--down", choices=["reset", "hang"], default=None)
    ap.add_argument("--retry-after", type=int, default=1)
    ap.add_argument("--verbose", action="store_true", help="log each request on stderr")
    a = ap.parse_args(argv)
    rates = {"reset": a.reset, "status": a.status, "truncate": a.truncate}
    for name, v in (("stall", a.stall), ("stall_body", a.stall_body)):
        if v:
            p, s = v.split(":", 1)
            rates[name] = (float(p), float(s))
    rates = {k: v for k, v in rates.items() if (v[0] if isinstance(v, tuple) else v) > 0}
    proxy = FaultProxy(a.upstream, schedule=json.loads(a.schedule), rates=rates,
                       latency_ms=a.latency_ms, seed=a.seed, down=a.down or False, host=a.host,
                       port=a.port, stall_s=a.stall_s, retry_after=a.retry_after, verbose=a.verbose)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    proxy.start()
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % proxy.port)
        os.replace(a.port_file + ".tmp", a.port_file)
    print("fault_proxy: listening on %s -> %s" % (proxy.url, a.upstream), flush=True)
    while not stop.wait(0.5):
        pass
    proxy.stop()
    print("fault_proxy: %s" % json.dumps(proxy.counts()), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
