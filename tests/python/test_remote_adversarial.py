"""Remote reads against a server that lies or changes under the reader (issue 26):
a range proxy that answers other bytes than asked (tests/net/fault_proxy.py's
range faults: shift, lie, short, long), and an object replaced on the server
mid-epoch, served with ETags and without (nginx's /noetag/ location: Last-Modified
only).

What is checked, against independent references (the local files' digest from
`stoker bench`, the proxy's own records of what it did):
  * every wrong 206 is refused and retried, and the run still gives the local
    digest; one that persists fails naming the URL and blaming the transfer
    (not the file format: no checksum or header complaint);
  * nothing wrong is cached: a second run against the honest server on the
    same cache gives the local digest (on the old code a shifted chunk was
    cached with a CRC of its own and served forever);
  * an object replaced mid-epoch stops a loader with on_error="skip"
    (FormatError "the object changed while being read", naming the URL and the
    validator that changed), never a silently shorter epoch of skipped records.

Nothing is timed: subprocess timeouts are hang guards only."""
import json
import os
import shutil
import subprocess
import textwrap

import pytest

import servers
from test_remote import (CHUNK, HANG_GUARD, PYTHON, SPEC, bench, bench_proc, env_for,
                         pattern)
from test_remote import data, formats  # noqa: F401  (module fixtures, built for this module)



@pytest.fixture(scope="module")
def ng(data):  # noqa: F811
    with servers.nginx(data["pack"]) as s:
        yield s


def last_error(stderr):
    return stderr.strip().splitlines()[-1]


# --------------------------------------------------------------------------- a lying range server

def test_each_kind_of_wrong_206_is_retried_same_digest(data, ng, tmp_path):
    """Requests 1..n are the HEADs; the first four GETs get a 206 for other bytes
    (shifted, mislabelled, short, long): each is refused, retried, and the run
    gives the local digest, each byte fetched once."""
    n = len(data["names"])
    sched = {n + 1: "shift", n + 2: "lie", n + 3: "short", n + 4: "long"}
    with servers.fault_proxy(ng.url, schedule=sched) as px:
        p = bench_proc(pattern(px.url, data), tmp_path / "cache")
        recs = px.requests()
    out = json.loads(p.stdout)
    assert out["digest"] == data["digest"]
    faulted = [r for r in recs if r["fault"]]
    assert sorted(r["fault"] for r in faulted) == ["lie", "long", "shift", "short"], faulted
    assert all(r["method"] == "GET" and r["status"] == 206 for r in faulted), faulted
    retried = [l for l in p.stderr.splitlines() if l.startswith("stoker: retrying GET ")]
    assert len(retried) == 4, p.stderr
    assert all("HTTP 206 for other bytes than asked: Content-Range bytes " in l for l in retried), \
        retried
    assert out["remote"]["retries"] == 4 and out["remote"]["failures"] == 0
    assert out["remote"]["bytes_fetched"] == data["total"]


def test_persistent_shift_fails_blaming_the_transfer_and_caches_nothing(data, ng, tmp_path):
    """A proxy that shifts every range: the run fails naming the URL, the bytes asked
    and answered and the attempts; then the honest server on the same cache gives
    the local digest."""
    cache = tmp_path / "cache"
    with servers.fault_proxy(ng.url, rates={"shift": 1.0}) as px:
        p = bench_proc(pattern(px.url, data), cache, check=False, STOKER_HTTP_MAX_ATTEMPTS=3)
        assert any(r["fault"] == "shift" for r in px.requests())
    assert p.returncode != 0
    err = last_error(p.stderr)
    assert px.url + "/shard-" in err and "HTTP 206 for other bytes than asked" in err, err
    assert "(3 attempts)" in err, err
    for format_blame in ("checksum", "damaged", "not a .stk", "truncated", "changed"):
        assert format_blame not in err, err
    honest = bench(pattern(ng.url, data), cache)
    assert honest["digest"] == data["digest"]


def test_shifted_tar_is_never_cached(formats, tmp_path):  # noqa: F811
    """WebDataset tars (no per-record checksum: a shifted chunk would be silently
    wrong samples): a proxy shifting every range fails the run; the honest server
    on the same cache then gives the local tars' digest."""
    local = bench("wds:%s/wds" % formats, tmp_path / "unused")["digest"]
    cache = tmp_path / "cache"
    with servers.nginx(str(formats)) as s:
        uri = "wds:%s/wds/photos-{00000..00002}.tar"
        with servers.fault_proxy(s.url, rates={"shift": 1.0}) as px:
            p = bench_proc(uri % px.url, cache, check=False, STOKER_HTTP_MAX_ATTEMPTS=2)
        assert p.returncode != 0
        err = last_error(p.stderr)
        assert px.url + "/wds/photos-" in err and "HTTP 206 for other bytes than asked" in err, err
        assert bench(uri % s.url, cache)["digest"] == local


