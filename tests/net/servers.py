"""Real servers for stoker's network tests and benchmarks, started on loopback.

Context managers (stdlib only; usable from pytest and from bench scripts):

  nginx(root, http2=False, tls=False, netns=None)      Debian's nginx serving `root`
  moto_server(proxy=False, netns=None)                  moto's S3 API (build/moto-venv)
  fault_proxy(upstream_url, schedule=None, rates=None,  the fault-injecting reverse proxy
              latency_ms=0, seed=0, down=False,         (tests/net/fault_proxy.py), in this
              process=False, netns=None, stall_s=2.0)   process or as a separate one
  shaped_netns(rate="1gbit", delay_ms=10, burst=None)   a network namespace whose loopback
                                                        is shaped with tbf (+ netem delay)

Also a command line (main() below): `python3 tests/net/servers.py --nginx ROOT --moto
--proxy nginx -- COMMAND` runs COMMAND with the servers up and their addresses in
its environment (STOKER_TEST_HTTP_URL, STOKER_TEST_S3_ENDPOINT, ...), for C tests.

Each server runs in the foreground as a child of the caller on a free port,
with its files in a fresh temporary folder, and is stopped (and the folder
removed) when the `with` block ends, also on an exception.

A server that cannot run here (nginx or moto not installed, no permission to
create a network namespace) raises Unavailable with the reason. Under pytest
Unavailable is pytest's skip exception, so the test is skipped with that
reason, which tests/python/conftest.py turns into a failure under CI=true,
except for reasons that start with KERNEL_REFUSES (the issue allows a skip
"where the kernel refuses"). Outside pytest it is a RuntimeError.

Loopback shaping: a qdisc on `lo` sees every packet of both directions, so
netem's `delay_ms` is one way and the round trip is 2 x delay_ms. Where the
kernel has no netem (sch_netem missing: "Specified qdisc kind is unknown"),
shaped_netns applies only the tbf rate and says so (.netem_refused); the RTT
can then be emulated with fault_proxy(latency_ms=ns.fallback_latency_ms), which
delays each response's first byte (not TCP connects).
"""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

NET = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(NET))
if NET not in sys.path:
    sys.path.insert(0, NET)
import fault_proxy as _fp  # noqa: E402  (tests/net/fault_proxy.py)

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# A skip reason with this prefix is allowed under CI (see conftest.py).
KERNEL_REFUSES = "kernel refuses: "
SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


if "pytest" in sys.modules:
    import pytest

    class Unavailable(pytest.skip.Exception):
        """A server cannot run here (pytest: a skip; fails under CI unless the kernel refuses)."""
        def __init__(self, msg):
            super().__init__(msg=msg, allow_module_level=True)
else:
    class Unavailable(RuntimeError):
        """A server cannot run here; the message says why."""


def _which(name):
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))


def free_port(host="127.0.0.1"):
    """A TCP port nothing listens on right now (also: a server that is down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_port(port, proc, what, log=None, netns=None, timeout=15.0):
    """Wait until 127.0.0.1:port accepts connections (inside netns when given)."""
    deadline = time.monotonic() + timeout
    if netns is not None:
        # The namespace's loopback is not ours: probe from inside it.
        code = ("import socket,sys,time\n"
                "d=time.monotonic()+%f\n"
                "while time.monotonic()<d:\n"
                "  try: socket.create_connection(('127.0.0.1',%d),0.5).close(); sys.exit(0)\n"
                "  except OSError: time.sleep(0.02)\n"
                "sys.exit(1)\n" % (timeout, port))
        r = subprocess.run(_netns_argv(netns, [PYTHON, "-c", code]))
        if r.returncode == 0 and proc.poll() is None:
            return
    else:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                return
            except OSError:
                time.sleep(0.02)
    detail = ""
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            detail = f.read()[-2000:]
    raise RuntimeError("%s did not start on port %d (exit status %s): %s"
                       % (what, port, proc.poll(), detail.strip()))


def _stop(proc, sig=signal.SIGTERM, timeout=10.0):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _netns_argv(netns, argv):
    if netns is None:
        return list(argv)
    name = netns.name if hasattr(netns, "name") else str(netns)
    return [_which("ip") or "ip", "netns", "exec", name] + list(argv)


_HTTP_IN_NETNS = """
import sys, urllib.request, json
a = json.loads(sys.argv[1])
req = urllib.request.Request(a["url"], data=sys.stdin.buffer.read() if a["body"] else None,
                             method=a["method"], headers=a["headers"])
