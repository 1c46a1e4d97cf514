"""stoker pack / inspect / verify / cat on an image folder with hostile files,
made here with PIL: good images packed byte for byte, every unreadable input
listed by name, damage caught by verify with the shard and record named."""
import glob
import io
import os
import random
import subprocess

import numpy as np
import pytest
from PIL import Image

from conftest import STOKER, run_stoker


def jpeg_bytes(rng, w, h, **kw):
    arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


@pytest.fixture
def folder(tmp_path):
    """3 classes x 4 good images (baseline, progressive, grayscale, CMYK), a
    real PNG named .jpg, and 4 hostile files in class 'b'."""
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    good = {}
    for c in ["a", "b", "c"]:
        (root / c).mkdir(parents=True)
        for i in range(4):
            kw = {}
            if i == 1:
                kw["progressive"] = True
            data = jpeg_bytes(rng, 40 + i, 30 + i, **kw)
            if i == 2:
                buf = io.BytesIO()
                Image.open(io.BytesIO(data)).convert("L").save(buf, "JPEG")
                data = buf.getvalue()
            if i == 3:
                buf = io.BytesIO()
                Image.open(io.BytesIO(data)).convert("CMYK").save(buf, "JPEG")
                data = buf.getvalue()
            p = root / c / ("%02d.jpg" % i)
            p.write_bytes(data)
            good[str(p)] = data
    png = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(png, "PNG")
    (root / "c" / "99_png_named.jpg").write_bytes(png.getvalue())
    good[str(root / "c" / "99_png_named.jpg")] = png.getvalue()
    full = jpeg_bytes(rng, 64, 64)
    bad = {
        "90_truncated.jpg": full[: len(full) // 2],
        "91_empty.jpg": b"",
        "92_random.jpg": bytes(random.Random(1).getrandbits(8) for _ in range(500)),
    }
    huge = bytearray(jpeg_bytes(rng, 16, 16))
    sof = huge.index(b"\xff\xc0")
    huge[sof + 5:sof + 9] = (65500).to_bytes(2, "big") * 2
    bad["93_huge_dims.jpg"] = bytes(huge)
    for name, data in bad.items():
        (root / "b" / name).write_bytes(data)
    return root, good, bad


def test_pack_lists_every_bad_input_and_round_trips_bytes(folder, tmp_path):
    root, good, bad = folder
    out = tmp_path / "shards"
    p = run_stoker("pack", root, out, "--shard-size", "20K", "--jobs", 3)
    assert "packed %d records" % len(good) in p.stdout
    assert "skipped %d" % len(bad) in p.stdout
    for name in bad:
        assert name in p.stderr, (name, p.stderr)
    assert len(glob.glob(str(out / "*.stk"))) >= 2  # 20K shards: several
    # Record order = ImageFolder order (sorted classes, sorted files) minus
    # the bad ones; bytes equal the source files exactly.
    order = sorted(good, key=lambda s: (os.path.basename(os.path.dirname(s)), os.path.basename(s)))
    for i, path in enumerate(order):
        r = subprocess.run([STOKER, "cat", str(out), str(i)], capture_output=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout == good[path], path
        lab = subprocess.run([STOKER, "cat", str(out), str(i), "--field", "label"],
                             capture_output=True).stdout
        assert int.from_bytes(lab, "little") == "abc".index(os.path.basename(os.path.dirname(path)))
    ins = run_stoker("inspect", out).stdout
    assert "samples:  %d" % len(good) in ins
    assert "image (encoded)" in ins
    for c in "abc":
        assert c in ins  # label map stored and shown
    assert "OK:" in run_stoker("verify", out, "--decode").stdout


def test_strict_pack_fails_naming_the_file(folder, tmp_path):
    root, _, _ = folder
    p = run_stoker("pack", root, tmp_path / "strict", "--strict", check=False)
    assert p.returncode == 1
    assert "90_truncated.jpg" in p.stderr
    assert not glob.glob(str(tmp_path / "strict" / "*.stk"))  # nothing half-made


def test_verify_names_shard_and_record_on_damage(folder, tmp_path):
    root, good, _ = folder
    out = tmp_path / "v"
    run_stoker("pack", root, out)
    shard = sorted(glob.glob(str(out / "*.stk")))[0]
    data = bytearray(open(shard, "rb").read())
    # Flip one byte in the middle of record 5: find it via cat's bytes.
    r = subprocess.run([STOKER, "cat", str(out), "5"], capture_output=True)
    at = bytes(data).index(r.stdout)
    data[at + len(r.stdout) // 2] ^= 0xFF
    open(shard, "wb").write(bytes(data))
    p = run_stoker("verify", out, check=False)
    assert p.returncode == 1
    assert "DAMAGED %s record 5" % shard in p.stdout
    # Truncated and zeroed-footer shards are named too.
    open(shard, "wb").write(bytes(data[:-100]))
    p = run_stoker("verify", out, check=False)
    assert p.returncode == 1 and shard in p.stdout
    data[-64:] = bytes(64)
    open(shard, "wb").write(bytes(data))
    p = run_stoker("verify", out, check=False)
    assert p.returncode == 1 and "footer" in p.stdout


def test_verify_says_what_it_checked_and_that_decode_checks_more(folder):
    """Without --decode an image folder's files are read, not decoded: of
    the 4 hostile files only the empty one fails. The summary says images
    were not decoded and a note names --decode (issue 26: 'FAILED for 4 of
    16' with no hint); with --decode all 4 are found and there is no note."""
    root, good, bad = folder
    n = len(good) + len(bad)
    p = run_stoker("verify", root, check=False)
    assert p.returncode == 1
    damaged = [l for l in p.stdout.splitlines() if l.startswith("DAMAGED")]
    assert len(damaged) == 1 and "91_empty.jpg: empty file" in damaged[0], p.stdout
    assert "FAILED: %d samples read (images not decoded); 1 damaged samples\n" % n in p.stdout
    note = p.stdout.splitlines()[-1]
    assert note.startswith("note: without --decode,") and "not decoded" in note, p.stdout
    assert "'stoker verify %s --decode' decodes every image" % root in note
    p = run_stoker("verify", root, "--decode", check=False)
    assert p.returncode == 1
    damaged = [l for l in p.stdout.splitlines() if l.startswith("DAMAGED")]
    assert sorted(name for name in bad if any(name in l for l in damaged)) == sorted(bad)
    assert len(damaged) == len(bad)
    assert p.stdout.endswith("FAILED: %d samples read and decoded; %d damaged samples\n"
                             % (n, len(bad)))
    # shards: records checked against their checksums; the note says
    # images were not decoded there either
    out = root.parent / "shards"
    run_stoker("pack", root, out, "--quiet")
    p = run_stoker("verify", out)
    assert p.stdout.startswith("OK: 1 shards, %d records checked (images not decoded);" % len(good))
    assert "note: without --decode, each record's bytes are checked against their checksums" \
        in p.stdout
    assert "note:" not in run_stoker("verify", out, "--decode").stdout


PATHS_FROM = """
import json, sys
import stoker
ds = stoker.open(sys.argv[1])
print(json.dumps([ds.path(i) for i in range(len(ds))]))
"""


def paths_from(cwd, shards):
    """ds.path(i) of every record, in a Python started in `cwd`."""
    import json
    import sys
    p = subprocess.run([sys.executable, "-c", PATHS_FROM, str(shards)], cwd=str(cwd),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def good_in_order(good):
    return sorted(good, key=lambda s: (os.path.basename(os.path.dirname(s)),
                                       os.path.basename(s)))


def test_packed_relative_paths_resolve_from_any_directory(folder, tmp_path):
    """Packed from tmp_path with the relative input 'imgs', ds.path(i) on the
    shards is the source file's absolute path, from any working directory
    (issue 26: it resolved only from where pack ran): the pack's directory
    is stored as source_root and relative names are resolved against it."""
    root, good, _ = folder
    subprocess.run([STOKER, "pack", "imgs", "shards", "--quiet"], cwd=str(tmp_path),
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    order = good_in_order(good)
    for cwd in (elsewhere, "/"):
        paths = paths_from(cwd, tmp_path / "shards")
        assert len(paths) == len(order)
        for path, src in zip(paths, order):
            assert os.path.isabs(path), path
            assert os.path.realpath(path) == os.path.realpath(src)
            with open(path, "rb") as f:
                assert f.read() == good[src]
    ins = run_stoker("inspect", tmp_path / "shards").stdout
    assert "source_root %s\n" % os.path.realpath(tmp_path) in ins, ins
    # the names are stored as opened (relative), so older readers see what
    # they always saw
    raw = subprocess.run([STOKER, "cat", str(tmp_path / "shards"), "0", "--field",
                          "source_name"], capture_output=True, check=True).stdout
    assert raw.decode() == os.path.relpath(order[0], tmp_path)


def test_absolute_source_packs_same_bytes_from_any_directory(folder, tmp_path):
    """An absolute input makes absolute names and no source_root: the
    shards are the same bytes whichever directory pack ran in."""
    root, good, _ = folder
    made = []
    for i, cwd in enumerate((tmp_path, root)):
        dest = tmp_path / ("abs%d" % i)
        subprocess.run([STOKER, "pack", str(root), str(dest), "--quiet"], cwd=str(cwd),
                       check=True, capture_output=True)
        made.append(b"".join(f.read_bytes() for f in sorted(dest.iterdir())))
    assert made[0] == made[1]
    assert "source_root" not in run_stoker("inspect", tmp_path / "abs0").stdout
    assert paths_from("/", tmp_path / "abs0") == good_in_order(good)


def test_shards_without_source_root_give_names_as_stored(tmp_path):
    """Shards of an older pack (relative source_name, no source_root) still
    open and give the name as stored, which resolves from the directory the
    pack ran in (docs/format.md); with a source_root (an absolute
    directory) a relative name is joined to it, an absolute one kept."""
    import stoker
    img = jpeg_bytes(np.random.default_rng(1), 8, 8)
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "x.jpg").write_bytes(img)
    fields = {"image": "image", "label": "int64", "source_name": "string"}
    names = ["src/a/x.jpg", "/abs/elsewhere/y.jpg"]
    for dest, meta in (("old", None), ("rooted", {"source_root": str(tmp_path)})):
        with stoker.ShardWriter(str(tmp_path / dest), fields, metadata=meta) as w:
            for n in names:
                w.write({"image": img, "label": 0, "source_name": n})
    assert paths_from(tmp_path, tmp_path / "old") == names
    assert paths_from("/", tmp_path / "old") == names
    with open(os.path.join(str(tmp_path), paths_from("/", tmp_path / "old")[0]), "rb") as f:
        assert f.read() == img  # from the pack's directory, as before
    assert paths_from("/", tmp_path / "rooted") == [str(tmp_path / "src/a/x.jpg"), names[1]]
    run_stoker("verify", tmp_path / "old", "--decode")


def test_pack_reencode_shrinks_like_pil(tmp_path):
    """--reencode --max-side 24 --quality 92: images larger than 24 px are
    shrunk with Pillow's bilinear (aspect kept) and stored as JPEGs close to
    PIL's own resize of the source; smaller ones keep their size."""
    root = tmp_path / "smooth" / "k"
    root.mkdir(parents=True)
    yy, xx = np.mgrid[0:90, 0:90]
    sizes = {}
    for i, (h, w) in enumerate([(60, 90), (90, 60), (20, 16)]):
        img = np.stack([(xx[:h, :w] * 2) % 256, (yy[:h, :w] * 3) % 256,
                        np.full((h, w), 128)], axis=-1).astype(np.uint8)
        Image.fromarray(img).save(root / ("%d.png" % i))
        sizes[i] = img
    out = tmp_path / "re"
    run_stoker("pack", tmp_path / "smooth", out, "--reencode", "--max-side", 24, "--quality", 92)
    expect_sizes = [(24, 16), (16, 24), (16, 20)]  # PIL (w, h)
    for i in range(3):
        r = subprocess.run([STOKER, "cat", str(out), str(i)], capture_output=True)
        im = Image.open(io.BytesIO(r.stdout))
        assert im.format == "JPEG" and im.size == expect_sizes[i]
        src = Image.fromarray(sizes[i])
        ref = np.asarray(src.resize(im.size, Image.BILINEAR), dtype=np.float64)
        err = np.abs(np.asarray(im.convert("RGB"), dtype=np.float64) - ref).mean()
        assert err < 6.0, (i, err)  # JPEG q92 of smooth content
    p = run_stoker("pack", tmp_path / "smooth", tmp_path / "bad", "--max-side", 24, check=False)
    assert p.returncode == 2 and "--reencode" in p.stderr


def test_pack_restart_keeps_pixels_and_crops_agree(folder, tmp_path):
    """--restart 4: YCbCr and gray JPEGs are rewritten with restart markers
    (a DRI segment appears) and decode, with PIL, to exactly the source's
    pixels; CMYK and the PNG keep their bytes. Random-resized-crop batches
    (which decode through restart windows) are identical to those from the
    byte-for-byte pack."""
    root, good, _ = folder
    big = tmp_path / "big"
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:180, 0:260]
    for c in "pq":
        (big / c).mkdir(parents=True)
        for i, sub in enumerate([0, 1, 2]):  # PIL subsampling: 4:4:4, 4:2:2, 4:2:0
            img = np.stack([(xx * 3 + i * 40) % 256, (yy * 2) % 256, (xx + yy) % 256], -1)
            img = (img + rng.integers(0, 24, img.shape)).clip(0, 255).astype(np.uint8)
            Image.fromarray(img).save(big / c / ("%d.jpg" % i), "JPEG", quality=92,
                                      subsampling=sub)
    for src, n_jpeg_rewritable in ((root, 9), (big, 6)):
        plain, rst = tmp_path / (src.name + "-plain"), tmp_path / (src.name + "-rst")
        run_stoker("pack", src, plain)
        p = run_stoker("pack", src, rst, "--restart", 4)
        total = len(glob.glob(str(src / "*" / "*")))
        if src == root:
            total -= 4  # the hostile files
        assert "rewrote %d of %d JPEGs" % (n_jpeg_rewritable, total) in p.stdout, p.stdout
        for i in range(total):
            a = subprocess.run([STOKER, "cat", str(plain), str(i)], capture_output=True).stdout
            b = subprocess.run([STOKER, "cat", str(rst), str(i)], capture_output=True).stdout
            ia, ib = Image.open(io.BytesIO(a)), Image.open(io.BytesIO(b))
            if ia.format == "JPEG" and ia.mode in ("RGB", "L"):
                assert b != a and b"\xff\xdd" in b, i  # rewritten, with a DRI
            else:
                assert b == a, i  # CMYK, PNG: kept as they are
            assert np.array_equal(np.asarray(ia), np.asarray(ib)), i
        assert "OK:" in run_stoker("verify", rst, "--decode").stdout
        if src == big:
            spec = "random_resized_crop 96 | flip | to u8 hwc"
            digests = []
            for d in (plain, rst):
                out = run_stoker("bench", d, "--pipeline", spec, "--batch", 4, "--epochs", 3,
                                 "--digest").stdout
                digests.append([l for l in out.splitlines() if l.startswith("digest: ")])
            assert digests[0] and digests[0] == digests[1]
    p = run_stoker("pack", root, tmp_path / "x", "--raw", "--restart", 4, check=False)
    assert p.returncode == 2 and "--restart" in p.stderr


def shard_records(out):
    """Records per shard, from `stoker inspect` (in shard order)."""
    ins = run_stoker("inspect", out).stdout
    return [int(l.split(": ")[1].split()[0]) for l in ins.splitlines()
            if l.startswith("  ") and ".stk: " in l]


def test_verify_names_the_global_sample_index(folder, tmp_path):
    """Record 2 of shard 1 is sample records(shard 0) + 2, and verify says so."""
    root, good, _ = folder
    out = tmp_path / "g"
    run_stoker("pack", root, out, "--shard-size", "20K")
    counts = shard_records(out)
    assert len(counts) >= 2 and counts[0] >= 1
    shard1 = sorted(glob.glob(str(out / "*.stk")))[1]
    sample = counts[0] + 2
    r = subprocess.run([STOKER, "cat", str(out), str(sample)], capture_output=True)
    data = bytearray(open(shard1, "rb").read())
    at = bytes(data).index(r.stdout)
    data[at + len(r.stdout) // 2] ^= 0xFF
    open(shard1, "wb").write(bytes(data))
    p = run_stoker("verify", out, check=False)
    assert p.returncode == 1
    assert "DAMAGED %s record 2: %s: record 2 (sample %d): checksum mismatch" % (
        shard1, shard1, sample) in p.stdout, p.stdout


def test_missing_or_foreign_shard_is_refused_by_name(folder, tmp_path):
    """A shard set knows its members: a missing shard, or one of another
    pack, makes open (inspect, cat) and verify fail naming it."""
    root, _, _ = folder
    out, other = tmp_path / "m", tmp_path / "o"
    run_stoker("pack", root, out, "--shard-size", "8K")
    run_stoker("pack", root, other, "--shard-size", "4K", "--reencode", "--quality", 50)
    shards = sorted(glob.glob(str(out / "*.stk")))
    n = len(shards)
    assert n >= 3
    assert "OK: %d shards" % n in run_stoker("verify", out).stdout
    moved = str(tmp_path / "moved.stk")
    os.rename(shards[1], moved)
    for cmd in (["inspect", out], ["cat", out, 0]):
        p = run_stoker(*cmd, check=False)
        assert p.returncode == 1
        assert "incomplete shard set" in p.stderr and "%d of %d shards; missing shard 1 " % (
            n - 1, n) in p.stderr, p.stderr
    p = run_stoker("verify", out, check=False)
    assert p.returncode == 1
    assert "DAMAGED %s: incomplete shard set" % out in p.stdout, p.stdout
    assert "missing shard 1 " in p.stdout
    # The other pack's shard 1 in its place: a foreign shard, named.
    os.replace(sorted(glob.glob(str(other / "*.stk")))[1], shards[1])
    p = run_stoker("inspect", out, check=False)
    assert p.returncode == 1
    assert "%s: belongs to another shard set" % shards[1] in p.stderr, p.stderr
    p = run_stoker("verify", out, check=False)
    assert p.returncode == 1
    assert "DAMAGED %s: belongs to another shard set" % shards[1] in p.stdout, p.stdout
    os.replace(moved, shards[1])
    assert "OK: %d shards" % n in run_stoker("verify", out).stdout