def test_whole_object_for_a_range_is_refused(data, ng, tmp_path):
    """A 200 with the whole object to a range request: refused at once, saying the
    server ignores Range (its bytes are not the chunk's)."""
    with servers.fault_proxy(ng.url, rates={"whole": 1.0}) as px:
        p = bench_proc(pattern(px.url, data), tmp_path / "cache", check=False)
    assert p.returncode != 0
    err = last_error(p.stderr)
    assert px.url + "/shard-" in err and "ignores Range requests (HTTP 200 for bytes " in err, err
    assert "stoker: retrying" not in p.stderr
    assert bench(pattern(ng.url, data), tmp_path / "cache")["digest"] == data["digest"]


# --------------------------------------------------------------------------- an object replaced mid-epoch

SWAP_SCRIPT = """
import sys, stoker
uri, spec = sys.argv[1], sys.argv[2]
loader = stoker.Loader(uri, batch_size=8, shuffle=False, num_threads=1, prefetch=1,
                       pipeline=spec, output="numpy", on_error="skip")
it = iter(loader)
n = len(next(it)[1])
print("first", n, flush=True)
sys.stdin.readline()            # the object is replaced now
try:
    for x, y in it:
        n += len(y)
except stoker.FormatError as e:
    print("error:", n, e, flush=True)
except stoker.StokerError as e:
    print("other error:", type(e).__name__, n, e, flush=True)
else:
    print("done", n, flush=True)
"""


TAIL_AT_OPEN = 256 << 10  # what a .stk open reads of each shard's end (stk_dataset.c)


def replace_with_new_version(path, shrink=False):
    """The object replaced by another version of the same size (its second half's
    bytes changed) and a later mtime: nginx gives it another ETag and another
    Last-Modified; the size alone does not tell. shrink: a version cut to its
    first 3/4 instead (the HEAD at open announced more bytes than it now has)."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    half = len(raw) // 2
    if shrink:
        raw = raw[:len(raw) * 3 // 4]
    else:
        raw[half:] = bytes(b ^ 0x5A for b in raw[half:])
    st = os.stat(path)
    tmp = str(path) + ".new"
    with open(tmp, "wb") as f:
        f.write(raw)
    os.utime(tmp, (st.st_mtime + 3600, st.st_mtime + 3600))
    os.replace(tmp, path)


@pytest.mark.parametrize("validator", ["etag", "last-modified", "shrunk"])
@pytest.mark.parametrize("fmt", ["stk", "wds"])
def test_object_replaced_mid_epoch_stops_the_loader(data, formats, tmp_path, fmt,  # noqa: F811
                                                    validator):
    """Read-ahead off (every chunk is fetched when its record is read), the last
    object replaced after the first batch: the epoch stops with FormatError naming
    its URL and what changed, under on_error="skip" too; the records before the
    change were delivered, none was skipped."""
    root = tmp_path / "served"
    if fmt == "stk":
        shutil.copytree(data["pack"], root)
        # The open reads each shard's head and its last 256 KiB whole (its
        # index and footer), so only a shard longer than that still has
        # chunks to fetch when its records are read: the last such shard is
        # the one replaced (the final, shorter shard is all in the cache by
        # the first batch, and a replaced copy would never be asked for).
        names = [n for n in data["names"]
                 if data["sizes"]["/" + n] > TAIL_AT_OPEN + 4 * CHUNK]
        assert len(names) >= 2, data["sizes"]
        chunk = CHUNK
    else:
        shutil.copytree(formats / "wds", root)
        names = sorted(n for n in os.listdir(root) if n.endswith(".tar"))
        chunk = 4096   # tar headers every ~15 KB: most chunks hold only payload bytes
    prefix = "/noetag" if validator == "last-modified" else ""
    with servers.nginx(str(root)) as s:
        base = s.url + prefix
        if fmt == "stk":
            uri = pattern(base, data)
        else:
            uri = "wds:%s/photos-{00000..%05d}.tar" % (base, len(names) - 1)
        env = env_for(tmp_path / "cache", STOKER_READAHEAD=0, STOKER_CHUNK_SIZE=chunk)
        proc = subprocess.Popen([PYTHON, "-c", SWAP_SCRIPT, uri, SPEC], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            line = proc.stdout.readline()
            assert line.startswith("first "), line + proc.stderr.read()
            size = os.path.getsize(root / names[-1])
            replace_with_new_version(root / names[-1], shrink=validator == "shrunk")
            out, err = proc.communicate("go\n", timeout=HANG_GUARD)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out + err
    assert out.startswith("error: "), out + err
    msg = out.split(" ", 2)[2]
    assert "%s/%s: the object changed while being read (" % (base, names[-1]) in msg, msg
    if validator == "shrunk":
        assert "the server announced %d bytes at open, the object now has %d)" % (
            size, size * 3 // 4) in msg, msg
    else:
        assert ("ETag " if validator == "etag" else "Last-Modified ") in msg, msg
    assert int(out.split()[1]) > 0
