"""The wds: reader against tars written by Python's tarfile (the reference
writer), in its three formats (ustar, GNU with 'L' long names, pax):

- every image member's bytes and every label, read through the C API;
- the grouping of members into samples, against WebDataset's own rule (the
  regular expression of webdataset.tariterators.base_plus_ext and the
  consecutive-run grouping of group_by_keys, written out here in Python) on
  randomly generated tricky names: dots in directories, several extensions
  ("x.seg.png"), basenames starting with '.', metadata members;
- "same samples, same batches": a subset of the photos set written as
  WebDataset shards gives the same `stoker bench --digest` as the .stk pack
  of the same files in the same order, and `stoker pack wds:...` (also with
  --restart) gives shards with that digest;
- damage found by the Python module: a corrupt image member is a DataError
  naming the member, a cut tar fails the open naming the member.
C-level header cases (checksums, base-256, pax records...) are in
tests/test_wds.c."""
import ctypes as C
import io
import os
import random
import re
import tarfile

import numpy as np
import pytest

from conftest import need_photos, run_stoker

from stk_ctypes import Info, lib  # noqa: E402


def read_all(uri):
    """(format, [(image bytes, label)], [skipped messages]); raises with the
    library's message when the open fails."""
    ds = C.c_void_p()
    if lib.stk_dataset_open(uri.encode(), None, C.byref(ds)) != 0:
        raise RuntimeError(lib.stk_errmsg().decode())
    info = Info()
    lib.stk_dataset_info_get(ds, C.byref(info))
    out = []
    for i in range(info.count):
        p, n, lab = C.c_void_p(), C.c_size_t(), C.c_int64()
        assert lib.stk_dataset_read_field(ds, i, b"image", C.byref(p), C.byref(n), None) == 0
        out.append((C.string_at(p, n.value), None))
        lib.stk_free(p)
        assert lib.stk_dataset_label(ds, i, C.byref(lab)) == 0
        out[-1] = (out[-1][0], lab.value)
    skipped = [lib.stk_dataset_skipped(ds, i).decode()
               for i in range(lib.stk_dataset_skipped_count(ds))]
    fmt = info.format.decode()
    lib.stk_dataset_close(ds)
    return fmt, out, skipped


