"""memory_limit bounds decode scratch (issue 26): image bombs — files of a
few bytes or kilobytes whose headers declare huge pictures — under a 64 MB
limit are refused by name before anything is allocated, skipped and counted
under on_error='skip', and the process stays small; without a limit nothing
changes.

The bombs are written here from the formats' specifications (a 35-byte GIF
with a 16000x16000 logical screen, byte by byte; a PNG of zlib-compressed
zero rows with struct and zlib) or with PIL (a deflate TIFF and a lossless
WebP of one colour). Peak RSS is measured as the kernel reports it for a
child process (getrusage(RUSAGE_CHILDREN) in a fresh Python that runs
`stoker bench`), so no earlier test's children count. Before the budget
(a56ba71) the same bench reached 1.3-2 GB and decoded every bomb."""
import io
import os
import re
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

from conftest import STOKER
from module_util import stoker

LIMIT = 64 << 20
PIPE = "resize 64 | center_crop 64 | to u8 hwc"


def gif_bomb(w, h):
    """GIF89a: logical screen w x h with a 2-colour global table, one 1x1
    frame at (0, 0) holding index 0, trailer."""
    d = b"GIF89a" + struct.pack("<HHBBB", w, h, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    d += b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
    d += b"\x02\x02\x44\x01\x00" + b";"
    return d


def png_bomb(w, h):
    """An 8-bit RGB PNG of w x h black pixels: filter byte 0 and zeros,
    deflated (about 1000:1)."""
    z = zlib.compressobj(9)
    row = bytes(1 + 3 * w)
    idat = b"".join(z.compress(row) for _ in range(h)) + z.flush()

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


BOMBS = ("g0.jpg", "g1.jpg", "p0.png", "p1.png", "p2.png", "p3.png", "t0.tif", "w0.webp")


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    """ImageFolder: class a/ holds the bombs (GIFs named .jpg: the format is
    sniffed, and torchvision's extensions have no .gif), class b/ six
    ordinary 40x30 PNGs."""
    root = tmp_path_factory.mktemp("bombs")
    (root / "a").mkdir()
    (root / "b").mkdir()
    g = gif_bomb(16000, 16000)
    assert len(g) == 35
    for name in ("g0.jpg", "g1.jpg"):
        (root / "a" / name).write_bytes(g)
    p = png_bomb(12000, 12000)  # 432 MB of pixels in about 420 KB
    assert len(p) < 800_000
    for i in range(4):
        (root / "a" / ("p%d.png" % i)).write_bytes(p)
    Image.MAX_IMAGE_PIXELS = None
    big = Image.new("RGB", (8000, 8000))
    buf = io.BytesIO()
    big.save(buf, "TIFF", compression="tiff_deflate")
    (root / "a" / "t0.tif").write_bytes(buf.getvalue())
    buf = io.BytesIO()
    big.save(buf, "WEBP", lossless=True)
    (root / "a" / "w0.webp").write_bytes(buf.getvalue())
    del big
    rng = np.random.default_rng(3)
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(
            root / "b" / ("ok%d.png" % i))
    return str(root)


def run_measured(args):
    """Run a command in a fresh Python; (returncode, stdout, stderr, peak
    RSS of the command in bytes)."""
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stdout.write(r.stdout)\nsys.stderr.write(r.stderr)\n"
             "print('MAXRSS_KB %d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(r.returncode)\n")
    r = subprocess.run([sys.executable, "-c", probe] + list(args), capture_output=True,
                       text=True, timeout=600)
    kb = int(re.search(r"MAXRSS_KB (\d+)", r.stdout).group(1))
    return r.returncode, r.stdout, r.stderr, kb * 1024


def bench(folder, *extra):
    if not os.access(STOKER, os.X_OK):
        pytest.skip("no stoker CLI at %s" % STOKER)
    return run_measured([STOKER, "bench", folder, "-p", PIPE, "-b", "2", "-t", "2",
                         "--memory-limit", "64M"] + list(extra))


