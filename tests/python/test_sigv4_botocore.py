"""stoker's AWS Signature V4 signer (src/io/sigv4.c, driven through the test
program build/stk_sigv4_tool) against botocore's, the signer of the AWS CLI
and boto3 (Debian's python3-botocore), on random requests at a fixed time:
the Authorization header and every header stoker adds must be byte-equal.

S3 requests (botocore.auth.S3SigV4Auth) get random buckets, keys with
spaces, unicode, reserved and sub-delimiter characters, empty segments and
dots (encoded once, as botocore's serializer does: quote(key, safe='/~')),
virtual-hosted and path-style hosts with and without ports, query strings
with repeated and valueless names, extra headers with runs of blanks and
mixed case, session tokens, regions, signed payloads and UNSIGNED-PAYLOAD.
Requests to other services (botocore.auth.SigV4Auth) check the normalised
path mode (dot segments, "//", double encoding). Botocore is the
reference: the same inputs, signed independently."""
import datetime
import hashlib
import json
import os
import random
import string
import subprocess
from unittest import mock
from urllib.parse import quote

import pytest

from conftest import BUILD

botocore = pytest.importorskip("botocore", reason="python3-botocore is not installed")
import botocore.auth  # noqa: E402
import botocore.awsrequest  # noqa: E402
import botocore.config  # noqa: E402
import botocore.credentials  # noqa: E402

TOOL = os.path.join(BUILD, "stk_sigv4_tool")


def sign_with_stoker(requests):
    if not os.path.exists(TOOL):
        pytest.skip("%s is not built (cmake --build build --target stk_sigv4_tool)" % TOOL)
    text = "".join(json.dumps(r) + "\n" for r in requests)
    p = subprocess.run([TOOL], input=text, capture_output=True, text=True, timeout=120, check=True)
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(out) == len(requests)
    return out


def sign_with_botocore(req, body):
    """The headers botocore's signer adds to the same request at the same time."""
    headers = botocore.awsrequest.HTTPHeaders()
    for line in req["headers"]:
        name, _, value = line.partition(":")
        headers[name] = value
    r = botocore.awsrequest.AWSRequest(method=req["method"], url=req["url"], data=body)
    r.headers = headers
    creds = botocore.credentials.Credentials(req["access_key"], req["secret_key"], req["session_token"])
    if req["mode"] == "s3":
        unsigned = req["payload_hash"] == "UNSIGNED-PAYLOAD"
        r.context["client_config"] = botocore.config.Config(s3={"payload_signing_enabled": not unsigned})
        signer = botocore.auth.S3SigV4Auth(creds, req["service"], req["region"])
    else:
        signer = botocore.auth.SigV4Auth(creds, req["service"], req["region"])
    when = datetime.datetime.fromtimestamp(req["time"], datetime.timezone.utc).replace(tzinfo=None)

    class FixedTime(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return when

    with mock.patch("botocore.auth.datetime.datetime", FixedTime):
        signer.add_auth(r)
    return r.headers


KEY_CHARS = (string.ascii_letters + string.digits + " !\"#$%&'()*+,-.:;<=>?@[\\]^_`{|}~"
             + "é日本語ሴ€\u00a0")


def random_key(rng):
    segments = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.06:
            segments.append("")                # "a//b"
        elif kind < 0.1:
            segments.append(rng.choice([".", ".."]))
        else:
            segments.append("".join(rng.choice(KEY_CHARS) for _ in range(rng.randint(1, 12))))
    key = "/".join(segments)
    return key or "k"


def random_query(rng):
    pairs = []
    for _ in range(rng.choice([0, 0, 1, 2, 3, 5])):
        name = rng.choice(["prefix", "delimiter", "list-type", "max-keys", "uploadId", "partNumber",
                           "continuation-token", "x", "a-b", "A", "uploads", "versionId"])
        if rng.random() < 0.2:
            pairs.append(quote(name, safe="-_.~"))   # valueless: "uploads"
        else:
            value = "".join(rng.choice(KEY_CHARS) for _ in range(rng.randint(0, 10)))
            pairs.append(quote(name, safe="-_.~") + "=" + quote(value, safe="-_.~"))
    return "&".join(pairs)


def random_headers(rng):
    headers = []
    names = set()
    for _ in range(rng.randint(0, 5)):
        name = rng.choice(["Range", "Content-Type", "x-amz-meta-Note", "X-Amz-Storage-Class",
                           "If-Match", "User-Agent", "Expect", "Cache-Control", "X-Custom-" +
                           "".join(rng.choice(string.ascii_letters) for _ in range(3))])
        if name.lower() in names:
            continue
        names.add(name.lower())
        words = ["".join(rng.choice(string.ascii_letters + string.digits + "=;,/\"'()-_.")
                         for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 4))]
        value = ""
        for w in words:
            value += w + "".join(rng.choice(" \t") for _ in range(rng.randint(1, 3)))
        value = rng.choice(["", " ", "  \t"]) + value
        headers.append(name + ":" + value)
    return headers