def add(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tar.addfile(ti, io.BytesIO(data))


FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_tarfile_round_trip(tmp_path, fmt):
    rng = np.random.default_rng(11)
    want = []
    path = str(tmp_path / "shard.tar")
    long_dir = "d" * 60 + "/" + "e" * 60  # > 100 bytes with the file name: prefix, L or pax
    with tarfile.open(path, "w", format=FORMATS[fmt]) as t:
        for i in range(40):
            img = rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()
            label = int(rng.integers(-5, 1000))
            key = "%s/%06d" % (long_dir, i) if i % 3 == 0 else "s%06d" % i
            if fmt == "pax" and i % 5 == 0:
                key += "-\u00e9\u4e2d"  # non-ASCII: a pax path record
            ext = ["jpg", "png", "JPEG", "webp"][i % 4]
            lext = ["cls", "txt"][i % 2]
            if i % 2:
                add(t, key + "." + ext, img)
                add(t, key + "." + lext, (" %d\n" % label).encode())
            else:
                add(t, key + "." + lext, str(label).encode())
                add(t, key + ".json", b"{}")
                add(t, key + "." + ext, img)
            want.append((img, label))
    for uri in ("wds:" + path, "webdataset:" + path, path, "wds:" + str(tmp_path)):
        got_fmt, got, skipped = read_all(uri)
        assert got_fmt == "wds" and skipped == []
        assert got == want


# --- WebDataset's grouping rule, written out from webdataset/tariterators.py ---

BASE_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META_RE = re.compile(r"__[^/]*__($|/)")


def webdataset_samples(members, image_exts, label_exts):
    """Samples as group_by_keys + to_tuple would make them: a list of
    (image, label text) or the string 'duplicate' when group_by_keys raises,
    plus the number of incomplete runs."""
    samples, incomplete, cur, key = [], 0, None, None

    def close():
        nonlocal incomplete
        if cur is None:
            return
        img = next((cur[e] for e in image_exts if e in cur), None)
        lab = next((cur[e] for e in label_exts if e in cur), None)
        if img is None or lab is None:
            incomplete += 1
        else:
            samples.append((img, int(lab)))

    for name, data in members:
        if "/" not in name and name.startswith("__") and name.endswith("__"):
            continue
        if META_RE.match(name):
            continue
        m = BASE_RE.match(name)
        if not m:
            continue
        prefix, suffix = m.group(1), m.group(2).lower()
        if cur is None or prefix != key:
            close()
            cur, key = {}, prefix
        if suffix in cur:
            return "duplicate", 0
        cur[suffix] = data
    close()
    return samples, incomplete


PIECES = ["a", "b.c", ".d", "e", "__m__", "f.g.h", "", "i_", "__x"]
EXTS = ["jpg", "JPG", "png", "cls", "txt", "seg.png", "json", ""]


@pytest.mark.parametrize("seed", range(12))
def test_grouping_matches_webdataset(tmp_path, seed):
    r = random.Random(seed)
    members = []
    run_key, run_exts = None, set()
    for _ in range(60):
        depth = r.choice([0, 0, 1, 2])
        dirs = [r.choice(PIECES) or "z" for _ in range(depth)]
        base = r.choice(PIECES + ["k%d" % r.randrange(5)]) or "y"
        stem = "/".join(dirs + [base])
        for _ in range(r.choice([1, 2, 2, 3])):
            ext = r.choice(EXTS)
            name = stem + ("." + ext if ext else "")
            if name.endswith("/") or any(name == m[0] for m in members):
                continue
            # Seeds below 9 avoid a repeated extension within a run (which
            # WebDataset refuses); the others keep whatever comes.
            m = BASE_RE.match(name)
            if m and not META_RE.match(name) and not (name.startswith("__") and
                                                      name.endswith("__")):
                if m.group(1) != run_key:
                    run_key, run_exts = m.group(1), set()
                if m.group(2).lower() in run_exts and seed < 9:
                    continue
                run_exts.add(m.group(2).lower())
            if ext.lower() in ("cls", "txt"):
                data = str(r.randrange(-3, 50)).encode()
            else:
                data = os.urandom(r.randrange(1, 40)) + name.encode()
            members.append((name, data))
    path = str(tmp_path / "tricky.tar")
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in members:
            add(t, name, data)
    want, incomplete = webdataset_samples(members, ["jpg", "png"], ["cls", "txt"])
    uri = "wds:%s?image=jpg;png&missing=skip" % path
    if want == "duplicate":
        with pytest.raises(RuntimeError, match="already has a"):
            read_all(uri)
        return
    if not want:
        with pytest.raises(RuntimeError, match="no samples"):
            read_all(uri)
        return
    _, got, skipped = read_all(uri)
    assert got == want, [m[0] for m in members]
    assert len(skipped) == incomplete


def test_tricky_names_by_hand(tmp_path):
    path = str(tmp_path / "t.tar")
    members = [("a.b/c.seg.png", b"1"), ("a.b/c.cls", b"1"),      # key a.b/c
               ("x/.y.jpg", b"2"), ("x/.y.cls", b"2"),            # key x/, exts y.jpg, y.cls
               ("p.q/.r.jpg", b"3"), ("p.q/.r.cls", b"3"),        # no match: left out
               ("__meta__", b"{}"), ("__k__/v.jpg", b"4"),        # metadata: left out
               ("u.JPG", b"5"), ("u.Cls", b"5")]                  # extensions lowercased
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for name, data in members:
            add(t, name, data)
    want, _ = webdataset_samples(members, ["seg.png", "y.jpg", "jpg"], ["cls", "y.cls"])
    assert want == [(b"1", 1), (b"2", 2), (b"5", 5)]
    _, got, skipped = read_all("wds:%s?image=seg.png;y.jpg;jpg&label=cls;y.cls" % path)
    assert got == want and skipped == []


# --- Same samples, same batches --------------------------------------------

SPEC = "imagenet-train-few"


def digest(uri):
    p = run_stoker("bench", uri, "--pipeline", SPEC, "--batch", 8, "--epochs", 2, "--threads", 2,
                   "--seed", 3, "--digest")
    return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]


def test_photos_digest_same_as_stk_pack(tmp_path):
    root = os.path.join(need_photos("train"), "train")
    classes = sorted(os.listdir(root))[:4]
    files = []
    for label, c in enumerate(classes):
        names = sorted(f for f in os.listdir(os.path.join(root, c)) if f.endswith(".jpg"))
        files += [(os.path.join(root, c, f), label) for f in names[:5]]
    assert len(files) >= 8
    # The reference: the files listed in order, packed into .stk.
    listing = tmp_path / "files.txt"
    listing.write_text("".join("%s\t%d\n" % f for f in files))
    run_stoker("pack", "-q", "list:%s" % listing, tmp_path / "ref")
    ref = digest(str(tmp_path / "ref"))
    # The same files as two WebDataset shards written by tarfile.
    shards = tmp_path / "wds"
    shards.mkdir()
    half = len(files) // 2
    for s, part in enumerate([files[:half], files[half:]]):
        with tarfile.open(shards / ("shard-%06d.tar" % s), "w", format=tarfile.GNU_FORMAT) as t:
            for i, (f, label) in enumerate(part):
                key = "%s/%06d" % (os.path.basename(os.path.dirname(f)), s * half + i)
                t.add(f, arcname=key + ".jpg")
                add(t, key + ".cls", b"%d" % label)
    pattern = "wds:%s/shard-{000000..000001}.tar" % shards
    assert digest(pattern) == ref
    assert digest(str(shards)) == ref
    # stoker pack from the tar shards, as kept bytes and with restart markers.
    run_stoker("pack", "-q", pattern, tmp_path / "packed")
    assert digest(str(tmp_path / "packed")) == ref
    run_stoker("pack", "-q", "--restart", 4, str(shards), tmp_path / "restart")
    assert digest(str(tmp_path / "restart")) == ref