def test_bench_skips_every_bomb_and_stays_small(bombs):
    rc, out, err, rss = bench(bombs, "--on-error", "skip")
    assert rc == 0, err
    assert "6 samples" in out and "skipped:    8 corrupt samples" in out, out
    assert rss < 300 << 20, "peak RSS %.0f MB" % (rss / 2**20)


def test_bench_raise_names_the_file_the_need_and_the_budget(bombs):
    rc, out, err, rss = bench(bombs)
    assert rc != 0
    m = re.search(r"(a/\S+): (GIF|PNG|TIFF|WebP): decoding the (\d+)x(\d+) image needs (\d+) "
                  r"bytes \([\d.]+ MiB\), over the decode budget of (\d+) bytes \([\d.]+ MiB\) "
                  r"that memory_limit leaves each worker thread", err)
    assert m, err
    assert os.path.basename(m.group(1)) in BOMBS
    w, h, need, budget = (int(m.group(k)) for k in (3, 4, 5, 6))
    assert need >= 3 * w * h  # at least the RGB output
    assert budget < LIMIT // 2  # two threads share what the pool leaves
    assert rss < 300 << 20


def make(folder, **kw):
    opts = dict(batch_size=2, pipeline=PIPE, num_threads=2, memory_limit=LIMIT,
                output="numpy", shuffle=False)
    opts.update(kw)
    return stoker.Loader("imagefolder:" + folder, **opts)


def test_loader_raise_is_a_data_error_naming_the_file(bombs):
    with pytest.raises(stoker.DataError) as e:
        for _ in make(bombs):
            pass
    msg = str(e.value)
    assert re.search(r"[gptw]\d\.(jpg|png|tif|webp)", msg), msg
    assert "needs" in msg and "decode budget" in msg and "memory_limit" in msg, msg


def test_loader_skip_counts_the_bombs_and_keeps_the_rest(bombs):
    loader = make(bombs, on_error="skip")
    rows = sum(len(batch[1]) for batch in loader)
    assert rows == 6
    skipped = sorted(os.path.basename(path) for _, path, _ in loader.skipped)
    assert skipped == sorted(BOMBS)
    for _, _, why in loader.skipped:
        assert "decode budget" in why, why
    st = loader.stats()
    assert st["skipped"] == 8
    assert st["memory_bytes"] <= LIMIT


def test_share_depends_on_the_threads_option_not_the_machine(bombs):
    """threads='auto' takes the share of 8 threads, whatever the cores: the
    same budget as num_threads=8, and so the same images refused."""
    def budget(threads):
        with pytest.raises(stoker.DataError) as e:
            for _ in make(bombs, num_threads=threads, prefetch=2):
                pass
        return int(re.search(r"decode budget of (\d+) bytes", str(e.value)).group(1))

    assert budget("auto") == budget(8)
    assert budget(2) == 4 * budget(8) or abs(budget(2) - 4 * budget(8)) < 8


def test_no_memory_limit_decodes_a_large_canvas_as_before(tmp_path):
    """Without memory_limit there is no budget: a 3000x3000 GIF canvas (36
    MB of scratch) decodes, to the colour PIL gives; under 64M with two
    threads it is refused."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "g.jpg").write_bytes(gif_bomb(3000, 3000))
    ref = np.asarray(Image.open(tmp_path / "a" / "g.jpg").convert("RGB"))
    batches = list(make(str(tmp_path), memory_limit=None, pipeline="center_crop 8 | to u8 hwc",
                        batch_size=1))
    assert len(batches) == 1
    np.testing.assert_array_equal(batches[0][0][0], ref[1496:1504, 1496:1504])
    with pytest.raises(stoker.DataError):
        list(make(str(tmp_path), pipeline="center_crop 8 | to u8 hwc", batch_size=1))
