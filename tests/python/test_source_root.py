"""Dataset.source_root (issue 26): the directory `stoker pack` ran in, stored
as metadata source_root when the input path is relative (docs/format.md), is
readable from Python, unescaped as one line of the label map; None for an
absolute input, for shards without it and for a value ds.path() does not use
either. The expected values are the pack's os.getcwd() (realpath'd, as pack
records it without symlinks) and hand-escaped strings, not the code's own
output."""
import io
import os
import subprocess

import numpy as np
from PIL import Image

import stoker
from conftest import STOKER


def jpeg(seed=0):
    arr = np.random.default_rng(seed).integers(0, 256, (12, 16, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def make_folder(root):
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        (root / c / "0.jpg").write_bytes(jpeg(ord(c)))


def pack(src, dest, cwd):
    subprocess.run([STOKER, "pack", str(src), str(dest), "--quiet"], cwd=str(cwd), check=True,
                   capture_output=True, timeout=120)


def test_relative_input_gives_the_packs_directory(tmp_path):
    # A directory name that needs every kind of escape: an LF, a backslash
    # and a byte that is not UTF-8 (the value is one escaped line; a reader
    # that did not unescape it would give "\\n", "\\\\" and "\\xff").
    cwd = tmp_path / os.fsdecode(b"run\nhere\\x\xff")
    make_folder(cwd / "imgs")
    pack("imgs", tmp_path / "shards", cwd)
    ds = stoker.open(str(tmp_path / "shards"))
    assert ds.source_root == os.path.realpath(cwd)
    assert isinstance(ds.source_root, str)
    # the root ds.path() joins the stored relative names to
    for i in range(len(ds)):
        assert ds.path(i).startswith(ds.source_root + "/imgs/"), ds.path(i)
        assert os.path.exists(ds.path(i))


def test_absolute_input_has_none(tmp_path):
    make_folder(tmp_path / "imgs")
    pack(tmp_path / "imgs", tmp_path / "shards", tmp_path)
    assert stoker.open(str(tmp_path / "shards")).source_root is None


def test_other_datasets_have_none(tmp_path):
    make_folder(tmp_path / "imgs")
    assert stoker.open(str(tmp_path / "imgs")).source_root is None


def write(dest, meta):
    fields = {"image": "image", "label": "int64", "source_name": "string"}
    with stoker.ShardWriter(str(dest), fields, metadata=meta) as w:
        w.write({"image": jpeg(), "label": 0, "source_name": "x/0.jpg"})
    return stoker.open(str(dest))


def test_escapes_decoded_as_the_label_map(tmp_path):
    """ShardWriter stores the value as given, so hand-escaped values check
    the decoding against docs/format.md ("The label map"): \\\\ is a
    backslash, \\n an LF, \\xHH (either case, not 00) the byte HH, and any
    other backslash stays as it is."""
    cases = {
        r"/plain/dir": "/plain/dir",
        r"/a\\b": "/a\\b",
        r"/new\nline": "/new\nline",
        r"/t\x09ab\x2Fc\x2fd": "/t\tab/c/d",
        r"/bad\xffbyte": os.fsdecode(b"/bad\xffbyte"),
        r"/kept\q\x00\x4\xzz\x": "/kept\\q\\x00\\x4\\xzz\\x",
        "/end\\": "/end\\",
    }
    for i, (value, want) in enumerate(cases.items()):
        ds = write(tmp_path / ("s%d" % i), {"source_root": value})
        assert ds.source_root == want, (value, ds.source_root)
        if "\n" not in want and "\\" not in want:  # ds.path joins the same root
            assert ds.path(0) == want + "/x/0.jpg"


def test_unused_values_give_none(tmp_path):
    """A root that stk_dataset_sample_path would not join names to (not one
    absolute directory) is not reported either: ds.path(0) stays as stored."""
    for i, value in enumerate(["rel/dir", "", "/two\n/lines"]):
        ds = write(tmp_path / ("u%d" % i), {"source_root": value})
        assert ds.source_root is None, value
        assert ds.path(0) == "x/0.jpg"
    assert write(tmp_path / "none", None).source_root is None
