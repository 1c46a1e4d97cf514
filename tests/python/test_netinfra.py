"""The network test infrastructure itself (tests/net/): nginx, the moto S3 server,
the fault proxy and the shaped network namespace, checked with independent
clients (Python's http.client/urllib/ssl, curl, Debian's botocore) before stoker's
own HTTP/S3 client is tested against them.

Nothing here asserts a measured speed. Latency and stalls are checked by a lower
bound the proxy guarantees (it sleeps before answering) or by a client timeout
far shorter than the stall."""
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import servers

NET = servers.NET
DATA_LEN = (1 << 20) + 123


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    data = os.urandom(DATA_LEN)
    (root / "data.bin").write_bytes(data)
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_bytes(b"hello, ranges\n")
    return str(root), data


@pytest.fixture(scope="module")
def ng(www):
    with servers.nginx(www[0], http2=True, tls=True) as s:
        yield s


def conn(url, timeout=30):
    host, port = url.split("//", 1)[1].split(":")
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def get(c, path, headers=None, method="GET"):
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    return r, r.read()


# ----------------------------------------------------------------------------- nginx

def test_nginx_ranges_keepalive_and_log(ng, www):
    data = www[1]
    ng.clear_log()
    c = conn(ng.url)
    r, body = get(c, "/data.bin")
    assert (r.status, body) == (200, data)
    assert r.getheader("Accept-Ranges") == "bytes"
    r, body = get(c, "/data.bin", {"Range": "bytes=10-19"})
    assert (r.status, body) == (206, data[10:20])
    assert r.getheader("Content-Range") == "bytes 10-19/%d" % DATA_LEN
    r, body = get(c, "/data.bin", {"Range": "bytes=%d-" % (DATA_LEN - 7)})
    assert (r.status, body) == (206, data[-7:])
    r, body = get(c, "/data.bin", {"Range": "bytes=-5"})
    assert (r.status, body) == (206, data[-5:])
    r, body = get(c, "/data.bin", {"Range": "bytes=%d-" % DATA_LEN})
    assert r.status == 416
    r, body = get(c, "/data.bin", {"Range": "bytes=0-1,100-101"})
    assert r.status == 206 and r.getheader("Content-Type").startswith("multipart/byteranges")
    assert data[0:2] in body and data[100:102] in body
    r, body = get(c, "/data.bin", method="HEAD")
    assert (r.status, body, r.getheader("Content-Length")) == (200, b"", str(DATA_LEN))
    r, body = get(c, "/missing.bin")
    assert r.status == 404
    r, body = get(c, "/sub/")          # listings, as JSON
    assert [e["name"] for e in json.loads(body)] == ["b.txt"]
    c.close()

    log = ng.access_log(wait_for=9)
    assert [(e["method"], e["uri"], e["range"], e["status"]) for e in log] == [
        ("GET", "/data.bin", "", 200), ("GET", "/data.bin", "bytes=10-19", 206),
        ("GET", "/data.bin", "bytes=%d-" % (DATA_LEN - 7), 206), ("GET", "/data.bin", "bytes=-5", 206),
        ("GET", "/data.bin", "bytes=%d-" % DATA_LEN, 416), ("GET", "/data.bin", "bytes=0-1,100-101", 206),
        ("HEAD", "/data.bin", "", 200), ("GET", "/missing.bin", "", 404), ("GET", "/sub/", "", 200)]
    # keep-alive: one connection served all nine, in order
    assert len({e["connection"] for e in log}) == 1
    assert [e["connection_requests"] for e in log] == list(range(1, 10))
    assert log[0]["body_bytes"] == DATA_LEN and log[1]["body_bytes"] == 10
    assert all(e["protocol"] == "HTTP/1.1" for e in log)


