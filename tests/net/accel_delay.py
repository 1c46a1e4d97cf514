#!/usr/bin/env python3
"""accel_delay.py — the round-trip time of a shaped link, added in front of nginx at almost
no CPU cost (tests/net/servers.py, nginx(delay_ms=...)).

Where the kernel refuses netem, a delay must come from user space. Passing every body
byte through a Python proxy costs a core on a small machine, which would measure the
proxy instead of the client. So nginx asks this server first (proxy_pass, no body):
it waits delay_ms, then answers with only an `X-Accel-Redirect` header naming the
file, and nginx serves the file itself (sendfile, Range honoured) from an internal
location. Each request's first byte is late by delay_ms, as over a link with that
round-trip time; the bytes themselves flow at nginx's (shaped) speed.

    accel_delay.py --port PORT --delay-ms MS --prefix /__stoker_files
"""
import argparse
import http.server
import socketserver
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--prefix", default="/__stoker_files")
    a = ap.parse_args()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self):
            time.sleep(a.delay_ms / 1000.0)
            path = urllib.parse.urlsplit(self.path).path
            self.send_response(200)
            self.send_header("X-Accel-Redirect", a.prefix + path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = _answer
        do_HEAD = _answer

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 1024

    Server(("127.0.0.1", a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