with urllib.request.urlopen(req, timeout=30) as r:
    sys.stdout.buffer.write(r.read())
"""


def _http(method, url, body=None, headers=None, netns=None):
    """One HTTP request with urllib; from inside `netns` when given. Returns the body."""
    if netns is None:
        req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            # name the server's reason (S3: <Code>NoSuchKey</Code>...) in the message
            detail = e.read()[:500].decode(errors="replace")
            raise urllib.error.HTTPError(url, e.code, "%s %s: %s" % (method, e.msg, detail),
                                         e.headers, None) from None
    arg = json.dumps({"url": url, "method": method, "headers": headers or {},
                      "body": body is not None})
    r = subprocess.run(_netns_argv(netns, [PYTHON, "-c", _HTTP_IN_NETNS, arg]), input=body or b"",
                       capture_output=True)
    if r.returncode:
        raise RuntimeError("%s %s (in namespace): %s" % (method, url, r.stderr.decode(errors="replace")))
    return r.stdout


def _read_json_lines(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path, "rb") as f:
        data = f.read()
    for line in data.split(b"\n")[:-1]:     # only complete lines
        if line.strip():
            out.append(json.loads(line))
    return out


# --------------------------------------------------------------------------- nginx

def nginx_missing():
    """None when nginx can run here, else the reason."""
    if not _which("nginx"):
        return ("nginx is not installed (Debian package nginx-light; scripts/install-deps.sh)")
    return None


ECHO_MODULE_PATHS = ("/usr/lib/nginx/modules/ngx_http_echo_module.so",
                     "/usr/share/nginx/modules/ngx_http_echo_module.so")


def _echo_module():
    """The path of nginx's echo module (Debian package libnginx-mod-http-echo, which
    nginx-light depends on): its echo_sleep holds a request on nginx's own timer,
    so a delay costs no process and no CPU."""
    for p in ECHO_MODULE_PATHS:
        if os.path.exists(p):
            return p
    raise Unavailable("nginx's echo module is not installed (Debian package "
                      "libnginx-mod-http-echo; scripts/install-deps.sh), needed for nginx(delay_ms=)")


class Nginx:
    """A running nginx (from nginx()).

    url        "http://127.0.0.1:PORT" (HTTP/1.1, keep-alive, Range)
    url_h2c    "http://127.0.0.1:PORT2" with http2=True: HTTP/2 cleartext with prior
               knowledge only (curl --http2-prior-knowledge); an HTTP/1.1 request there fails
    url_https  "https://127.0.0.1:PORT3" with tls=True (HTTP/2 through ALPN if http2=True),
               certificate for 127.0.0.1 and localhost signed by the CA in ca_file
    ca_file    the test CA's PEM (tls=True), for CURLOPT_CAINFO / ssl contexts
    root       the served folder; prefix: nginx's temporary folder
    """

    def __init__(self, root, prefix):
        self.root, self.prefix = root, prefix
        self.url = self.url_h2c = self.url_https = self.ca_file = None
        self.proc = None
        self.log_path = os.path.join(prefix, "access.log")

    def access_log(self, wait_for=0, timeout=5.0):
        """The requests served so far, one dict each: method, uri, range ("" without a
        Range header), status, body_bytes, bytes, connection (serial),
        connection_requests (1 for a connection's first request), protocol
        ("HTTP/1.1", "HTTP/2.0"), port, scheme, request_time. nginx logs a request
        when it finishes, a moment after the client has its last byte: wait_for=N
        waits (up to timeout seconds) until N requests are logged."""
        deadline = time.monotonic() + timeout
        while True:
            log = _read_json_lines(self.log_path)
            if len(log) >= wait_for or time.monotonic() > deadline:
                return log
            time.sleep(0.01)

    def clear_log(self):
        """Forget the requests logged so far (truncates access.log; nginx appends)."""
        with open(self.log_path, "wb"):
            pass

    def error_log(self):
        with open(os.path.join(self.prefix, "error.log"), errors="replace") as f:
            return f.read()


def _make_cert(d):
    """A test CA and a server certificate for 127.0.0.1/localhost, with openssl."""
    openssl = _which("openssl")
    if not openssl:
        raise Unavailable("openssl is not installed (needed for nginx(tls=True))")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        r = subprocess.run([openssl, *args], cwd=d, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr))
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "3",
        "-subj", "/CN=stoker test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "3", "-extfile", "server.ext")
    return os.path.join(d, "ca.pem"), os.path.join(d, "server.pem"), os.path.join(d, "server.key")


@contextlib.contextmanager
def nginx(root, http2=False, tls=False, netns=None, timeout=15.0, delay_ms=0):
    """Serve folder `root` with Debian's nginx on loopback; yields an Nginx.

    http2=True adds a second port, url_h2c, speaking HTTP/2 cleartext with prior
    knowledge (nginx 1.22 has no h2c upgrade and no HTTP/1.1 fallback on such a
    port). tls=True adds url_https with a fresh test CA (ca_file). netns: a
    shaped_netns() object (or a namespace name) to run nginx inside. delay_ms:
    every response's first byte is that late (a link's round-trip time where
    netem is refused): the echo module's echo_sleep waits on nginx's own timer,
    then echo_exec hands the request to nginx's static file serving (Range and
    all), so the delay costs no extra process and no CPU per byte."""
    why = nginx_missing()
    if why:
        raise Unavailable(why)
    root = os.path.abspath(root)
    prefix = tempfile.mkdtemp(prefix="stoker-nginx-")
    with open(os.path.join(NET, "nginx.conf.in")) as f:
        template = f.read()
    server = Nginx(root, prefix)
    try:
        cert = _make_cert(prefix) if tls else None
        delay_conf = load_modules = ""
        if delay_ms:
            load_modules = "load_module %s;" % _echo_module()
            delay_conf = "echo_sleep %.3f; echo_exec /__stoker_files$uri;" % (delay_ms / 1000.0)
        for attempt in range(5):
            ports = {"http": free_port()}
            if http2:
                ports["h2c"] = free_port()
            if tls:
                ports["https"] = free_port()
            listen = ["listen 127.0.0.1:%d;" % ports["http"]]
            if http2:
                listen.append("listen 127.0.0.1:%d http2;" % ports["h2c"])
            if tls:
                listen.append("listen 127.0.0.1:%d ssl%s;" % (ports["https"], " http2" if http2 else ""))
                listen.append("ssl_certificate %s;" % cert[1])
                listen.append("ssl_certificate_key %s;" % cert[2])
            conf = (template.replace("@PREFIX@", prefix).replace("@ROOT@", root)
                    .replace("@USER@", "user root root;" if os.geteuid() == 0 else "")
                    .replace("@LISTEN@", "\n        ".join(listen))
                    .replace("@DELAY@", delay_conf).replace("@MODULES@", load_modules))
            conf_path = os.path.join(prefix, "nginx.conf")
            with open(conf_path, "w") as f:
                f.write(conf)
            err = os.path.join(prefix, "error.log")
            with open(os.path.join(prefix, "stderr.log"), "ab") as out:
                proc = subprocess.Popen(_netns_argv(netns, [_which("nginx"), "-p", prefix, "-c", conf_path,
                                                            "-e", err]),
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            server.proc = proc
            try:
                for p in ports.values():
                    _wait_port(p, proc, "nginx", err, netns, timeout)
                break
            except RuntimeError:
                _stop(proc)
                if attempt < 4 and "Address already in use" in server.error_log():
                    continue     # another process took the port between free_port() and bind
                raise
        server.url = "http://127.0.0.1:%d" % ports["http"]
        if http2:
            server.url_h2c = "http://127.0.0.1:%d" % ports["h2c"]
        if tls:
            server.url_https = "https://127.0.0.1:%d" % ports["https"]
            server.ca_file = cert[0]
        yield server
    finally:
        if server.proc is not None:
            _stop(server.proc)
        shutil.rmtree(prefix, ignore_errors=True)


# --------------------------------------------------------------------------- moto (S3)

def moto_server_path():
    """The moto_server executable: $STOKER_MOTO_SERVER, else build/moto-venv's."""
    return os.environ.get("STOKER_MOTO_SERVER") or os.path.join(ROOT, "build", "moto-venv", "bin",
                                                                "moto_server")