def test_nginx_delay_holds_each_request_and_keeps_ranges(www):
    """nginx(delay_ms=): each request waits on nginx's timer (echo_sleep) and is then
    served by the static handler: Range, HEAD, 404 and listings as without the delay,
    on one keep-alive connection, logged under the URI the client asked for."""
    root, data = www
    with servers.nginx(root, delay_ms=60) as s:
        c = conn(s.url)
        cases = [("/data.bin", {"Range": "bytes=10-19"}, "GET", 206, data[10:20]),
                 ("/data.bin", {}, "HEAD", 200, b""),
                 ("/data.bin", {}, "GET", 200, data),
                 ("/missing.bin", {}, "GET", 404, None)]
        for path, headers, method, status, want in cases:
            t = time.monotonic()
            r, body = get(c, path, headers, method)
            took = time.monotonic() - t
            assert r.status == status, (path, r.status)
            if want is not None:
                assert body == want
            assert took >= 0.055, (path, took)      # held for the delay: never less
        r, body = get(c, "/sub/")
        assert [e["name"] for e in json.loads(body)] == ["b.txt"]
        c.close()
        log = s.access_log(wait_for=5)
        assert [(e["method"], e["uri"], e["status"]) for e in log] == [
            ("GET", "/data.bin", 206), ("HEAD", "/data.bin", 200), ("GET", "/data.bin", 200),
            ("GET", "/missing.bin", 404), ("GET", "/sub/", 200)]
        assert len({e["connection"] for e in log}) == 1
        assert all(e["request_time"] >= 0.055 for e in log)
        # no helper process: nginx's master and its one worker are all there is
        assert "echo_sleep" in open(os.path.join(s.prefix, "nginx.conf")).read()


def test_nginx_http2_cleartext_and_tls(ng, www, tmp_path):
    data = www[1]
    curl = shutil.which("curl")
    if not curl:
        pytest.skip("curl is not installed (scripts/install-deps.sh)")
    out = tmp_path / "part"
    p = subprocess.run([curl, "-sS", "--http2-prior-knowledge", "-r", "1000-2999", "-o", str(out),
                        "-w", "%{http_version} %{http_code}", ng.url_h2c + "/data.bin"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "2 206"
    assert out.read_bytes() == data[1000:3000]
    # TLS: verified against the test CA; HTTP/2 offered through ALPN
    p = subprocess.run([curl, "-sS", "--cacert", ng.ca_file, "-o", str(out), "-w", "%{http_version}",
                        ng.url_https + "/data.bin"], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, "2"), p.stderr
    assert out.read_bytes() == data
    ctx = ssl.create_default_context(cafile=ng.ca_file)
    req = urllib.request.Request(ng.url_https + "/data.bin", headers={"Range": "bytes=5-9"})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        assert (r.status, r.read()) == (206, data[5:10])
    # without the CA the certificate is refused: clients verify by default
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.urlopen(ng.url_https + "/data.bin", context=ssl.create_default_context(), timeout=30)
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError)
    log = ng.access_log(wait_for=3)
    assert {(e["protocol"], e["scheme"]) for e in log} >= {("HTTP/2.0", "http"), ("HTTP/2.0", "https"),
                                                           ("HTTP/1.1", "https")}


# ----------------------------------------------------------------------------- moto (S3)

def s3_client(endpoint, key="testing", secret="testing"):
    botocore_session = pytest.importorskip("botocore.session", reason="python3-botocore is not installed")
    from botocore.config import Config
    return botocore_session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 0}))


