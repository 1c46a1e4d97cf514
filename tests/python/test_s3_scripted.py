"""The S3 client's failure paths (src/io/s3.c through build/stk_s3_tool) against a
scripted S3 stand-in on loopback (Python's http.server), where a real server
cannot be made to fail on cue:

- a multipart upload whose part 2 is refused: the error names the URL and
  the part, the upload is aborted (DELETE ?uploadId=) and never completed;
- a CompleteMultipartUpload answered 200 with an <Error> body (S3 can fail a
  completion late): a failure, and the upload is aborted;
- what a multipart upload sends: each part's x-amz-content-sha256 is the
  SHA-256 of the bytes received, every request is signed, the completion
  lists every part's ETag in order (parsed with Python's ElementTree) and is
  sent as application/xml;
- a listing whose server repeats its continuation token fails instead of
  looping, and a page that is not XML is STK_EFORMAT naming the URL."""
import hashlib
import json
import os
import subprocess
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import BUILD

TOOL = os.path.join(BUILD, "stk_s3_tool")
PART = 5 << 20


class Stub:
    """Records every request; answers through `behaviour` (a dict of switches)."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        self.behaviour = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self, status, body=b"", headers=None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
                with stub.lock:
                    stub.requests.append({"method": self.command, "path": url.path, "query": q,
                                          "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                status, out, hdrs = stub.respond(self.command, url.path, q, body)
                self._answer(status, out, hdrs)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = "http://127.0.0.1:%d" % self.server.server_address[1]

    def respond(self, method, path, q, body):
        b = self.behaviour
        if method == "POST" and "uploads" in q:
            return 200, (b"<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>k</Key>"
                         b"<UploadId>UP+ID/1==</UploadId></InitiateMultipartUploadResult>"), {}
        if method == "PUT" and "partNumber" in q:
            if q["partNumber"] == b.get("fail_part"):
                return 403, b"<Error><Code>AccessDenied</Code><Message>no parts for you</Message></Error>", {}
            return 200, b"", {"ETag": '"etag-%s"' % q["partNumber"]}
        if method == "POST" and "uploadId" in q:
            if b.get("complete_error"):
                return 200, b"<Error><Code>InternalError</Code><Message>late failure</Message></Error>", {}
            return 200, (b"<CompleteMultipartUploadResult><ETag>\"final-3\"</ETag>"
                         b"</CompleteMultipartUploadResult>"), {}
        if method == "DELETE" and "uploadId" in q:
            return 204, b"", {}
        if method == "GET" and q.get("list-type") == "2":
            if b.get("list_garbage"):
                return 200, b"this is not xml", {}
            return 200, (b"<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>k</Key>"
                         b"<Size>1</Size></Contents><NextContinuationToken>same</NextContinuationToken>"
                         b"</ListBucketResult>"), {}
        return 404, b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>", {}

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.stop()


def tool(stub, *args):
    if not os.path.exists(TOOL):
        pytest.skip("%s is not built (cmake --build build --target stk_s3_tool)" % TOOL)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STOKER_S3"))}
    env.update(AWS_ACCESS_KEY_ID="AKIDSTUB", AWS_SECRET_ACCESS_KEY="stub-secret-value",
               AWS_ENDPOINT_URL=stub.endpoint, STOKER_HTTP_QUIET="1", STOKER_HTTP_MAX_ATTEMPTS="2")
    p = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120, env=env)
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr, p.stderr  # ASan builds
    return json.loads(p.stdout)


@pytest.fixture
def bigfile(tmp_path):
    data = os.urandom(2 * PART + 1000)          # 3 parts
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    return str(path), data


def test_multipart_sends_hashes_signatures_and_etags(stub, bigfile):
    path, data = bigfile
    out = tool(stub, "upload", path, "s3://bkt/dir/big file.bin", str(PART), "0", "3")
    assert out == {"rc": 0, "size": len(data), "parts": 3, "etag": '"final-3"'}
    parts = [r for r in stub.requests if r["method"] == "PUT"]
    assert sorted(int(r["query"]["partNumber"]) for r in parts) == [1, 2, 3]
    for r in parts:
        n = int(r["query"]["partNumber"])
        assert r["body"] == data[(n - 1) * PART: n * PART]
        assert r["headers"]["x-amz-content-sha256"] == hashlib.sha256(r["body"]).hexdigest()
        assert r["query"]["uploadId"] == "UP+ID/1=="
        assert r["path"] == "/bkt/dir/big%20file.bin"
    for r in stub.requests:
        auth = r["headers"]["authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDSTUB/")
        assert "SignedHeaders=host;x-amz-content-sha256;x-amz-date" in auth.replace("content-type;", "")
    (complete,) = [r for r in stub.requests if r["method"] == "POST" and "uploadId" in r["query"]]
    assert complete["headers"]["content-type"] == "application/xml"
    root = ET.fromstring(complete["body"])
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    got = [(p.find("s3:PartNumber", ns).text, p.find("s3:ETag", ns).text) for p in root.findall("s3:Part", ns)]
    assert got == [("1", '"etag-1"'), ("2", '"etag-2"'), ("3", '"etag-3"')]
    assert not [r for r in stub.requests if r["method"] == "DELETE"]


def test_failed_part_aborts_the_upload(stub, bigfile):
    stub.behaviour["fail_part"] = "2"
    out = tool(stub, "upload", bigfile[0], "s3://bkt/k", str(PART), "0", "1")
    assert out["rc"] == -17
    assert out["error"].startswith("s3://bkt/k (part 2 of 3): HTTP 403 AccessDenied: no parts for you")
    assert "stub-secret-value" not in json.dumps(out)
    deletes = [r for r in stub.requests if r["method"] == "DELETE"]
    assert len(deletes) == 1 and deletes[0]["query"] == {"uploadId": "UP+ID/1=="}
    assert not [r for r in stub.requests if r["method"] == "POST" and "uploadId" in r["query"]]


def test_late_completion_error_aborts(stub, bigfile):
    stub.behaviour["complete_error"] = True
    out = tool(stub, "upload", bigfile[0], "s3://bkt/k", str(PART))
    assert out["rc"] == -16
    assert "s3://bkt/k: HTTP 200 InternalError: late failure" in out["error"]
    assert len([r for r in stub.requests if r["method"] == "DELETE"]) == 1


def test_listing_that_would_not_end(stub):
    out = tool(stub, "list", "s3://bkt/p/")
    assert out["rc"] == -5
    assert "s3://bkt/p/: ListObjectsV2 page 2 repeats the previous continuation token" in out["error"]
    lists = [r for r in stub.requests if r["method"] == "GET"]
    assert len(lists) == 2 and lists[1]["query"]["continuation-token"] == "same"
    assert lists[0]["query"] == {"list-type": "2", "max-keys": "1000", "prefix": "p/"}
    stub.behaviour["list_garbage"] = True
    out = tool(stub, "list", "s3://bkt/p/")
    assert out["rc"] == -5 and out["error"].startswith("s3://bkt/p/: ListObjectsV2 page 1: malformed XML")