def moto_missing():
    """None when the moto S3 server can run here, else the reason."""
    path = moto_server_path()
    if not os.access(path, os.X_OK):
        return ("the moto S3 server is not installed (%s): tests/net/install_moto.sh puts "
                "moto[server] into build/moto-venv" % path)
    return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WERKZEUG_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+" (?P<status>\d{3}) ')


class MotoServer:
    """A running moto S3 server (from moto_server()).

    endpoint         "http://127.0.0.1:PORT": where clients send requests (the counting
                     proxy's address with proxy=True, else moto's own). Virtual-hosted
                     addressing works too with http://BUCKET.localhost:PORT (libcurl and
                     curl resolve *.localhost to loopback; moto reads the bucket from Host)
    direct_endpoint  moto's own address
    proxy            the FaultProxy in front of moto (proxy=True), else None
    access_key, secret_key   "testing"/"testing" until require_signatures()
    env              {AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
                     AWS_DEFAULT_REGION, AWS_ENDPOINT_URL} for a client
    region           "us-east-1"

    By default moto checks that a request carries SigV4 credentials but neither the
    key nor the signature: any signer passes. require_signatures() makes it check
    both, as AWS does (a wrong signature: 403 SignatureDoesNotMatch).
    """

    def __init__(self, prefix, region, netns):
        self.prefix, self.region, self.netns = prefix, region, netns
        self.endpoint = self.direct_endpoint = None
        self.proxy = None
        self.proc = None
        self.log_path = os.path.join(prefix, "moto.log")
        self.access_key = self.secret_key = "testing"
        self.signatures_checked = False

    @property
    def env(self):
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": self.endpoint}

    @staticmethod
    def _dummy_auth(service="s3"):
        # What the helpers send while moto does not check signatures.
        return ("AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/%s/aws4_request, "
                "SignedHeaders=host, Signature=%s" % (service, "0" * 64))

    def _request(self, method, path, body=None, headers=None):
        # Straight to moto (never through the proxy, so never counted there).
        h = dict(headers or {})
        url = self.direct_endpoint + path
        if self.signatures_checked:
            # Signed by botocore (Debian's python3-botocore), the reference signer.
            from botocore.auth import S3SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.credentials import Credentials
            req = AWSRequest(method=method, url=url, data=body or b"", headers=h)
            S3SigV4Auth(Credentials(self.access_key, self.secret_key), "s3", self.region).add_auth(req)
            h = dict(req.headers.items())
        else:
            h["Authorization"] = self._dummy_auth()
        return _http(method, url, body, h, self.netns)

    def require_signatures(self):
        """From now on moto checks every request's SigV4 signature and key, as AWS does.
        Creates an IAM user with an allow-all policy; its key becomes access_key /
        secret_key / env (the old "testing" key is then refused: 403 InvalidAccessKeyId).
        The helpers below keep working (they sign with botocore). Returns
        (access_key, secret_key)."""
        def iam(**kw):
            kw["Version"] = "2010-05-08"
            return _http("POST", self.direct_endpoint + "/", urllib.parse.urlencode(kw).encode(),
                         {"Authorization": self._dummy_auth("iam"),
                          "Content-Type": "application/x-www-form-urlencoded"}, self.netns).decode()
        iam(Action="CreateUser", UserName="stoker-test")
        r = iam(Action="CreateAccessKey", UserName="stoker-test")
        key = re.search("<AccessKeyId>(.*?)</AccessKeyId>", r)[1]
        secret = re.search("<SecretAccessKey>(.*?)</SecretAccessKey>", r)[1]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam(Action="PutUserPolicy", UserName="stoker-test", PolicyName="all",
            PolicyDocument=json.dumps(policy))
        # moto's switch: authenticate every request after the next 0 ones
        _http("POST", self.direct_endpoint + "/moto-api/reset-auth", b"0",
              {"Content-Type": "text/plain"}, self.netns)
        self.access_key, self.secret_key, self.signatures_checked = key, secret, True
        return key, secret

    def create_bucket(self, name):
        """Create bucket `name` (path-style PUT /name)."""
        self._request("PUT", "/" + urllib.parse.quote(name))

    def put_object(self, bucket, key, data):
        """Store bytes `data` as s3://bucket/key."""
        self._request("PUT", "/%s/%s" % (urllib.parse.quote(bucket), urllib.parse.quote(key)),
                      body=bytes(data), headers={"Content-Type": "application/octet-stream"})

    def get_object(self, bucket, key):
        return self._request("GET", "/%s/%s" % (urllib.parse.quote(bucket), urllib.parse.quote(key)))

    def upload_dir(self, bucket, prefix, local_dir):
        """Upload every file under local_dir as s3://bucket/prefix + relative path; returns the keys."""
        keys = []
        for dirpath, _, files in os.walk(local_dir):
            for fn in sorted(files):
                full = os.path.join(dirpath, fn)
                key = prefix + os.path.relpath(full, local_dir).replace(os.sep, "/")
                with open(full, "rb") as f:
                    self.put_object(bucket, key, f.read())
                keys.append(key)
        return sorted(keys)

    def reset(self):
        """Drop every bucket and object (moto's /moto-api/reset); after
        require_signatures(), also the IAM user: moto accepts any signature again."""
        _http("POST", self.direct_endpoint + "/moto-api/reset", b"", None, self.netns)
        if self.signatures_checked:
            _http("POST", self.direct_endpoint + "/moto-api/reset-auth", b"inf",
                  {"Content-Type": "text/plain"}, self.netns)
            self.access_key = self.secret_key = "testing"
            self.signatures_checked = False

    def requests(self):
        """The requests moto has answered, from its log: dicts with method, path (with the
        query), status. Includes this object's own helper requests; Range headers and
        byte counts are not logged by moto: use proxy=True and .proxy.requests() for those."""
        out = []
        if os.path.exists(self.log_path):
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    m = _WERKZEUG_LINE.search(_ANSI.sub("", line))
                    if m:
                        out.append({"method": m["method"], "path": m["path"], "status": int(m["status"])})
        return out