def test_moto_s3_with_botocore(www):
    data = www[1]
    with servers.moto_server(proxy=True) as s3:
        assert s3.env["AWS_ENDPOINT_URL"] == s3.endpoint != s3.direct_endpoint
        c = s3_client(s3.endpoint)
        c.create_bucket(Bucket="stoker-test")
        c.put_object(Bucket="stoker-test", Key="shards/data.bin", Body=data)
        for i in range(5):
            c.put_object(Bucket="stoker-test", Key="many/%02d" % i, Body=b"%d" % i)
        # ListObjectsV2 with continuation tokens
        keys, token = [], None
        while True:
            kw = {"ContinuationToken": token} if token else {}
            page = c.list_objects_v2(Bucket="stoker-test", Prefix="many/", MaxKeys=2, **kw)
            keys += [o["Key"] for o in page["Contents"]]
            if not page["IsTruncated"]:
                break
            token = page["NextContinuationToken"]
        assert keys == ["many/%02d" % i for i in range(5)]
        got = c.get_object(Bucket="stoker-test", Key="shards/data.bin", Range="bytes=100-1099")
        assert got["Body"].read() == data[100:1100]
        assert got["ContentRange"] == "bytes 100-1099/%d" % DATA_LEN
        assert c.head_object(Bucket="stoker-test", Key="shards/data.bin")["ContentLength"] == DATA_LEN
        # the helpers (unsigned, straight to moto) see the same store
        assert s3.get_object("stoker-test", "shards/data.bin") == data
        s3.create_bucket("other")
        assert s3.upload_dir("other", "p/", os.path.join(www[0], "sub")) == ["p/b.txt"]
        assert c.get_object(Bucket="other", Key="p/b.txt")["Body"].read() == b"hello, ranges\n"

        # counting: the pass-through proxy saw every client request, with its Range
        reqs = s3.proxy.requests()
        assert len(reqs) == 1 + 1 + 5 + 3 + 1 + 1 + 1
        assert all(r["fault"] is None for r in reqs)
        ranged = [r for r in reqs if r["range"]]
        assert [(r["method"], r["path"], r["range"], r["status"], r["bytes"]) for r in ranged] == [
            ("GET", "/stoker-test/shards/data.bin", "bytes=100-1099", 206, 1000)]
        assert [r["req_bytes"] for r in reqs if r["path"] == "/stoker-test/shards/data.bin"][0] == DATA_LEN
        # and moto's own log has them too (plus the helpers' requests)
        mlog = s3.requests()
        gets = [r for r in mlog if (r["method"], r["path"]) == ("GET", "/stoker-test/shards/data.bin")]
        assert len(gets) == 2
        assert any(r["status"] == 206 for r in mlog)

        # a fault on an upload: the 503 reaches the client, the object is not written
        s3.proxy.configure(schedule={len(reqs) + 1: "503"})
        with pytest.raises(Exception) as e:
            c.put_object(Bucket="stoker-test", Key="failed", Body=b"x" * 1000)
        assert "503" in str(e.value)
        with pytest.raises(Exception):
            c.head_object(Bucket="stoker-test", Key="failed")
        s3.reset()
        assert "Buckets" not in c.list_buckets() or c.list_buckets()["Buckets"] == []


# ----------------------------------------------------------------------------- fault proxy

