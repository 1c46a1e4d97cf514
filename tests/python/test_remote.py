"""Datasets read over HTTP (issue 14, "Done when"), against real servers on
loopback: Debian's nginx and the fault proxy (tests/net/servers.py).

The data: 400 small JPEGs made here with PIL, packed by `stoker pack` into 5
shards of ~500 KB, read in 16 KiB chunks (STOKER_CHUNK_SIZE) so that every shard
has ~30 chunks, and more than the 256 KiB tail a remote open fetches with the
header (so records are still fetched after the open). The reference for every digest is `stoker bench` over the same
shards on local disk; the reference for what went over the wire is nginx's own
access log (one JSON line per request, with its Range header) or the fault
proxy's records, never stoker's counters alone.

Covered: digest equality cold and warm (the warm run sends no ranged GET); the
bytes fetched cold (<= 1.05x the shards, each chunk once); faults (resets, 5xx,
429, truncated bodies) survived with the same digest and logged retries; a
server that stays down (closed port, resets, no answer) fails naming the URL and
the attempts, never hangs; 404 -> NotFound; a process killed mid-download
leaves no chunk that is trusted later, and a chunk corrupted on disk is fetched
again; an open whose shard tails are split around present chunks fetches the rest
once and cancels nothing; 8 processes on one cold cache download each chunk once; a
loader stuck on a stalled server is closed (close(), del, Ctrl-C) without hanging;
listing errors (an http "directory", malformed braces).

Nothing is timed: subprocess timeouts are hang guards only."""
import collections
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from PIL import Image

import fault_proxy
import servers
from conftest import STOKER

import stoker

CHUNK = 16 * 1024
SPEC = "random_resized_crop 32 | flip | to u8 hwc"
BENCH = ["--pipeline", SPEC, "--batch", "16", "--threads", "2", "--seed", "3", "--digest",
         "--json"]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# Python subprocesses import the stoker this process imported
STOKER_PY = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))
HANG_GUARD = 120  # seconds: a subprocess still running then has hung (never a timing check)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The packed shards, their sizes and the local digest."""
    root = tmp_path_factory.mktemp("remote")
    imgs = root / "imgs"
    rng = np.random.default_rng(14)
    for c in range(5):
        (imgs / ("c%d" % c)).mkdir(parents=True)
        for i in range(80):
            h, w = (int(v) for v in rng.integers(48, 96, 2))
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
                imgs / ("c%d" % c) / ("%03d.jpg" % i), quality=90)
    pack = root / "pack"
    p = subprocess.run([STOKER, "pack", str(imgs), str(pack), "--shard-size", "500K", "-q"],
                       capture_output=True, text=True, timeout=HANG_GUARD)
    assert p.returncode == 0, p.stderr
    names = sorted(os.listdir(pack))
    assert 4 <= len(names) <= 8 and all(n == "shard-%05d.stk" % i for i, n in enumerate(names)), names
    sizes = {"/" + n: os.path.getsize(pack / n) for n in names}
    local = bench(str(pack), root / "unused-cache")
    assert "remote" not in local     # local files: no remote traffic at all
    return {"root": root, "pack": str(pack), "names": names, "sizes": sizes,
            "total": sum(sizes.values()), "digest": local["digest"]}


@pytest.fixture(scope="module")
def ng(data):
    with servers.nginx(data["pack"]) as s:
        yield s


def pattern(base, data, last=None):
    """stk:BASE/shard-{00000..NNNNN}.stk over the packed shards (or up to `last`)."""
    last = len(data["names"]) - 1 if last is None else last
    return "stk:%s/shard-{00000..%05d}.stk" % (base, last)