@contextlib.contextmanager
def moto_server(proxy=False, netns=None, region="us-east-1", timeout=30.0):
    """Run moto's S3 server on loopback; yields a MotoServer.

    proxy=True puts a pass-through fault_proxy in front (in this process) so every
    request is counted with its Range header and bytes (.proxy.requests()), and
    faults can be switched on later (.proxy.configure(...)); .endpoint is then the
    proxy. netns: run moto inside a shaped_netns() (proxy must be False)."""
    why = moto_missing()
    if why:
        raise Unavailable(why)
    if proxy and netns is not None:
        raise ValueError("moto_server(proxy=True) runs the proxy in this process, outside the netns")
    prefix = tempfile.mkdtemp(prefix="stoker-moto-")
    server = MotoServer(prefix, region, netns)
    px = None
    try:
        for attempt in range(5):
            port = free_port()
            env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                       AWS_DEFAULT_REGION=region, PYTHONUNBUFFERED="1")
            with open(server.log_path, "ab") as log:
                proc = subprocess.Popen(_netns_argv(netns, [moto_server_path(), "-H", "127.0.0.1",
                                                            "-p", str(port)]),
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
            server.proc = proc
            try:
                _wait_port(port, proc, "moto_server", server.log_path, netns, timeout)
                break
            except RuntimeError:
                _stop(proc)
                with open(server.log_path, errors="replace") as f:
                    if attempt < 4 and "already in use" in f.read():
                        continue
                raise
        server.direct_endpoint = server.endpoint = "http://127.0.0.1:%d" % port
        if proxy:
            px = _fp.FaultProxy(server.direct_endpoint).start()
            server.proxy = px
            server.endpoint = px.url
        yield server
    finally:
        if px is not None:
            px.stop()
        if server.proc is not None:
            _stop(server.proc)
        shutil.rmtree(prefix, ignore_errors=True)


# --------------------------------------------------------------------------- fault proxy

class ProxyProcess:
    """fault_proxy.py run as a separate process, with FaultProxy's methods (over HTTP)."""

    def __init__(self, proc, url, prefix, netns):
        self.proc, self.url, self.prefix, self.netns = proc, url, prefix, netns
        self.port = int(url.rsplit(":", 1)[1])

    def _call(self, method, what, body=None):
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        return json.loads(_http(method, self.url + _fp.CONTROL + what, data, None, self.netns))

    def stats(self):
        return self._call("GET", "stats")

    def requests(self):
        return self.stats()["requests"]

    def counts(self):
        return self.stats()["counts"]

    def config(self):
        return self.stats()["config"]

    def configure(self, **kw):
        self._call("POST", "config", {k: v for k, v in kw.items() if v is not None})

    def clear(self):
        self._call("POST", "clear")


@contextlib.contextmanager
def fault_proxy(upstream_url, schedule=None, rates=None, latency_ms=0, seed=0, down=False,
                process=False, netns=None, stall_s=2.0, retry_after=1):
    """A fault-injecting reverse proxy to upstream_url; yields an object with .url,
    .requests(), .counts(), .configure(**settings), .clear() (tests/net/fault_proxy.py
    documents the faults). process=True (implied by netns) runs it as a separate
    process, which a client in this process cannot slow down by holding the GIL."""
    if netns is not None:
        process = True
    if not process:
        with _fp.FaultProxy(upstream_url, schedule=schedule, rates=rates, latency_ms=latency_ms,
                            seed=seed, down=down, stall_s=stall_s, retry_after=retry_after) as p:
            yield p
        return
    prefix = tempfile.mkdtemp(prefix="stoker-proxy-")
    port_file = os.path.join(prefix, "port")
    argv = [PYTHON, os.path.join(NET, "fault_proxy.py"), upstream_url, "--port-file", port_file,
            "--latency-ms", str(latency_ms), "--seed", str(seed), "--stall-s", str(stall_s),
            "--retry-after", str(retry_after), "--schedule",
            json.dumps({str(k): v for k, v in (schedule or {}).items()})]
    if down:
        argv += ["--down", "reset" if down is True else down]
    log_path = os.path.join(prefix, "proxy.log")
    proc = None
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(_netns_argv(netns, argv), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log)
        deadline = time.monotonic() + 15
        while not os.path.exists(port_file):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(log_path, errors="replace") as f:
                    raise RuntimeError("fault_proxy.py did not start: " + f.read()[-2000:])
            time.sleep(0.02)
        with open(port_file) as f:
            port = int(f.read())
        p = ProxyProcess(proc, "http://127.0.0.1:%d" % port, prefix, netns)
        if rates:
            p.configure(rates={k: list(v) if isinstance(v, tuple) else v for k, v in rates.items()})
        yield p
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(prefix, ignore_errors=True)


# --------------------------------------------------------------------------- network namespace

_NETEM_LOCK = threading.Lock()
_NETEM_REFUSAL = []


def _ip(*args, check=True):
    r = subprocess.run([_which("ip") or "ip", *args], capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError("ip %s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return r


def _tc(ns, *args):
    """Run tc inside namespace ns; returns the error text or None."""
    r = subprocess.run([_which("tc") or "tc", "-n", ns, *args], capture_output=True, text=True)
    return (r.stderr or r.stdout or "exit status %d" % r.returncode).strip() if r.returncode else None


_NS_SERIAL = [0]


def _ns_name():
    _NS_SERIAL[0] += 1
    return "stk-%d-%d" % (os.getpid(), _NS_SERIAL[0])


def netns_missing():
    """None when this process may create network namespaces, else the reason
    (starting with KERNEL_REFUSES where the kernel said no)."""
    if not _which("ip") or not _which("tc"):
        return "ip/tc are not installed (Debian package iproute2)"
    name = _ns_name()
    r = _ip("netns", "add", name, check=False)
    if r.returncode:
        return KERNEL_REFUSES + "ip netns add: " + (r.stderr or r.stdout).strip()
    _ip("netns", "del", name, check=False)
    return None


def netem_refusal():
    """None when the kernel accepts a netem qdisc, else why not (e.g. "Error: Specified
    qdisc kind is unknown." where sch_netem is missing). Probed once, in a scratch namespace."""
    with _NETEM_LOCK:
        if not _NETEM_REFUSAL:
            why = netns_missing()
            if why is None:
                name = _ns_name()
                _ip("netns", "add", name)
                try:
                    err = _tc(name, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
                    why = None if err is None else "tc qdisc add ... netem: " + err
                finally:
                    _ip("netns", "del", name, check=False)
            _NETEM_REFUSAL.append(why)
        return _NETEM_REFUSAL[0]


def _rate_bytes(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)(bit|bps)", rate.strip().lower())
    if not m:
        raise ValueError("rate %r: use tc's units, e.g. 1gbit, 500mbit, 100mbps" % rate)
    v = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]]
    return v / 8 if m[3] == "bit" else v


class Netns:
    """A shaped network namespace (from shaped_netns()).

    name                 the namespace's name (ip netns exec NAME ...)
    rate, burst          the tbf rate and bucket size applied (None: no rate limit)
    delay_ms             the netem delay applied, one way (None: not applied)
    netem_refused        None, or why the kernel refused netem (then delay_ms is None)
    fallback_latency_ms  2 x the requested delay when netem was refused (give it to
                         fault_proxy(latency_ms=...)), else 0
    applied              one line saying what was applied
    """

    def __init__(self, name):
        self.name = name
        self.rate = self.burst = self.delay_ms = self.netem_refused = None
        self.fallback_latency_ms = 0
        self.applied = ""

    def wrap(self, argv):
        """argv run inside the namespace."""
        return _netns_argv(self, argv)

    def run(self, argv, **kw):
        """subprocess.run inside the namespace."""
        return subprocess.run(self.wrap(argv), **kw)

    def popen(self, argv, **kw):
        return subprocess.Popen(self.wrap(argv), **kw)

    def qdisc(self):
        """`tc qdisc show dev lo` inside the namespace."""
        return subprocess.run([_which("tc"), "-n", self.name, "qdisc", "show", "dev", "lo"],
                              capture_output=True, text=True, check=True).stdout


@contextlib.contextmanager
def shaped_netns(rate="1gbit", delay_ms=10, burst=None, name=None):
    """A new network namespace with its loopback up and shaped: tbf at `rate` (tc
    units; None for no limit) with `burst` (default max(128kb, rate/250 s)), and
    netem `delay_ms` (one way, None or 0 for none) where the kernel has netem.
    Yields a Netns; the namespace (and every process still in it) goes at the end.
    Processes are started inside with ns.run/ns.popen/ns.wrap, or netns=ns on
    nginx(), moto_server(), fault_proxy()."""
    why = netns_missing()
    if why:
        raise Unavailable(why)
    ns = Netns(name or _ns_name())
    _ip("netns", "add", ns.name)
    try:
        _ip("-n", ns.name, "link", "set", "lo", "up")
        parts = []
        parent = ["root"]
        if rate:
            if burst is None:
                burst = "%dkb" % max(128, int(_rate_bytes(rate) / 250 / 1024))
            err = _tc(ns.name, "qdisc", "add", "dev", "lo", "root", "handle", "1:", "tbf", "rate", rate,
                      "burst", burst, "latency", "50ms")
            if err:
                raise Unavailable(KERNEL_REFUSES + "tc qdisc add ... tbf: " + err)
            ns.rate, ns.burst = rate, burst
            parts.append("tbf rate %s burst %s" % (rate, burst))
            parent = ["parent", "1:1", "handle", "10:"]
        if delay_ms:
            err = _tc(ns.name, "qdisc", "add", "dev", "lo", *parent, "netem", "delay",
                      "%gms" % delay_ms, "limit", "100000")
            if err:
                ns.netem_refused = "tc qdisc add ... netem: " + err
                ns.fallback_latency_ms = 2 * delay_ms
                parts.append("netem refused by the kernel (%s): no delay; emulate the %g ms RTT "
                             "with the fault proxy's latency_ms=%g" % (err, 2 * delay_ms, 2 * delay_ms))
            else:
                ns.delay_ms = delay_ms
                parts.append("netem delay %gms (RTT %g ms)" % (delay_ms, 2 * delay_ms))
        ns.applied = "namespace %s: %s" % (ns.name, "; ".join(parts) or "no shaping")
        yield ns
    finally:
        # Kill what is still running inside, then drop the namespace.
        r = _ip("netns", "pids", ns.name, check=False)
        for pid in r.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", ns.name, check=False)


# --------------------------------------------------------------------------- command line

def main(argv=None):
    """Run COMMAND with servers up, their addresses in its environment (for C tests
    under CTest and for benchmark scripts):

      python3 tests/net/servers.py [--nginx ROOT [--http2] [--tls]] [--moto [--bucket B]]
                                   [--proxy nginx|moto] -- COMMAND [ARGS...]

    Exports STOKER_TEST_HTTP_URL (nginx), STOKER_TEST_H2C_URL, STOKER_TEST_HTTPS_URL and
    STOKER_TEST_CA_FILE (with --http2 / --tls), STOKER_TEST_S3_ENDPOINT (moto, or the
    proxy in front of it with --proxy moto) with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_REGION and AWS_ENDPOINT_URL, and STOKER_TEST_PROXY_URL (a fault_proxy.py process
    in front of --proxy's server, configured through its /__stoker_proxy/ endpoints).
    Exits with COMMAND's status; 77 (CTest's SKIP_RETURN_CODE convention) when a server
    cannot run here."""
    import argparse
    ap = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    ap.add_argument("--nginx", metavar="ROOT")
    ap.add_argument("--http2", action="store_true")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--moto", action="store_true")
    ap.add_argument("--bucket", action="append", default=[], help="create this bucket (--moto)")
    ap.add_argument("--proxy", choices=["nginx", "moto"])
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no COMMAND given")
    env = dict(os.environ)
    try:
        with contextlib.ExitStack() as stack:
            upstream = {}
            if a.nginx:
                ng = stack.enter_context(nginx(a.nginx, http2=a.http2, tls=a.tls))
                env["STOKER_TEST_HTTP_URL"] = upstream["nginx"] = ng.url
                if ng.url_h2c:
                    env["STOKER_TEST_H2C_URL"] = ng.url_h2c
                if ng.url_https:
                    env["STOKER_TEST_HTTPS_URL"], env["STOKER_TEST_CA_FILE"] = ng.url_https, ng.ca_file
            if a.moto:
                s3 = stack.enter_context(moto_server())
                for b in a.bucket:
                    s3.create_bucket(b)
                upstream["moto"] = s3.endpoint
                env.update(s3.env)
                env["STOKER_TEST_S3_ENDPOINT"] = s3.endpoint
            if a.proxy:
                if a.proxy not in upstream:
                    ap.error("--proxy %s needs --%s" % (a.proxy, a.proxy))
                px = stack.enter_context(fault_proxy(upstream[a.proxy], process=True))
                env["STOKER_TEST_PROXY_URL"] = px.url
                if a.proxy == "moto":
                    env["STOKER_TEST_S3_ENDPOINT"] = env["AWS_ENDPOINT_URL"] = px.url
            return subprocess.call(cmd, env=env)
    except Unavailable as e:
        print("servers.py: %s" % e, file=sys.stderr)
        return 77


if __name__ == "__main__":
    sys.exit(main())