def test_proxy_faults_by_schedule(ng, www):
    data = www[1]
    sched = {2: "reset", 3: "503", 4: "truncate", 5: "500", 6: "429", 7: ("stall", 0.2),
             8: ("stall_body", 0.2)}
    with servers.fault_proxy(ng.url, schedule=sched) as px:
        c = conn(px.url)
        r, body = get(c, "/data.bin")                              # 1: clean
        assert (r.status, body) == (200, data)
        with pytest.raises(ConnectionResetError):                  # 2: RST
            get(c, "/data.bin", {"Range": "bytes=0-99"})
        c = conn(px.url)
        r, body = get(c, "/data.bin")                              # 3
        assert r.status == 503 and b"injected" in body
        c.request("GET", "/data.bin", headers={"Range": "bytes=0-99999"})   # 4: truncated
        r = c.getresponse()
        assert r.status == 206 and r.getheader("Content-Length") == "100000"
        with pytest.raises(http.client.IncompleteRead) as e:
            r.read()
        assert e.value.partial == data[:50000]
        c = conn(px.url)
        r, body = get(c, "/data.bin")                              # 5
        assert r.status == 500
        r, body = get(c, "/data.bin")                              # 6
        assert r.status == 429 and r.getheader("Retry-After") == "1"
        t = time.monotonic()
        r, body = get(c, "/data.bin", {"Range": "bytes=7-70"})      # 7: stalled, then complete
        assert (r.status, body) == (206, data[7:71])
        assert time.monotonic() - t >= 0.2
        r, body = get(c, "/data.bin")                              # 8: stalled mid-body, complete
        assert (r.status, body) == (200, data)
        r, body = get(c, "/sub/b.txt")                             # 9: clean again, same connection
        assert (r.status, body) == (200, b"hello, ranges\n")
        recs = px.requests()
    assert [r["n"] for r in recs] == list(range(1, 10))
    assert [r["fault"] for r in recs] == [None, "reset", "503", "truncate", "500", "429", "stall",
                                          "stall_body", None]
    assert [r["status"] for r in recs] == [200, None, 503, 206, 500, 429, 206, 200, 200]
    assert [r["upstream_status"] for r in recs] == [200, None, None, 206, None, None, 206, 200, 200]
    assert [r["range"] for r in recs][:4] == [None, "bytes=0-99", None, "bytes=0-99999"]
    assert recs[3]["bytes"] == 50000 and recs[7]["bytes"] == DATA_LEN
    assert recs[8]["conn"] == recs[7]["conn"] == recs[4]["conn"]
    # only the forwarded requests reached nginx
    assert px.counts() == {"requests": 9, "bytes": sum(r["bytes"] for r in recs),
                           "faults": {"reset": 1, "503": 1, "truncate": 1, "500": 1, "429": 1,
                                      "stall": 1, "stall_body": 1}}


def test_proxy_keeps_a_connection_after_head(ng, www):
    """HEAD, then GETs, on one keep-alive connection (what a client that opens an
    object and then reads it does): all forwarded over the proxy's one upstream
    connection, none answered 502."""
    data = www[1]
    with servers.fault_proxy(ng.url) as px:
        c = conn(px.url)
        r, body = get(c, "/data.bin", method="HEAD")
        assert (r.status, body, r.getheader("Content-Length")) == (200, b"", str(DATA_LEN))
        r, body = get(c, "/data.bin", {"Range": "bytes=5-9"})
        assert (r.status, body) == (206, data[5:10])
        r, body = get(c, "/sub/b.txt", method="HEAD")
        assert r.status == 200
        r, body = get(c, "/sub/b.txt")
        assert (r.status, body) == (200, b"hello, ranges\n")
        recs = px.requests()
    assert [(r["method"], r["status"], r["fault"]) for r in recs] == [
        ("HEAD", 200, None), ("GET", 206, None), ("HEAD", 200, None), ("GET", 200, None)]
    assert len({r["conn"] for r in recs}) == 1


def test_proxy_stall_and_latency_hold_back_the_response(ng, www):
    data = www[1]
    with servers.fault_proxy(ng.url, schedule={1: ("stall", 30), 2: ("stall_body", 30)},
                             latency_ms=150) as px:
        c = conn(px.url, timeout=0.5)
        with pytest.raises(socket.timeout):                  # nothing within 0.5 s of a 30 s stall
            get(c, "/data.bin")
        c = conn(px.url, timeout=0.5)
        c.request("GET", "/data.bin")
        r = c.getresponse()                                  # headers come, then half the body
        assert r.status == 200
        got = b""
        with pytest.raises(socket.timeout):
            while True:
                chunk = r.read1(65536)
                assert chunk, "the body ended instead of stalling"
                got += chunk
        assert got == data[:len(got)] and len(got) >= DATA_LEN // 2
        c = conn(px.url)
        t = time.monotonic()
        r, body = get(c, "/sub/b.txt")                       # latency: a lower bound, never flaky
        assert (r.status, body) == (200, b"hello, ranges\n")
        assert time.monotonic() - t >= 0.15
        # stop() ends the two stalls at once (the test does not wait 30 s)