# --- Damage through the Python module ---------------------------------------

def test_module_reports_members(tmp_path):
    from module_util import stoker
    path = str(tmp_path / "bad.tar")
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        add(t, "000000.jpg", b"\xff\xd8\xff not really a jpeg")
        add(t, "000000.cls", b"2")
    ds = stoker.open("wds:" + path)
    assert len(ds) == 1
    with pytest.raises(stoker.DataError, match=r"bad\.tar: member 000000\.jpg \(byte 0\)"):
        ds[0]
    # Cut inside the image member: the open names the member and the offset.
    data = open(path, "rb").read()
    open(path, "wb").write(data[:512 + 10])
    with pytest.raises(Exception, match=r"bad\.tar: byte 0: member '000000\.jpg': its size, 21 "
                                        r"bytes, runs past the end of the file \(522 bytes\)"):
        stoker.open("wds:" + path)
    # Incomplete samples left out with missing=skip are listed.
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        add(t, "a.jpg", b"x")
        add(t, "b.jpg", b"y")
        add(t, "b.cls", b"1")
    with pytest.warns(RuntimeWarning, match=r"1 input left out: .*sample 'a' \(byte 0\)"):
        ds = stoker.open("wds:%s?missing=skip" % path)
    assert len(ds) == 1 and ds.skipped_inputs == [
        "%s: sample 'a' (byte 0): no label member (looked for .cls, .txt; it has .jpg)" % path]
    # A caption where a label was expected.
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        add(t, "k.jpg", b"x")
        add(t, "k.txt", b"a cat on a mat")
    with pytest.raises(Exception, match=r"member k\.txt \(byte \d+\): label 'a cat on a mat' is "
                                        r"not a decimal integer"):
        stoker.open("wds:" + path)


def test_corrupt_member_skipped_once_per_epoch(tmp_path):
    root = os.path.join(need_photos("train"), "train")
    c = sorted(os.listdir(root))[0]
    files = sorted(f for f in os.listdir(os.path.join(root, c)) if f.endswith(".jpg"))[:5]
    path = str(tmp_path / "skip.tar")
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i, f in enumerate(files):
            t.add(os.path.join(root, c, f), arcname="%03d.jpg" % i)
            add(t, "%03d.cls" % i, b"0")
            if i == 2:
                add(t, "bad.jpg", b"\xff\xd8\xff not a jpeg")
                add(t, "bad.cls", b"0")
    args = ("bench", "wds:" + path, "--pipeline", SPEC, "--batch", 2, "--threads", 2)
    p = run_stoker(*args, "--epochs", 3, "--on-error", "skip")
    assert "skipped:    3 corrupt samples" in p.stdout, p.stdout
    p = run_stoker(*args, "--epochs", 1, check=False)
    assert p.returncode != 0
    assert re.search(r"skip\.tar: member bad\.jpg \(byte \d+\): JPEG", p.stderr), p.stderr


def test_many_shards_under_a_low_descriptor_limit(tmp_path):
    """Each open tar holds one descriptor (the SIGBUS guard's); a set of 200
    shards opens with a
    soft limit of 128 open files (the reader raises it towards the hard
    limit), and fails naming a tar when the hard limit is that low too."""
    import resource
    import subprocess
    from conftest import STOKER
    for s in range(200):
        with tarfile.open(tmp_path / ("shard-%06d.tar" % s), "w") as t:
            add(t, "k.jpg", b"x%d" % s)
            add(t, "k.cls", b"%d" % s)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip("hard RLIMIT_NOFILE %d" % hard)
    uri = "wds:%s/shard-{000000..000199}.tar" % tmp_path

    def inspect(soft, hard_limit):
        return subprocess.run([STOKER, "inspect", uri], capture_output=True, text=True,
                              timeout=60, preexec_fn=lambda: resource.setrlimit(
                                  resource.RLIMIT_NOFILE, (soft, hard_limit)))
    p = inspect(128, hard)
    assert p.returncode == 0 and "samples:  200" in p.stdout, p.stderr
    p = inspect(128, 128)
    assert p.returncode != 0 and re.search(r"shard-000\d\d\d\.tar: .*Too many open files",
                                           p.stderr), p.stderr