def env_for(cache, **extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("STOKER_HTTP_") or k in ("STOKER_READAHEAD", "STOKER_CACHE_LIMIT"):
            del env[k]
    env.update(STOKER_CACHE_DIR=str(cache), STOKER_CHUNK_SIZE=str(CHUNK),
               STOKER_HTTP_BACKOFF_MS="10", STOKER_HTTP_BACKOFF_MAX_MS="100",
               PYTHONPATH=STOKER_PY)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def bench_proc(uri, cache, check=True, **env):
    p = subprocess.run([STOKER, "bench", uri, *BENCH], capture_output=True, text=True,
                       env=env_for(cache, **env), timeout=HANG_GUARD)
    if check and p.returncode != 0:
        raise AssertionError("stoker bench %s failed (%d): %s" % (uri, p.returncode, p.stderr))
    return p


def bench(uri, cache, **env):
    """`stoker bench --json --digest` over uri with its own cache dir: the JSON."""
    out = json.loads(bench_proc(uri, cache, **env).stdout)
    assert len(out["digest"]) == 32
    return out


def ranged_gets(log):
    """(uri, first, last) of every ranged GET in an nginx access log."""
    out = []
    for r in log:
        if r["method"] == "GET":
            assert r["range"].startswith("bytes="), r  # stoker never GETs a whole object
            a, b = r["range"][6:].split("-")
            out.append((r["uri"], int(a), int(b)))
    return out


def chunks_of(gets, sizes):
    """The (uri, chunk) pairs the GETs carried; each GET covers whole aligned chunks."""
    out = []
    for uri, a, b in gets:
        assert a % CHUNK == 0 and ((b + 1) % CHUNK == 0 or b + 1 == sizes[uri]), (uri, a, b)
        out += [(uri, k) for k in range(a // CHUNK, b // CHUNK + 1)]
    return out


def all_chunks(sizes):
    return {(uri, k) for uri, n in sizes.items() for k in range((n + CHUNK - 1) // CHUNK)}


def cache_maps(cache):
    """{key: (map path, data path, object size, chunk size, [present chunk numbers])}
    parsed from the cache's .map files (docs/remote.md, "The local cache")."""
    out = {}
    for dirpath, _, files in os.walk(os.path.join(cache, "objects")):
        for f in files:
            if not f.endswith(".map"):
                continue
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                raw = fh.read()
            if len(raw) < 40 or raw[:8] != b"STKCACHE":
                continue  # being created, or torn by a kill: nothing in it is trusted
            version, header_size, size, chunk, key_len = struct.unpack_from("<IIQII", raw, 8)
            assert version == 2 and chunk == CHUNK, (path, version, chunk)
            key = raw[40:40 + key_len].decode()
            n = (size + chunk - 1) // chunk
            present = [k for k in range(n)
                       if len(raw) >= header_size + 8 * k + 8 and raw[header_size + 8 * k + 4] == 1]
            out[key] = (path, path[:-4] + ".data", size, chunk, present)
    return out


def chunk_bytes(size, k):
    return min(CHUNK, size - k * CHUNK)


def run_python(code, env, timeout=HANG_GUARD):
    return subprocess.run([PYTHON, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)


# --------------------------------------------------------------------------- 1, 2: digests, bytes

def test_digest_cold_then_warm_equals_local(data, ng, tmp_path):
    uri = pattern(ng.url, data)
    ng.clear_log()
    cold = bench(uri, tmp_path / "cache")
    assert cold["digest"] == data["digest"]
    assert cold["remote"]["bytes_fetched"] > 0 and cold["remote"]["failures"] == 0
    assert ranged_gets(ng.access_log(wait_for=len(data["names"]) + 1))

    ng.clear_log()
    warm = bench(uri, tmp_path / "cache")
    assert warm["digest"] == data["digest"]
    assert warm["remote"]["bytes_fetched"] == 0
    assert warm["remote"]["reads_waited"] == 0
    assert warm["remote"]["cache_hit_bytes"] > 0
    # nginx saw the warm run: its HEADs (object identity), and no GET at all.
    log = ng.access_log(wait_for=len(data["names"]))
    assert log and all(r["method"] == "HEAD" and r["range"] == "" for r in log), log


def test_python_open_reads_the_same_samples(data, ng, tmp_path):
    code = """
        import sys, numpy as np, stoker
        local, remote = stoker.open(sys.argv[1]), stoker.open(sys.argv[2])
        assert len(local) == len(remote) == 400, (len(local), len(remote))
        for i in (0, 1, 20, 77, 150, 399):
            a, la = local[i]
            b, lb = remote[i]
            assert la == lb and a.shape == b.shape and np.array_equal(a, b), i
        s = stoker.io_stats()
        assert s["bytes_fetched"] > 0 and s["reads"] > 0, s
        print("ok", s["bytes_fetched"])
    """
    p = subprocess.run([PYTHON, "-c", textwrap.dedent(code), data["pack"], pattern(ng.url, data)],
                       capture_output=True, text=True, env=env_for(tmp_path / "cache"),
                       timeout=HANG_GUARD)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout + p.stderr


def test_cold_fetches_each_chunk_once(data, ng, tmp_path):
    ng.clear_log()
    cold = bench(pattern(ng.url, data), tmp_path / "cache")
    assert cold["digest"] == data["digest"]
    fetched = cold["remote"]["bytes_fetched"]
    assert fetched <= 1.05 * data["total"], (fetched, data["total"])
    log = ng.access_log(wait_for=len(data["names"]) + 2 * len(data["names"]))
    gets = ranged_gets(log)
    assert all(r["status"] == 206 for r in log if r["method"] == "GET"), log
    counts = collections.Counter(gets)
    assert max(counts.values()) == 1, [g for g, n in counts.items() if n > 1]
    chunks = collections.Counter(chunks_of(gets, data["sizes"]))
    assert max(chunks.values()) == 1, [c for c, n in chunks.items() if n > 1]
    # every chunk is needed (every record is read) and came in exactly once
    assert set(chunks) == all_chunks(data["sizes"])
    # the counter agrees with the server's own count of body bytes
    assert fetched == sum(r["body_bytes"] for r in log if r["method"] == "GET") == data["total"]


# --------------------------------------------------------------------------- stoker cache

def cache_cli(*args, cache, check=True):
    p = subprocess.run([STOKER, "cache", *args, "--dir", str(cache)], capture_output=True,
                       text=True, env=env_for(cache), timeout=HANG_GUARD)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stderr)
    return p


def cache_info(cache):
    out = dict(line.split(":", 1) for line in cache_cli("info", cache=cache).stdout.splitlines())
    return int(out["objects"]), int(out["bytes"].split("(")[1].split()[0])


def test_cache_fetch_then_train_warm_then_trim_and_clear(data, ng, tmp_path):
    """`stoker cache fetch` downloads every chunk once (nginx's log), after which a
    training run fetches nothing and gives the local digest; a second fetch sends no
    GET; trim keeps the newest objects under the size; clear empties the cache."""
    cache = tmp_path / "cache"
    uri = pattern(ng.url, data)
    assert cache_info(cache) == (0, 0)
    ng.clear_log()
    p = cache_cli("fetch", uri, cache=cache)
    assert "fetched %.1f MB of %d objects" % (data["total"] / 1e6, len(data["names"])) in p.stdout
    assert p.stderr.count("fetch: ") == len(data["names"])       # a progress line per object
    log = ng.access_log(wait_for=2 * len(data["names"]))
    chunks = collections.Counter(chunks_of(ranged_gets(log), data["sizes"]))
    assert set(chunks) == all_chunks(data["sizes"]) and max(chunks.values()) == 1
    objects, nbytes = cache_info(cache)
    assert objects == len(data["names"]) and nbytes >= data["total"]

    ng.clear_log()
    warm = bench(uri, cache)
    assert warm["digest"] == data["digest"] and warm["remote"]["bytes_fetched"] == 0
    p = cache_cli("fetch", uri + "?verify=off", "-q", cache=cache)   # a reader's options: not the URL's
    assert "fetched 0.0 MB of %d objects" % len(data["names"]) in p.stdout and p.stderr == ""
    assert not ranged_gets(ng.access_log(wait_for=2 * len(data["names"])))

    # trim to about two objects' bytes: the least recently used go first
    # (last use is the .map's mtime: set one second apart, in the shards' order)
    order = sorted(cache_maps(cache).items())
    now = time.time_ns()
    for i, (_, m) in enumerate(order):
        os.utime(m[0], ns=(now - (len(order) - i) * 10**9,) * 2)
    keep = sum(os.stat(m[1]).st_blocks * 512 for _, m in order[-2:])
    p = cache_cli("trim", str(keep), cache=cache)
    assert p.stdout.startswith("removed %d objects" % (len(order) - 2)), p.stdout
    left = cache_maps(cache)
    assert sorted(left) == [k for k, _ in order[-2:]]
    assert cache_info(cache) == (2, keep)
    # the trimmed objects are fetched again, the two kept are not
    ng.clear_log()
    assert bench(uri, cache)["digest"] == data["digest"]
    got = {u for u, _, _ in ranged_gets(ng.access_log(wait_for=len(data["names"])))}
    kept = {"/" + k.split("#")[0].rsplit("/", 1)[1] for k in left}
    assert got == set(data["sizes"]) - kept, (got, kept)
    p = cache_cli("clear", cache=cache)
    assert p.stdout.startswith("removed %d objects" % len(data["names"])), p.stdout
    assert cache_info(cache) == (0, 0) and cache_maps(cache) == {}


def test_cache_from_python(data, ng, tmp_path):
    """stoker.prefetch / cache_info / cache_trim: the same as the CLI, in a process."""
    code = """
        import sys, stoker
        stoker.set_cache(sys.argv[2])
        assert stoker.cache_info()["objects"] == 0
        r = stoker.prefetch(sys.argv[1])
        assert r["objects"] == int(sys.argv[3]) and r["fetched"] == r["bytes"] > 0, r
        info = stoker.cache_info()
        assert info["dir"] == sys.argv[2] and info["objects"] == r["objects"], info
        assert info["bytes"] >= r["bytes"] and info["limit"] == 0, info
        assert stoker.prefetch(sys.argv[1])["fetched"] == 0
        t = stoker.cache_trim(0)
        assert t["removed_objects"] == r["objects"] and t["left"]["objects"] == 0, t
        try:
            stoker.prefetch(sys.argv[1].replace("shard-", "nope-"))
        except stoker.NotFound as e:
            assert "nope-" in str(e), e
        else:
            raise AssertionError("a missing object was prefetched")
        print("ok")
    """
    p = subprocess.run([PYTHON, "-c", textwrap.dedent(code), pattern(ng.url, data),
                        str(tmp_path / "pycache"), str(len(data["names"]))],
                       capture_output=True, text=True, env=env_for(tmp_path / "unused"),
                       timeout=HANG_GUARD)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_cache_fetch_by_four_processes_and_a_trainer_at_once(data, ng, tmp_path):
    """Four `stoker cache fetch` and one training run started together on a cold
    cache: every chunk crosses the wire once between them (nginx's log), and the
    trainer gets the local digest."""
    cache = tmp_path / "cache"
    ng.clear_log()
    env = env_for(cache)
    uri = pattern(ng.url, data)
    procs = [subprocess.Popen([STOKER, "cache", "fetch", uri, "-q"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    procs.append(subprocess.Popen([STOKER, "bench", uri, *BENCH], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=HANG_GUARD)
            assert p.returncode == 0, err
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert json.loads(outs[-1])["digest"] == data["digest"]
    fetched = [float(o.split()[1]) for o in outs[:4]]            # "fetched X MB of ..."
    gets = ranged_gets(ng.access_log(wait_for=5 * len(data["names"])))
    chunks = collections.Counter(chunks_of(gets, data["sizes"]))
    assert max(chunks.values()) == 1, [c for c, n in chunks.items() if n > 1]
    assert set(chunks) == all_chunks(data["sizes"])
    assert sum(fetched) <= data["total"] / 1e6 + 0.5, fetched


def test_cache_cli_errors(data, ng, tmp_path):
    cache = tmp_path / "cache"
    p = cache_cli("fetch", "stk:%s/missing-{0..1}.stk" % ng.url, cache=cache, check=False)
    assert p.returncode == 1 and "missing-0.stk" in p.stderr and "404" in p.stderr, p.stderr
    p = cache_cli("fetch", data["pack"], cache=cache, check=False)
    assert p.returncode == 1 and "not a remote dataset" in p.stderr, p.stderr
    for args, says in ((("trim", "12X"), "SIZE: expected a size like 512M or 1G, got '12X'"),
                       (("infp",), "did you mean 'info'"), (("fetch",), "cache fetch: missing DATASET"),
                       (("info", "extra"), "cache info: unexpected argument 'extra'"),
                       (("clear", "--bogus"), "--bogus")):
        p = cache_cli(*args, cache=cache, check=False)
        assert p.returncode == 2 and says in p.stderr, (args, p.stderr)
    assert cache_info(cache) == (0, 0)


# --------------------------------------------------------------------------- the other readers

WRITE_FORMATS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                             "write_formats.py")


@pytest.fixture(scope="module")
def formats(data):
    """The same JPEGs as TFRecord (with DALI .idx files beside), WebDataset tars and one
    RecordIO file, written by independent writers (bench/write_formats.py)."""
    out = data["root"] / "fmt"
    p = subprocess.run([PYTHON, WRITE_FORMATS, "--images", str(data["root"] / "imgs"), "--out",
                        str(out), "--limit", "60", "--shards", "3", "--formats",
                        "tfrecord,recordio,wds"], capture_output=True, text=True,
                       timeout=HANG_GUARD)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("fmt,local,remote", [
    ("tfrecord", "tfrecord:{root}/tfrecord", "tfrecord:{url}/tfrecord/photos-{{00000..00002}}.tfrecord"),
    ("wds", "wds:{root}/wds", "wds:{url}/wds/photos-{{00000..00002}}.tar"),
    ("recordio", "recordio:{root}/recordio/photos.rec", "recordio:{url}/recordio/photos.rec"),
])
def test_other_readers_over_http_same_digest(formats, tmp_path, fmt, local, remote):
    """TFRecord, WebDataset and RecordIO over HTTP: the local files' digest, cold and
    warm; the warm run fetches nothing. (TFRecord: scanned through the cache once, its
    offsets then kept in the cache directory; its DALI indexes found with index=DIR.)"""
    with servers.nginx(str(formats)) as s:
        want = bench(local.format(root=formats), tmp_path / "unused")["digest"]
        uri = remote.format(url=s.url)
        cold = bench(uri, tmp_path / "cache")
        warm = bench(uri, tmp_path / "cache")
        assert cold["digest"] == warm["digest"] == want, (fmt, cold["digest"], warm["digest"], want)
        assert cold["remote"]["bytes_fetched"] > 0 and cold["remote"]["failures"] == 0
        assert warm["remote"]["bytes_fetched"] == 0 and warm["remote"]["reads_waited"] == 0
        if fmt == "tfrecord":
            # without an index the open scans each file; DALI indexes in a local
            # folder (index=DIR) are used instead, and give the same samples
            def index_note(u, cache="cache2"):
                p = subprocess.run([STOKER, "inspect", u], capture_output=True, text=True,
                                   env=env_for(tmp_path / cache), timeout=HANG_GUARD)
                assert p.returncode == 0, p.stderr
                return p.stdout
            assert index_note(uri).count("records, scanned") == 3
            # ... once: the offsets are kept in the cache directory (keyed by URL, ETag
            # and size), so the next open reads no record header
            again = index_note(uri)
            assert again.count("records from the cache %s/derived/" % (tmp_path / "cache2")) == 3
            # no room for the offsets in the cache directory: noted, read all the same
            blocked = tmp_path / "cache4"
            blocked.mkdir()
            (blocked / "derived").write_text("not a directory")
            note = index_note(uri, "cache4")
            assert note.count("cache not used:") == 3 and "derived" in note, note
            assert note.count("records, scanned") == 3
            assert bench(uri, blocked)["digest"] == want
            ixu = uri + "?index=%s/tfrecord" % formats
            assert index_note(ixu, "cache3").count(
                "records from the DALI index %s/tfrecord/" % formats) == 3
            assert bench(ixu, tmp_path / "cache3")["digest"] == want


# --------------------------------------------------------------------------- 3: faults

def test_faults_same_digest_and_logged_retries(data, ng, tmp_path):
    # The draw for a first HEAD depends only on (seed, path), so this seed faults
    # some of the run's HEADs whatever the timing (a reset, 503s): retries are
    # certain, not likely. The GETs' faults vary with how chunks were grouped.
    with servers.fault_proxy(ng.url, rates={"reset": .05, "status": .05, "truncate": .01},
                             seed=37) as px:
        p = bench_proc(pattern(px.url, data), tmp_path / "cache")
        faults = px.counts()["faults"]
    out = json.loads(p.stdout)
    assert out["digest"] == data["digest"]
    assert "reset" in faults and "503" in faults and "upstream_error" not in faults, faults
    assert out["remote"]["retries"] > 0 and out["remote"]["failures"] == 0, out["remote"]
    assert "stoker: retrying" in p.stderr
    assert px.url in p.stderr
    # faulted attempts are not counted as fetched: still each byte once
    assert out["remote"]["bytes_fetched"] == data["total"]


def test_truncated_bodies_are_fetched_again(data, ng, tmp_path):
    # Requests 1..n are the n HEADs; the GETs that follow are cut in half.
    n = len(data["names"])
    cut = {n + 1: "truncate", n + 2: "truncate", n + 4: "truncate", n + 7: "truncate"}
    with servers.fault_proxy(ng.url, schedule=cut) as px:
        p = bench_proc(pattern(px.url, data), tmp_path / "cache")
        recs = px.requests()
    out = json.loads(p.stdout)
    assert out["digest"] == data["digest"]
    truncated = [r for r in recs if r["fault"] == "truncate"]
    assert len(truncated) == 4 and all(r["method"] == "GET" for r in truncated), truncated
    retried = [l for l in p.stderr.splitlines() if l.startswith("stoker: retrying GET ")]
    assert len(retried) == 4, p.stderr
    assert out["remote"]["retries"] == 4
    assert out["remote"]["bytes_fetched"] == data["total"]
    # the halves received count as received, not as fetched
    assert out["remote"]["bytes_received"] > data["total"]


@pytest.mark.parametrize("how", ["closed-port", "reset", "hang"])
def test_server_down_fails_naming_url_and_attempts(data, ng, tmp_path, how):
    env = dict(STOKER_HTTP_MAX_ATTEMPTS=3, STOKER_HTTP_DEADLINE_MS=3000,
               STOKER_HTTP_CONNECT_TIMEOUT_MS=1000, STOKER_HTTP_LOW_SPEED_TIME_S=2)
    if how == "closed-port":
        base = "http://127.0.0.1:%d" % servers.free_port()
        p = bench_proc(pattern(base, data), tmp_path / "cache", check=False, **env)
    else:
        with servers.fault_proxy(ng.url, down=True if how == "reset" else "hang") as px:
            base = px.url
            p = bench_proc(pattern(base, data), tmp_path / "cache", check=False, **env)
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()[-1]   # the error (the lines before: retries)
    # the first object of the pattern that failed, and how many attempts it had
    assert err.startswith("stoker: HEAD %s/shard-00000.stk: " % base) and " attempt" in err, err
    if how == "hang":   # nothing answers: the deadline ends it, and says so
        assert "deadline of 3000 ms reached" in err, err


def test_server_down_mid_read_names_url(data, ng, tmp_path):
    """Opened while the server was up; then every request is reset: a read of an
    uncached record fails with NetworkError naming the object and the attempts."""
    code = """
        import sys, stoker
        ds = stoker.open(sys.argv[1])
        print("opened", flush=True)
        sys.stdin.readline()
        try:
            ds[20]      # mid-shard: not among the bytes the open fetched
        except stoker.NetworkError as e:
            assert isinstance(e, ConnectionError)
            print("error:", e, flush=True)
        else:
            print("no error", flush=True)
    """
    with servers.fault_proxy(ng.url) as px:
        proc = subprocess.Popen([PYTHON, "-c", textwrap.dedent(code), pattern(px.url, data)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=env_for(tmp_path / "cache", STOKER_HTTP_MAX_ATTEMPTS=3))
        try:
            line = proc.stdout.readline()
            assert line == "opened\n", line + proc.stderr.read()
            px.configure(down=True)
            out, err = proc.communicate("go\n", timeout=HANG_GUARD)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out + err
    assert out.startswith("error: ") and px.url + "/shard-" in out and "3 attempts" in out, out + err
    assert err.count("stoker: retrying GET") >= 2, err


def test_missing_shard_is_not_found(data, ng):
    n = len(data["names"])
    missing = "%s/shard-%05d.stk" % (ng.url, n)
    with pytest.raises(stoker.NotFound) as e:
        stoker.open(pattern(ng.url, data, last=n))
    assert isinstance(e.value, FileNotFoundError)
    assert missing in str(e.value) and "404" in str(e.value), str(e.value)
    p = subprocess.run([STOKER, "bench", pattern(ng.url, data, last=n), *BENCH],
                       capture_output=True, text=True, timeout=HANG_GUARD)
    assert p.returncode != 0 and missing in p.stderr, p.stderr


# --------------------------------------------------------------------------- 4: crashes, corruption

def test_kill_mid_download_never_trusts_a_partial_chunk(data, ng, tmp_path):
    cache = tmp_path / "cache"
    n = len(data["names"])
    # The HEADs and the first few GETs go through; every later request sends its
    # headers and half its body, then stalls (a download in progress).
    stalls = {k: ("stall_body", 60) for k in range(n + 4, n + 400)}
    with fault_proxy.FaultProxy(ng.url, schedule=stalls) as px:
        url, port = px.url, px.port
        proc = subprocess.Popen([STOKER, "bench", pattern(url, data), *BENCH],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env_for(cache))
        try:
            deadline = time.monotonic() + HANG_GUARD
            while True:   # until a download stalls and the first ones are in the cache
                recs = px.requests(settle=0)
                stalled = [r for r in recs if r["fault"] == "stall_body" and r["bytes"] > 0]
                filled = os.path.isdir(cache / "objects") and any(
                    ks for _, _, _, _, ks in cache_maps(cache).values())
                if (stalled and filled) or proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert proc.poll() is None, "bench ended before a download stalled: %r" % (
                proc.communicate()[1],)
            assert stalled, recs
            proc.send_signal(signal.SIGKILL)
            proc.wait(HANG_GUARD)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # Some chunks were completed before the kill, none of the stalled ones.
    maps = cache_maps(cache)
    present = {(ng_path(key), k) for key, (_, _, _, _, ks) in maps.items() for k in ks}
    present_bytes = sum(chunk_bytes(size, k) for _, _, size, _, ks in maps.values() for k in ks)
    assert 0 < present_bytes < data["total"], present_bytes
    # Again, through a clean proxy at the same address (the cache key is the URL;
    # a new proxy, so that no request of the killed process is counted).
    with fault_proxy.FaultProxy(ng.url, port=port) as px:
        assert px.url == url
        out = bench(pattern(url, data), cache)
        recs = px.requests()
    assert out["digest"] == data["digest"]
    # exactly the chunks that were not complete are fetched again, each once
    assert out["remote"]["bytes_fetched"] == data["total"] - present_bytes
    gets = [(r["path"], *map(int, r["range"][6:].split("-"))) for r in recs if r["method"] == "GET"]
    chunks = chunks_of(gets, data["sizes"])
    assert len(chunks) == len(set(chunks))
    assert set(chunks) == all_chunks(data["sizes"]) - present


def ng_path(key):
    """The path of the object a cache key names ("http://host:port/PATH#etag#size")."""
    return "/" + key.split("#", 1)[0].split("/", 3)[3]


def test_corrupted_cache_chunk_is_fetched_again(data, ng, tmp_path):
    cache = tmp_path / "cache"
    assert bench(pattern(ng.url, data), cache)["digest"] == data["digest"]
    shard0 = ng.url + "/shard-00000.stk"
    (mpath, dpath, size, _, present), = [v for k, v in cache_maps(cache).items()
                                         if k.startswith(shard0 + "#")]
    assert 1 in present and size > 2 * CHUNK
    with open(dpath, "r+b") as f:            # flip bytes in the middle of chunk 1
        f.seek(CHUNK + 100)
        old = f.read(64)
        f.seek(CHUNK + 100)
        f.write(bytes(b ^ 0x5A for b in old))
    ng.clear_log()
    out = bench(pattern(ng.url, data), cache)
    assert out["digest"] == data["digest"]
    assert out["remote"]["bytes_fetched"] == CHUNK
    log = ng.access_log(wait_for=len(data["names"]) + 1)
    assert ranged_gets(log) == [("/shard-00000.stk", CHUNK, 2 * CHUNK - 1)], log


def test_open_lets_its_tail_fetch_finish(data, ng, tmp_path):
    """A dataset's open fetches each shard's head and 256 KiB tail in the background,
    then waits for them. When a chunk of the tail is not this process's to fetch (here
    present already; in a job, another rank's), the tail is two fetches, and the
    open used to wait only for the one holding the last byte and cancel the other at
    its close: a request made for nothing, whose chunks the reader then fetched again
    (the 8-process test's 1-in-40 duplicate). Now the open waits for the whole tail.
    (The old code passed a run where every cancel came before its request was sent,
    which did no harm; with all five shards' tails split it failed 10 runs of 10.)"""
    cache = tmp_path / "cache"
    assert bench(pattern(ng.url, data), cache)["digest"] == data["digest"]
    want = []
    for key, (mpath, _, size, _, present) in cache_maps(cache).items():
        # chunk 0 (the header) and the last present; the rest of the tail absent
        first, last = max(1, (size - 256 * 1024) // CHUNK), (size - 1) // CHUNK
        assert first + 2 <= last and set(range(last + 1)) <= set(present), key
        with open(mpath, "r+b") as f:
            header_size, = struct.unpack_from("<I", f.read(16), 12)
            for k in range(first, last):
                f.seek(header_size + 8 * k + 4)
                f.write(b"\0")
        want.append((ng_path(key), first * CHUNK, last * CHUNK - 1))
    assert len(want) == len(data["names"])
    ng.clear_log()
    out = bench(pattern(ng.url, data), cache)
    assert out["digest"] == data["digest"]
    log = ng.access_log(wait_for=2 * len(data["names"]))
    assert sorted(ranged_gets(log)) == sorted(want), log
    # stoker's own count of its requests: the HEADs and those GETs, none cancelled
    assert (out["remote"]["requests"], out["remote"]["failures"]) == (2 * len(want), 0)
    assert out["remote"]["bytes_fetched"] == sum(b + 1 - a for _, a, b in want)


# --------------------------------------------------------------------------- 5: shared cache

def test_eight_processes_share_one_cold_cache(data, ng, tmp_path):
    cache = tmp_path / "cache"
    ng.clear_log()
    env = env_for(cache)
    args = [STOKER, "bench", pattern(ng.url, data), *BENCH]
    args[args.index("--threads") + 1] = "1"
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(8)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=HANG_GUARD)
            assert p.returncode == 0, err
            outs.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [o["digest"] for o in outs] == [data["digest"]] * 8
    log = ng.access_log(wait_for=8 * len(data["names"]) + len(data["names"]))
    gets = ranged_gets(log)
    assert max(collections.Counter(gets).values()) == 1
    chunks = collections.Counter(chunks_of(gets, data["sizes"]))
    assert max(chunks.values()) == 1, [c for c, n in chunks.items() if n > 1]
    assert set(chunks) == all_chunks(data["sizes"])
    assert sum(o["remote"]["bytes_fetched"] for o in outs) == data["total"]


# --------------------------------------------------------------------------- 6: cancel

CANCEL_SCRIPT = """
import gc, signal, sys, stoker
how, SPEC = sys.argv[2], sys.argv[3]
# (a shell without job control starts background jobs with SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
ds = stoker.open(sys.argv[1])
print("opened", flush=True)
sys.stdin.readline()            # the server stalls from now on
loader = stoker.Loader(ds, batch_size=16, shuffle=True, num_threads=2, prefetch=2,
                       pipeline=SPEC, output="numpy", eager=True)
if how == "sigint":
    it = iter(loader)
    try:
        print("waiting", flush=True)
        next(it)
        print("got a batch", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    loader.close()
else:
    print("waiting", flush=True)
    sys.stdin.readline()        # a transfer is stalled now
    if how == "close":
        loader.close()
    else:
        del loader
        gc.collect()
print("closed", flush=True)
"""


@pytest.mark.parametrize("how", ["close", "del", "sigint"])
def test_loader_close_cancels_stalled_transfers(data, ng, tmp_path, how):
    with servers.fault_proxy(ng.url) as px:
        proc = subprocess.Popen([PYTHON, "-c", CANCEL_SCRIPT, pattern(px.url, data), how, SPEC],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=env_for(tmp_path / "cache"))
        try:
            assert proc.stdout.readline() == "opened\n", proc.stderr.read()
            opened = len(px.requests(settle=0))
            px.configure(down="hang")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "waiting\n", proc.stderr.read()
            deadline = time.monotonic() + HANG_GUARD
            while not any(r["method"] == "GET" and not r["done"]
                          for r in px.requests(settle=0)[opened:]):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.02)
            if how == "sigint":
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=HANG_GUARD)
            else:
                out, err = proc.communicate("now\n", timeout=HANG_GUARD)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out + err
    assert out.endswith("closed\n"), out + err
    if how == "sigint":
        assert out.startswith("interrupted\n"), out + err


# --------------------------------------------------------------------------- 7: listing errors

def test_http_directory_cannot_be_listed(ng):
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.open("stk:%s/" % ng.url)
    msg = str(e.value)
    assert ng.url + "/" in msg and "brace range" in msg and "s3://" in msg, msg


@pytest.mark.parametrize("bad, says", [
    ("shard-{00000..00005.stk", "without its '}'"),
    ("shard-{a..b}.stk", "not a range of numbers"),
    ("shard-{00005..00000}.stk", "must rise"),
])
def test_malformed_brace_is_invalid_argument(ng, bad, says):
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.open("stk:%s/%s" % (ng.url, bad))
    assert bad in str(e.value) and says in str(e.value), str(e.value)


# --------------------------------------------------------------------------- TLS and HTTP/2

def test_https_verified_and_http2(data, tmp_path):
    """https:// with the peer verified (a test CA given by STOKER_CA_FILE), over HTTP/2
    (ALPN) and HTTP/1.1: the same digest; without the CA, verification fails the run
    naming the URL (TLS verification is on by default)."""
    with servers.nginx(data["pack"], tls=True, http2=True) as tls:
        uri = pattern(tls.url_https, data)
        h2 = bench(uri, tmp_path / "h2", STOKER_CA_FILE=tls.ca_file)
        assert h2["digest"] == data["digest"]
        log = tls.access_log(wait_for=1)
        assert any(r["protocol"] == "HTTP/2.0" for r in log), log
        h1 = bench(uri, tmp_path / "h1", STOKER_CA_FILE=tls.ca_file, STOKER_HTTP2="off")
        assert h1["digest"] == data["digest"]
        p = bench_proc(uri, tmp_path / "noca", check=False, STOKER_HTTP_MAX_ATTEMPTS="1")
        assert p.returncode != 0
        assert tls.url_https in p.stderr and "certificate" in p.stderr.lower(), p.stderr