def test_proxy_forwards_bodies_and_faults_uploads():
    with servers.moto_server() as s3:
        s3.create_bucket("upl")
        body = os.urandom(300000)
        sched = {2: "reset", 4: "truncate", 5: "truncate"}
        with servers.fault_proxy(s3.direct_endpoint, schedule=sched) as px:
            c = conn(px.url)
            auth = {"Authorization": servers.MotoServer._dummy_auth()}
            # 1: PUT with Expect: 100-continue, body forwarded byte-exact
            c.request("PUT", "/upl/a", body=body, headers=dict(auth, Expect="100-continue"))
            r = c.getresponse()
            r.read()
            assert r.status == 200
            assert s3.get_object("upl", "a") == body
            # 2: reset after the body was read: nothing stored
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                c.request("PUT", "/upl/b", body=body, headers=auth)
                c.getresponse().read()
            with pytest.raises(urllib.error.HTTPError) as e:
                s3.get_object("upl", "b")
            assert e.value.code == 404
            # 3: a chunked upload is forwarded (with a Content-Length)
            c = conn(px.url)
            c.request("PUT", "/upl/c", body=iter([body[:1000], body[1000:]]), headers=auth,
                      encode_chunked=True)
            r = c.getresponse()
            assert (r.status, r.read()) == (200, b"")
            assert s3.get_object("upl", "c") == body
            # 4: a download truncated
            c.request("GET", "/upl/c", headers=auth)
            r = c.getresponse()
            with pytest.raises(http.client.IncompleteRead) as e:
                r.read()
            assert e.value.partial == body[:150000]
            # 5: an empty response cannot be cut: the connection is reset instead
            c = conn(px.url)
            with pytest.raises((ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
                c.request("PUT", "/upl/d", body=b"d", headers=auth)
                c.getresponse().read()
            recs = px.requests()
        assert [(r["method"], r["path"], r["req_bytes"], r["fault"], r["upstream_status"]) for r in recs] == [
            ("PUT", "/upl/a", 300000, None, 200), ("PUT", "/upl/b", 300000, "reset", None),
            ("PUT", "/upl/c", 300000, None, 200), ("GET", "/upl/c", 0, "truncate", 200),
            ("PUT", "/upl/d", 1, "reset", 200)]


def test_proxy_rates_are_seeded_per_request(ng):
    rates = {"reset": 0.1, "status": 0.1, "truncate": 0.1}
    paths = ["/sub/b.txt?i=%d" % i for i in range(60)]

    def run(seed):
        with servers.fault_proxy(ng.url, rates=rates, seed=seed) as px:
            c = conn(px.url)
            for p in paths + paths:      # every request twice: the second is a "retry"
                try:
                    r, body = get(c, p)
                    assert r.status in (200, 500, 503, 429)
                    if r.status == 200:
                        assert body == b"hello, ranges\n"
                except (ConnectionError, http.client.HTTPException):
                    c = conn(px.url)
            return [(r["path"], r["fault"]) for r in px.requests()]

    a, b, other = run(7), run(7), run(8)
    assert a == b                                   # same seed, same faults on the same requests
    assert a != other
    kinds = {f for _, f in a}
    assert kinds <= {None, "reset", "503", "500", "429", "truncate"}
    assert {"reset", "truncate"} <= kinds and kinds & {"503", "500", "429"}
    first, second = a[:60], a[60:]
    # a retry gets a fresh draw: the two attempts are not faulted alike
    assert [f for _, f in first] != [f for _, f in second]


def test_proxy_down_and_upstream_down(ng):
    with servers.fault_proxy(ng.url, down=True) as px:
        for _ in range(3):
            with pytest.raises((ConnectionError, http.client.HTTPException)):
                get(conn(px.url), "/sub/b.txt")
        assert px.counts()["faults"] == {"down": 3}
        px.configure(down="hang")
        with pytest.raises(socket.timeout):
            get(conn(px.url, timeout=0.3), "/sub/b.txt")
        px.configure(down=False)
        r, body = get(conn(px.url), "/sub/b.txt")
        assert (r.status, body) == (200, b"hello, ranges\n")
    # an upstream that is not there: 502 from the proxy, recorded
    with servers.fault_proxy("http://127.0.0.1:%d" % servers.free_port()) as px:
        r, body = get(conn(px.url), "/x")
        assert r.status == 502
        assert px.requests()[0]["fault"] == "upstream_error"


def test_proxy_as_a_process(ng, www):
    data = www[1]
    with servers.fault_proxy(ng.url, schedule={2: "503"}, rates={"truncate": 0.0}, latency_ms=1,
                             process=True) as px:
        c = conn(px.url)
        r, body = get(c, "/data.bin", {"Range": "bytes=3-12"})
        assert (r.status, body) == (206, data[3:13])
        r, body = get(c, "/data.bin")
        assert r.status == 503
        with urllib.request.urlopen(px.url + "/__stoker_proxy/stats", timeout=30) as s:
            stats = json.loads(s.read())
        assert [(q["range"], q["fault"]) for q in stats["requests"]] == [("bytes=3-12", None), (None, "503")]
        assert stats["config"]["latency_ms"] == 1
        px.configure(down="reset")
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            get(conn(px.url), "/data.bin")
        px.clear()
        assert px.requests() == []
    p = subprocess.run([servers.PYTHON, os.path.join(NET, "fault_proxy.py"), "--help"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "--latency-ms" in p.stdout


def test_schedule_rejects_unknown_faults():
    with pytest.raises(ValueError, match="unknown fault"):
        servers._fp.FaultProxy("http://127.0.0.1:1", schedule={1: "explode"})
    with pytest.raises(ValueError, match="probability"):
        servers._fp.FaultProxy("http://127.0.0.1:1", rates={"reset": 2})


# ----------------------------------------------------------------------------- shaped namespace

def need_netns():
    why = servers.netns_missing()
    if why:
        pytest.skip(why)


def test_shaped_netns_applies_tbf_and_reports_netem(www):
    need_netns()
    root, data = www
    with servers.shaped_netns(rate="200mbit", delay_ms=5) as ns:
        q = ns.qdisc()
        assert "tbf" in q and "rate 200Mbit" in q, q
        refusal = servers.netem_refusal()
        if refusal is None:
            assert ns.netem_refused is None and ns.delay_ms == 5 and ns.fallback_latency_ms == 0
            assert "netem" in q and "delay 5ms" in q, q
        else:
            # this kernel has no sch_netem: said clearly, and the RTT is left to the proxy
            assert ns.netem_refused and "netem" in ns.netem_refused and "netem" not in q
            assert ns.delay_ms is None and ns.fallback_latency_ms == 10
            assert "netem refused by the kernel" in ns.applied
        with servers.nginx(root, netns=ns) as s, \
                servers.fault_proxy(s.url, netns=ns, latency_ms=ns.fallback_latency_ms) as px:
            code = ("import hashlib,sys,urllib.request;"
                    "print(hashlib.sha256(urllib.request.urlopen(sys.argv[1]).read()).hexdigest())")
            for url in (s.url, px.url):
                p = ns.run([servers.PYTHON, "-c", code, url + "/data.bin"], capture_output=True, text=True)
                assert p.stdout.strip() == hashlib.sha256(data).hexdigest(), p.stderr
            # not reachable from outside the namespace
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", int(s.url.rsplit(":", 1)[1])), 1).close()
            assert [q["fault"] for q in px.requests()] == [None]
            assert len(s.access_log(wait_for=2)) == 2
        name = ns.name
    assert name not in subprocess.run([servers._which("ip"), "netns", "list"], capture_output=True,
                                      text=True).stdout


def test_netns_run_script():
    need_netns()
    script = os.path.join(NET, "netns_run.sh")
    p = subprocess.run([script, "--rate", "300mbit", "--delay-ms", "4", "--", "bash", "-c",
                        "tc qdisc show dev lo; echo ns=$STOKER_NETNS latency=$STOKER_NETNS_LATENCY_MS;"
                        "exit 5"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 5, p.stderr
    assert "tbf" in p.stdout and "rate 300Mbit" in p.stdout
    assert "netns_run.sh: namespace stk-run-" in p.stderr and "tbf rate 300mbit" in p.stderr
    if servers.netem_refusal() is None:
        assert "netem delay 4ms" in p.stderr and "latency=0" in p.stdout
    else:
        assert "netem refused by the kernel" in p.stderr and "latency=8" in p.stdout
    name = p.stdout.split("ns=")[1].split()[0]
    assert name not in subprocess.run([servers._which("ip"), "netns", "list"], capture_output=True,
                                      text=True).stdout
    p = subprocess.run([script, "--rate", "fast", "--", "true"], capture_output=True, text=True)
    assert p.returncode != 0 and "tc units" in p.stderr


def test_moto_checks_signatures_on_request(tmp_path):
    with servers.moto_server(proxy=True) as s3:
        s3.create_bucket("signed")
        s3.put_object("signed", "k", b"0123456789")
        key, secret = s3.require_signatures()
        assert s3.env["AWS_ACCESS_KEY_ID"] == key and s3.env["AWS_SECRET_ACCESS_KEY"] == secret
        good = s3_client(s3.endpoint, key, secret)
        assert good.get_object(Bucket="signed", Key="k", Range="bytes=2-4")["Body"].read() == b"234"
        good.put_object(Bucket="signed", Key="k2", Body=b"up")
        assert s3.get_object("signed", "k2") == b"up"          # the helpers sign with botocore now
        # a wrong secret, and the default key, are refused as AWS refuses them
        from botocore.exceptions import ClientError
        bad = s3_client(s3.endpoint, key, secret + "x")
        with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
            bad.get_object(Bucket="signed", Key="k")
        with pytest.raises(ClientError, match="InvalidAccessKeyId"):
            s3_client(s3.endpoint).get_object(Bucket="signed", Key="k")
        # an independent signer (curl --aws-sigv4), virtual-hosted addressing on *.localhost
        curl = shutil.which("curl")
        if curl:
            port = s3.endpoint.rsplit(":", 1)[1]
            for user, want in (("%s:%s" % (key, secret), "200"), ("%s:wrong" % key, "403")):
                p = subprocess.run([curl, "-sS", "-o", str(tmp_path / "o"), "-w", "%{http_code}",
                                    "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", user,
                                    # S3 wants the payload hash header; curl signs it when given
                                    "-H", "x-amz-content-sha256: " + hashlib.sha256(b"").hexdigest(),
                                    "http://signed.localhost:%s/k" % port],
                                   capture_output=True, text=True, timeout=60)
                assert p.stdout == want, p.stderr
            assert (tmp_path / "o").read_bytes().startswith(b"<?xml")     # the 403's S3 error
            assert s3.proxy.requests()[-1]["path"] == "/k"
        s3.reset()
        assert s3.access_key == "testing"
        assert s3_client(s3.endpoint).list_buckets()["Buckets"] == []


def test_servers_command_line(www):
    root, data = www
    code = ("import os,sys,urllib.request;"
            "d=urllib.request.urlopen(os.environ['STOKER_TEST_PROXY_URL']+'/data.bin').read();"
            "s=urllib.request.urlopen(os.environ['STOKER_TEST_HTTP_URL']+'/sub/b.txt').read();"
            "sys.exit(3 if (len(d), s) == (%d, b'hello, ranges\\n') else 1)" % DATA_LEN)
    p = subprocess.run([servers.PYTHON, os.path.join(NET, "servers.py"), "--nginx", root, "--proxy", "nginx",
                        "--", servers.PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    p = subprocess.run([servers.PYTHON, os.path.join(NET, "servers.py"), "--proxy", "moto", "--", "true"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--proxy moto needs --moto" in p.stderr