def random_request(rng):
    bucket = "".join(rng.choice(string.ascii_lowercase + string.digits + "-")
                     for _ in range(rng.randint(3, 20))).strip("-") or "bucket"
    region = rng.choice(["us-east-1", "eu-central-1", "ap-southeast-2", "auto", "garage", "us-west-2"])
    scheme = rng.choice(["https", "http"])
    key = random_key(rng)
    style = rng.random()
    if style < 0.5:
        host, path = "%s.s3.%s.amazonaws.com" % (bucket, region), "/" + quote(key, safe="/~")
    else:
        host = rng.choice(["127.0.0.1:9000", "localhost:4566", "minio.example.org",
                           "s3.example.com:443", "s3.example.com:80", "[::1]:9000"])
        path = "/" + bucket + "/" + quote(key, safe="/~")
    query = random_query(rng)
    url = "%s://%s%s%s" % (scheme, host, path, "?" + query if query else "")
    body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))) if rng.random() < 0.5 else b""
    token = None
    if rng.random() < 0.4:
        token = "".join(rng.choice(string.ascii_letters + string.digits + "+/=")
                        for _ in range(rng.randint(16, 600)))
    unsigned = rng.random() < 0.4
    return {
        "method": rng.choice(["GET", "HEAD", "PUT", "POST", "DELETE"]),
        "url": url,
        "headers": random_headers(rng),
        "payload_hash": "UNSIGNED-PAYLOAD" if unsigned else hashlib.sha256(body).hexdigest(),
        "time": rng.randint(946684800, 4102444799),   # 2000 .. 2099
        "access_key": rng.choice(["AKIAIOSFODNN7EXAMPLE", "ASIA" + "".join(
            rng.choice(string.ascii_uppercase + string.digits) for _ in range(16)), "minioadmin", "test"]),
        "secret_key": "".join(rng.choice(string.ascii_letters + string.digits + "+/= _-!")
                              for _ in range(rng.randint(1, 60))),
        "session_token": token,
        "region": region,
        "service": "s3",
        "mode": "s3",
        "content_sha256": True,
    }, body


ADDED = ("X-Amz-Date", "X-Amz-Content-SHA256", "X-Amz-Security-Token", "Authorization")


def compare(requests, bodies):
    results = sign_with_stoker(requests)
    for req, body, got in zip(requests, bodies, results):
        assert got["rc"] == 0, (req["url"], got.get("error"))
        ours = dict(line.split(": ", 1) for line in got["add"])
        theirs = sign_with_botocore(req, body)
        for name in ADDED:
            if name not in theirs:
                continue
            assert ours.get(name) == theirs[name], (
                "%s differs for %s %s\n stoker:   %s\n botocore: %s\n canonical request:\n%s"
                % (name, req["method"], req["url"], ours.get(name), theirs[name], got["creq"]))
        assert set(ours) == {n for n in ADDED if n in theirs}


def test_s3_random_requests_match_botocore():
    rng = random.Random(20150830)
    pairs = [random_request(rng) for _ in range(600)]
    compare([p[0] for p in pairs], [p[1] for p in pairs])


def test_other_services_normalised_paths_match_botocore():
    rng = random.Random(7)
    requests, bodies = [], []
    for _ in range(300):
        req, body = random_request(rng)
        segments = [rng.choice(["a", "b c", ".", "..", "", "%20", "é", "x~y", "$"])
                    for _ in range(rng.randint(0, 6))]
        path = "/" + "/".join(quote(s, safe="%~") for s in segments)
        host = rng.choice(["example.amazonaws.com", "sts.us-east-1.amazonaws.com:8443"])
        query = random_query(rng)
        req.update(url="https://%s%s%s" % (host, path, "?" + query if query else ""),
                   service=rng.choice(["service", "sts", "execute-api"]), mode="normalize",
                   content_sha256=False, payload_hash=hashlib.sha256(body).hexdigest())
        requests.append(req)
        bodies.append(body)
    compare(requests, bodies)


def test_tool_reports_refusals():
    req, _ = random_request(random.Random(1))
    req["url"] = "ftp://h/k"
    (got,) = sign_with_stoker([req])
    assert got["rc"] == -1 and "http:// or https://" in got["error"]
    assert req["secret_key"] not in got["error"]
