"""The stoker CLI: reproducible digests, order, JSON report, errors."""
import json
import re
import subprocess
import os

import numpy as np
import pytest
import xxhash

from conftest import run_stoker

SPEC = "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw"


def digest(uri, *extra):
    p = run_stoker("bench", uri, "--pipeline", SPEC, "--batch", 16, "--epochs", 2, "--digest", *extra)
    lines = [l for l in p.stdout.splitlines() if l.startswith("digest: ")]
    assert len(lines) == 1, p.stdout
    return lines[0].split()[1]


def test_digest_same_for_any_thread_count(cifar_dir):
    uri = "cifar10:" + cifar_dir[0]
    d1 = digest(uri, "--threads", 1, "--seed", 5)
    d2 = digest(uri, "--threads", 2, "--seed", 5)
    d7 = digest(uri, "--threads", 7, "--seed", 5, "--prefetch", 2)
    assert d1 == d2 == d7
    assert len(d1) == 32
    assert digest(uri, "--threads", 2, "--seed", 6) != d1


def test_digest_matches_independent_reference(cifar_dir):
    """u8 output, no shuffle, deterministic ops: the digest equals one computed
    here from the raw files with NumPy and the documented digest layout."""
    root, images, labels = cifar_dir
    p = run_stoker("bench", "cifar10:" + root, "--pipeline", "pad 2 | center_crop 32 | flip 1 | to u8 chw",
                   "--batch", 10, "--no-shuffle", "--digest", "--threads", 3)
    got = [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]
    h = xxhash.xxh3_128()
    out = images[:, :, :, ::-1]  # pad 2 then center crop 32 is the identity; flip
    for b in range(0, len(images), 10):
        h.update(np.ascontiguousarray(out[b:b + 10]).tobytes())
        h.update(labels[b:b + 10].astype("<i8").tobytes())
    assert got == "%032x" % h.intdigest()


def test_bench_json_report(cifar_dir):
    p = run_stoker("bench", "cifar10:" + cifar_dir[0], "--pipeline", SPEC, "--json", "--batch", 32)
    r = json.loads(p.stdout)
    for key in ("samples_per_s", "mb_per_s", "peak_rss_mb", "elapsed_s", "stages"):
        assert key in r
    assert r["samples"] == 185
    assert r["batches"] == 6
    assert r["sample_bytes"] == 3 * 32 * 32 * 4
    for stage in ("read_s", "augment_s", "worker_idle_s", "consumer_wait_s"):
        assert r["stages"][stage] >= 0
    assert r["samples_per_s"] > 0 and r["peak_rss_mb"] > 0


def test_bench_ranks_cover_dataset_once(cifar_dir):
    """order over 3 ranks = every index once, plus the padded ones twice."""
    seen = []
    for r in range(3):
        p = run_stoker("order", "cifar10:" + cifar_dir[0], "--seed", 1, "--epoch", 2,
                       "--rank", r, "--world-size", 3)
        seen += [int(x) for x in p.stdout.split()]
    n = 185
    per = -(-n // 3)
    assert len(seen) == per * 3
    counts = np.bincount(seen, minlength=n)
    assert counts.min() == 1 and (counts == 2).sum() == per * 3 - n


def test_hostile_cifar_files(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    good = bytes([3]) + bytes(3072)
    (d / "data_batch_1.bin").write_bytes(good * 2 + good[:100])  # truncated
    for i in range(2, 6):
        (d / ("data_batch_%d.bin" % i)).write_bytes(good)
    p = run_stoker("bench", "cifar10:%s" % d, "--pipeline", "to u8", check=False)
    assert p.returncode == 1
    assert "data_batch_1.bin" in p.stderr
    (d / "data_batch_1.bin").write_bytes(good + bytes([42]) + bytes(3072))  # label 42
    p = run_stoker("bench", "cifar10:%s" % d, "--pipeline", "to u8", check=False)
    assert p.returncode == 1
    assert "data_batch_1.bin" in p.stderr and "42" in p.stderr


def test_bad_spec_is_usage_error(cifar_dir):
    p = run_stoker("bench", "cifar10:" + cifar_dir[0], "--pipeline", "pad 4 | frobnicate", check=False)
    assert p.returncode == 2
    assert "frobnicate" in p.stderr and "^" in p.stderr


def test_demo_runs_when_fashion_mnist_installed():
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        import pytest
        pytest.skip("dataset-fashion-mnist not installed")
    p = run_stoker("demo", "--epochs", 1, "--json")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["samples"] == 60000


# --------------------------------------------------------------- numbers
# docs/cli.md: a bad number is a usage error (exit 2) naming the option; 0 is
# never read as "the default" on the command line (issue 9, defect 9).

@pytest.mark.parametrize("cmd, option", [
    ("bench", "--threads"), ("bench", "--batch"), ("bench", "--prefetch"),
    ("bench", "--world-size"), ("order", "--batch"), ("order", "--world-size"),
    ("pack", "--jobs"), ("pack", "--zstd"), ("pack", "--max-side"), ("pack", "--quality"),
    ("preview", "--count"), ("preview", "--columns"),
])
def test_zero_count_is_usage_error(cifar_dir, tmp_path, cmd, option):
    uri = "cifar10:" + cifar_dir[0]
    args = {"bench": [uri, "--pipeline", "to u8"],
            "order": [uri],
            "pack": [uri, str(tmp_path / "out")] + (["--raw"] if option == "--zstd" else
                                                     ["--reencode"] if option in ("--max-side", "--quality")
                                                     else []),
            "preview": [uri, "--pipeline", "to u8", "-o", str(tmp_path / "p.png")]}[cmd]
    p = run_stoker(cmd, *args, option, 0, check=False)
    assert p.returncode == 2, p.stderr
    assert p.stderr == "stoker: %s must be at least 1, got '0'\n" % option
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("option, value, message", [
    ("--threads", 99999999, "loader: 99999999 threads is more than the limit of 1024"),
    ("--prefetch", 99999, "loader: prefetch 99999 is more than the limit of 4095"),
    ("--threads", 2 ** 32, "--threads: 4294967296 is too large"),
    ("--batch", -1, "--batch: expected a non-negative integer, got '-1'"),
    ("--threads", "2x", "--threads: expected a non-negative integer, got '2x'"),
])
def test_out_of_range_number_is_usage_error(cifar_dir, option, value, message):
    p = run_stoker("bench", "cifar10:" + cifar_dir[0], "--pipeline", "to u8", option, value,
                   check=False)
    assert p.returncode == 2 and p.stderr == "stoker: %s\n" % message


def test_one_is_accepted_where_zero_is_refused(cifar_dir):
    p = run_stoker("bench", "cifar10:" + cifar_dir[0], "--pipeline", "to u8", "--json",
                   "--threads", 1, "--batch", 1, "--prefetch", 1, "--world-size", 1)
    r = json.loads(p.stdout)
    assert (r["threads"], r["batch_size"], r["prefetch"], r["batches"]) == (1, 1, 1, 185)


@pytest.mark.parametrize("spec, col, reason", [
    ("normalize mean=0 std=1e-45 | to f32", 22,
     "std '1e-45' is too small: dividing by it overflows float32"),
    ("normalize 0.5,0.5,0.5 0.2,1e-39,0.2 | to f32", 27,
     "std '1e-39' is too small: dividing by it overflows float32"),
    ("normalize 1e39 1 | to f32", 16, "mean 1e+39 divided by std '1' overflows float32"),
])
def test_normalize_overflowing_float_is_refused(cifar_dir, spec, col, reason):
    """(x - mean) / std for x in [0, 1] must fit a float: std=1e-45 gave inf."""
    p = run_stoker("bench", "cifar10:" + cifar_dir[0], "--pipeline", spec, check=False)
    assert p.returncode == 2
    assert "pipeline spec, column %d: %s (the output would be inf)" % (col, reason) in p.stderr


def test_normalize_small_std_within_float_runs(cifar_dir):
    """The bound is the float range, not a guess: std=1e-30 is accepted and
    gives the finite values (x/255 - 0.5) / 1e-30 (NumPy float64 reference)."""
    from module_util import stoker
    d, images, labels = cifar_dir
    run_stoker("bench", "cifar10:" + d, "--pipeline", "normalize 0.5 1e-30 | to f32 chw")
    loader = stoker.Loader("cifar10:" + d, batch_size=185, pipeline="normalize 0.5 1e-30 | to f32 chw",
                           output="numpy")
    (got, got_labels), = list(loader)
    want = (images.astype(np.float64) / 255 - 0.5) / 1e-30
    assert np.isfinite(got).all() and np.array_equal(got_labels, labels)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e24)  # atol: 1e-6 of 1 / std


@pytest.mark.parametrize("size", ["0", "0.1", "nan", "-1", "2x"])
def test_pack_shard_size_below_one_byte_is_usage_error(cifar_dir, tmp_path, size):
    """0.1 became 0 bytes, which the library reads as its 1G default."""
    p = run_stoker("pack", "cifar10:" + cifar_dir[0], tmp_path / "out", "--shard-size", size,
                   check=False)
    assert p.returncode == 2
    assert p.stderr == "stoker: --shard-size: expected a size like 512M or 1G, got '%s'\n" % size
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- issue 11: CLI polish

@pytest.mark.parametrize("args,message", [
    (["bnech"], "stoker: unknown command 'bnech'; did you mean 'bench'?\n"),
    (["inpsect", "x"], "stoker: unknown command 'inpsect'; did you mean 'inspect'?\n"),
    (["perview"], "stoker: unknown command 'perview'; did you mean 'preview'?\n"),
    (["help", "pakc"], "stoker: no command 'pakc'; did you mean 'pack'?\n"),
    (["frobnicate"], "stoker: unknown command 'frobnicate' (try 'stoker help')\n"),
    (["--verison"], "stoker: unknown command '--verison'; did you mean '--version'?\n"),
    (["bench", "x", "--pipline", "to u8"],
     "stoker: unknown option '--pipline'; did you mean '--pipeline'?\n"),
    (["bench", "x", "--pipeline", "to u8", "--treads=2"],
     "stoker: unknown option '--treads=2'; did you mean '--threads'?\n"),
    (["order", "10", "--wrold-size", "2"],
     "stoker: unknown option '--wrold-size'; did you mean '--world-size'?\n"),
    (["pack", "a", "b", "--shard-szie", "1M"],
     "stoker: unknown option '--shard-szie'; did you mean '--shard-size'?\n"),
    (["verify", "x", "--decod"], "stoker: unknown option '--decod'; did you mean '--decode'?\n"),
    (["inspect", "--hlep"], "stoker: unknown option '--hlep'; did you mean '--help'?\n"),
    (["cat", "x", "0", "--feild", "label"],
     "stoker: unknown option '--feild'; did you mean '--field'?\n"),
    (["preview", "x", "--colums", "3"],
     "stoker: unknown option '--colums'; did you mean '--columns'?\n"),
    (["bench", "x", "--zzzzzz"], "stoker: unknown option '--zzzzzz' (see --help)\n"),
    (["order", "10", "-x"], "stoker: unknown option '-x' (see --help)\n"),
])
def test_did_you_mean(args, message):
    p = run_stoker(*args, check=False)
    assert p.returncode == 2
    assert p.stderr == message


# cli/args.c: one message per kind of mistake, whichever command takes the flag
@pytest.mark.parametrize("args,message", [
    (["bench"], "bench: missing DATASET (see 'stoker bench --help')"),
    (["bench", "x", "y", "--pipeline", "to u8"],
     "bench: unexpected argument 'y' (see 'stoker bench --help')"),
    (["bench", "x"], "bench: --pipeline is required (see 'stoker bench --help')"),
    (["demo", "extra"], "demo: unexpected argument 'extra' (see 'stoker demo --help')"),
    (["doctor", "x", "y"], "doctor: unexpected argument 'y' (see 'stoker doctor --help')"),
    (["preview", "x", "--pipeline", "to u8"],
     "preview: -o FILE is required (see 'stoker preview --help')"),
    (["order"], "order: missing DATASET-or-SIZE (see 'stoker order --help')"),
    (["pack"], "pack: missing SRC and DEST (see 'stoker pack --help')"),
    (["pack", "a"], "pack: missing DEST (see 'stoker pack --help')"),
    (["inspect", "a", "b"], "inspect: unexpected argument 'b' (see 'stoker inspect --help')"),
    (["verify"], "verify: missing DATASET (see 'stoker verify --help')"),
    (["verify", "a", "b"], "verify: unexpected argument 'b' (see 'stoker verify --help')"),
    (["cat", "a"], "cat: missing INDEX (see 'stoker cat --help')"),
    (["cache", "trim"], "cache trim: missing SIZE (see 'stoker cache --help')"),
    # a flag without its value: getopt's commands and the hand-parsed ones alike
    (["bench", "x", "--pipeline"], "option '--pipeline' needs a value"),
    (["order", "10", "-b"], "option '-b' needs a value"),
    (["verify", "x", "--progress-interval"], "option '--progress-interval' needs a value"),
    (["cache", "info", "--dir"], "option '--dir' needs a value"),
    (["--plugin"], "option '--plugin' needs a value"),
    # bounds: one form for every count
    (["pack", "a", "b", "--zstd", "20"], "--zstd: 20 is more than 19"),
    (["pack", "a", "b", "--quality", "101"], "--quality: 101 is more than 100"),
    (["pack", "a", "b", "--restart", "0"], "--restart must be at least 1, got '0'"),
    (["bench", "x", "--pipeline", "to u8", "--epochs", "0"], "--epochs must be at least 1, got '0'"),
    # sizes: one parser (pack --shard-size, bench --memory-limit, cache trim)
    (["bench", "x", "--pipeline", "to u8", "--memory-limit", "0"],
     "--memory-limit: expected a size like 512M or 1G, got '0'"),
    (["cache", "trim", "0.1"], "cache trim SIZE: expected a size like 512M or 1G, got '0.1'"),
    # times and named values
    (["bench", "x", "--pipeline", "to u8", "--step-ms", "-1"],
     "--step-ms: expected a positive number of milliseconds up to 3600000, got '-1'"),
    (["doctor", "x", "--pipeline", "to u8", "--step-ms", "0"],
     "--step-ms: expected a positive number of milliseconds, got '0'"),
    (["bench", "x", "--pipeline", "to u8", "--decoder", "gpu"],
     "--decoder: expected 'cpu' or 'nvjpeg', got 'gpu'"),
    (["bench", "x", "--pipeline", "to u8", "--on-error", "ignore"],
     "--on-error: expected 'raise', 'skip' or 'replace', got 'ignore'"),
])
def test_usage_messages_have_one_form(args, message):
    p = run_stoker(*args, check=False)
    assert p.returncode == 2 and p.stderr == "stoker: %s\n" % message, p.stderr


@pytest.mark.parametrize("size", ["1G", "1g", "20K", "1.5G", "512MiB", "512MB", "1e6", "1"])
def test_sizes_every_command_accepts(tmp_path, size):
    """Parsed (the run then fails on the missing source: status 1, not 2)."""
    p = run_stoker("pack", tmp_path / "missing", tmp_path / "out", "--shard-size", size,
                   check=False)
    assert p.returncode == 1 and "no such file or directory" in p.stderr, p.stderr
    p = run_stoker("bench", tmp_path / "missing", "--pipeline", "to u8", "--memory-limit", size,
                   check=False)
    assert p.returncode == 1 and "no such file or directory" in p.stderr, p.stderr


def test_missing_path_and_empty_pattern_say_so(tmp_path):
    missing = str(tmp_path / "no-such-dir")
    for cmd in (["inspect", missing], ["bench", missing, "--pipeline", "to u8"],
                ["pack", missing, str(tmp_path / "out")]):
        p = run_stoker(*cmd, check=False)
        assert p.returncode == 1
        assert missing + ": no such file or directory\n" in p.stderr, p.stderr
        assert "looked for" not in p.stderr and "data_batch_1.bin" not in p.stderr
    pattern = str(tmp_path / "*.jpg")
    p = run_stoker("inspect", pattern, check=False)
    assert p.returncode == 1
    assert p.stderr == "stoker: %s: no file matches this pattern\n" % pattern
    # an existing directory of no known layout keeps the list of layouts
    p = run_stoker("inspect", str(tmp_path), check=False)
    assert p.returncode == 1
    assert "no dataset detected in this directory (looked for" in p.stderr
    assert "ImageFolder" in p.stderr


def test_inspect_image_folder_reads_no_file(tmp_path):
    """The label histogram comes from the directory walk: every image here is
    a dangling symlink (kept by the listing, as torchvision keeps it), so
    reading any one would fail; inspect still prints the counts."""
    root = tmp_path / "folder"
    counts = {"cat": 3, "dog": 1, "eel": 2}
    for cls, n in counts.items():
        (root / cls).mkdir(parents=True)
        for i in range(n):
            os.symlink(str(tmp_path / "gone" / ("%s%d.jpg" % (cls, i))),
                       str(root / cls / ("%d.jpg" % i)))
    p = run_stoker("inspect", str(root))
    assert "samples:  6\n" in p.stdout
    assert "labels:   3 classes\n" in p.stdout
    for label, (cls, n) in enumerate(counts.items()):
        assert "  %4d %-24s %d\n" % (label, cls, n) in p.stdout, p.stdout
    # ... and a loader still finds the files unreadable when it reads them
    p = run_stoker("bench", str(root), "--pipeline", "resize 8,8 | to u8", check=False)
    assert p.returncode == 1 and ".jpg: cannot open: No such file or directory" in p.stderr
    # the same for a list file
    lst = tmp_path / "list.txt"
    lst.write_text("folder/cat/0.jpg\t4\nfolder/dog/0.jpg\t1\nfolder/eel/0.jpg\t4\n")
    p = run_stoker("inspect", "list:%s" % lst)
    assert "     4 %-24s 2\n" % "" in p.stdout and "     1 %-24s 1\n" % "" in p.stdout, p.stdout


PROGRESS_LINE = re.compile(r"pack: (\d+)/(\d+) records \((\d+\.\d)%\), (\d+) records/s, "
                           r"(\d+\.\d) MB/s, (\d+\.\d) MB written, ETA (\d+:\d\d(?::\d\d)?|\?)$")


def test_pack_progress_lines_when_not_a_terminal(cifar_dir, tmp_path):
    """185 records, --jobs 1: blocks of 64 records, one line after each."""
    p = run_stoker("pack", cifar_dir[0], str(tmp_path / "a"), "--jobs", 1,
                   "--progress-interval", 0)
    lines = [l for l in p.stderr.splitlines() if l.startswith("pack: ")]
    got = [PROGRESS_LINE.match(l) for l in lines]
    assert all(got), p.stderr
    assert [(int(m[1]), int(m[2]), m[3]) for m in got] == [
        (64, 185, "34.6"), (128, 185, "69.2"), (185, 185, "100.0")]
    written = [float(m[6]) for m in got]
    assert written == sorted(written) and written[0] > 0
    # 64 raw 32x32x3 records are at least 64 * 3072 bytes
    assert written[0] >= 64 * 3072 / 1e6 - 0.05
    assert got[-1][7] == "0:00"
    assert "packed 185 records" in p.stdout
    # the default: every 10 seconds, and always the last line
    p = run_stoker("pack", cifar_dir[0], str(tmp_path / "b"))
    lines = [l for l in p.stderr.splitlines() if l.startswith("pack: ")]
    assert lines and PROGRESS_LINE.match(lines[-1]) and lines[-1].startswith("pack: 185/185 ")
    # --quiet: none
    p = run_stoker("pack", cifar_dir[0], str(tmp_path / "c"), "--quiet", "--progress-interval", 0)
    assert p.stderr == ""
    p = run_stoker("pack", cifar_dir[0], str(tmp_path / "d"), "--progress-interval", "x",
                   check=False)
    assert p.returncode == 2
    assert p.stderr == "stoker: --progress-interval: expected a non-negative integer, got 'x'\n"


def read_terminal(master):
    """Everything the child writes to the pseudo-terminal whose master side
    is `master`, until it closes its side (EIO or end of file)."""
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO once the child closed the terminal
            return out
        if not chunk:
            return out
        out += chunk


def test_pack_progress_bar_on_a_terminal(cifar_dir, tmp_path):
    """stderr on a pseudo-terminal: one line redrawn with \\r, ending with the
    full bar, the counts, the rates and the ETA."""
    import pty
    from conftest import STOKER
    master, slave = pty.openpty()
    p = subprocess.Popen([STOKER, "pack", cifar_dir[0], str(tmp_path / "a"), "--jobs", "1"],
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out = read_terminal(master)
    p.wait(timeout=300)
    os.close(master)
    assert p.returncode == 0
    text = out.decode()
    assert "\r\x1b[K[" + "#" * 30 + "] 185/185 100.0% " in text, repr(text)
    last = text.rsplit("\r\x1b[K", 1)[1]
    assert re.fullmatch(r"\[#{30}\] 185/185 100\.0% \d+ rec/s \d+\.\d MB/s ETA 0:00\r?\n", last), \
        repr(last)
    assert "pack: " not in text  # not the plain lines


VERIFY_LINE = re.compile(r"verify: (\d+)/(\d+) records \((\d+\.\d)%\), (\d+) records/s, "
                         r"ETA (\d+:\d\d(?::\d\d)?|\?)$")


@pytest.mark.parametrize("packed", [False, True])
def test_verify_progress_lines_when_not_a_terminal(cifar_dir, tmp_path, packed):
    """verify prints pack's progress lines (issue 26: --decode ran minutes
    without one): every 64 records with --progress-interval 0, for a
    dataset read through its reader and for shards (their records counted
    from the headers first), the last at 100%; --quiet: none."""
    uri = cifar_dir[0]
    if packed:
        uri = str(tmp_path / "shards")
        run_stoker("pack", cifar_dir[0], uri, "--shard-size", "100K", "--quiet")
        assert len(os.listdir(uri)) >= 5  # several shards: the total spans them
    p = run_stoker("verify", uri, "--decode", "--progress-interval", 0)
    lines = [l for l in p.stderr.splitlines() if l.startswith("verify: ")]
    got = [VERIFY_LINE.match(l) for l in lines]
    assert lines and all(got), p.stderr
    assert [(int(m[1]), int(m[2]), m[3]) for m in got] == [
        (64, 185, "34.6"), (128, 185, "69.2"), (185, 185, "100.0")]
    assert got[-1][5] == "0:00"
    assert p.stdout.startswith("OK: ")
    # the default: every 10 seconds, and always the last line
    p = run_stoker("verify", uri)
    assert p.stderr.splitlines()[-1].startswith("verify: 185/185 records (100.0%)"), p.stderr
    for quiet in ("-q", "--quiet"):
        p = run_stoker("verify", uri, quiet, "--progress-interval", 0)
        assert p.stderr == ""
    p = run_stoker("verify", uri, "--progress-interval=x", check=False)
    assert p.returncode == 2
    assert p.stderr == "stoker: --progress-interval: expected a non-negative integer, got 'x'\n"


def test_verify_progress_bar_on_a_terminal(cifar_dir, tmp_path):
    """stderr on a pseudo-terminal: pack's bar, redrawn in place, without
    MB/s (verify writes nothing); the summary stays on stdout."""
    import pty
    from conftest import STOKER
    master, slave = pty.openpty()
    p = subprocess.Popen([STOKER, "verify", cifar_dir[0], "--decode"],
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out = read_terminal(master)
    stdout = p.communicate(timeout=300)[0].decode()
    os.close(master)
    assert p.returncode == 0
    text = out.decode()
    last = text.rsplit("\r\x1b[K", 1)[1]
    assert re.fullmatch(r"\[#{30}\] 185/185 100\.0% \d+ rec/s ETA 0:00\r?\n", last), repr(text)
    assert "verify: " not in text  # not the plain lines
    assert stdout == "OK: 185 samples read and decoded; 0 damaged samples\n"


# ---------------------------------------------------------------- preview: scale, compare, labels

def preview_png(*args):
    from PIL import Image
    run_stoker("preview", *args)
    return np.asarray(Image.open(args[args.index("-o") + 1]).convert("RGB")).astype(int)


def first_indices(uri, seed, n):
    p = run_stoker("order", uri, "--seed", seed)
    return [int(x) for x in p.stdout.split()[:n]]


def test_preview_enlarges_small_images(cifar_dir, tmp_path):
    """CIFAR's 32x32: each pixel a 2x2 block by default (the smallest whole
    factor reaching 64), k x k with --scale k; tiles 2 pixels apart."""
    root, images, labels = cifar_dir
    uri = "cifar10:" + root
    hwc = images.transpose(0, 2, 3, 1)
    idx = first_indices(uri, 3, 4)
    out = str(tmp_path / "p.png")
    g = preview_png(uri, "--pipeline", "to u8", "--count", 4, "--columns", 2, "--seed", 3,
                    "-o", out)
    assert g.shape == (2 * 64 + 2, 2 * 64 + 2, 3)
    for t, i in enumerate(idx):
        y, x = (t // 2) * 66, (t % 2) * 66
        want = np.repeat(np.repeat(hwc[i], 2, axis=0), 2, axis=1)
        assert (g[y:y + 64, x:x + 64] == want).all(), t
    assert (g[64:66, :] == 40).all() and (g[:, 64:66] == 40).all()
    g = preview_png(uri, "--pipeline", "to u8", "--count", 4, "--columns", 4, "--seed", 3,
                    "--scale", 3, "-o", out)
    assert g.shape == (96, 4 * 96 + 3 * 2, 3)
    assert (g[:96, 98:194] == np.repeat(np.repeat(hwc[idx[1]], 3, 0), 3, 1)).all()
    g = preview_png(uri, "--pipeline", "to u8", "--count", 1, "--scale", 1, "--seed", 3,
                    "-o", out)
    assert (g == hwc[idx[0]]).all()
    # an f32 normalized output enlarges the same way (within the rounding of undoing it)
    g = preview_png(uri, "--pipeline", "normalize cifar10 | to f32 chw", "--count", 1,
                    "--seed", 3, "-o", out)
    assert g.shape == (64, 64, 3)
    assert np.abs(g - np.repeat(np.repeat(hwc[idx[0]], 2, 0), 2, 1)).max() <= 1
    for bad, msg in (("0", "--scale must be at least 1, got '0'"),
                     ("65", "--scale: 65 is more than 64")):
        p = run_stoker("preview", uri, "--pipeline", "to u8", "--scale", bad, "-o", out,
                       check=False)
        assert p.returncode == 2 and p.stderr == "stoker: %s\n" % msg


def test_preview_compare_shows_original_beside_augmented(cifar_dir, tmp_path):
    root, images, labels = cifar_dir
    uri = "cifar10:" + root
    hwc = images.transpose(0, 2, 3, 1)
    idx = first_indices(uri, 7, 3)
    out = str(tmp_path / "c.png")
    g = preview_png(uri, "--pipeline", "flip 1 | to u8", "--count", 3, "--columns", 2,
                    "--seed", 7, "--compare", "-o", out)
    cell = 64 + 2 + 64
    assert g.shape == (64 + 8 + 64, 2 * cell + 8, 3)
    up = lambda a: np.repeat(np.repeat(a, 2, 0), 2, 1)
    for t, i in enumerate(idx):
        y, x = (t // 2) * (64 + 8), (t % 2) * (cell + 8)
        assert (g[y:y + 64, x:x + 64] == up(hwc[i])).all(), t                  # original
        assert (g[y:y + 64, x + 66:x + 130] == up(hwc[i][:, ::-1])).all(), t   # flipped
        assert (g[y:y + 64, x + 64:x + 66] == 40).all()
    assert (g[72:, cell + 8:] == 40).all()  # no fourth cell


def test_preview_compare_fits_original_keeping_aspect(tmp_path):
    """A 20x40 original into a 64x64 tile: 64x32, centred, as Pillow's
    bilinear resize makes it (40 -> 64 is no whole factor)."""
    from PIL import Image
    rng = np.random.default_rng(1)
    root = tmp_path / "f"
    (root / "a").mkdir(parents=True)
    src = rng.integers(0, 256, (20, 40, 3), dtype=np.uint8)
    Image.fromarray(src).save(str(root / "a" / "x.png"))
    out = str(tmp_path / "o.png")
    g = preview_png(str(root), "--pipeline", "resize 16,16 | to u8", "--compare", "-o", out)
    assert g.shape == (64, 64 + 2 + 64, 3)  # 16x16 enlarged 4 times
    want = np.asarray(Image.fromarray(src).resize((64, 32), Image.BILINEAR)).astype(int)
    assert (g[16:48, :64] == want).all()
    assert (g[:16, :64] == 40).all() and (g[48:, :64] == 40).all()


def caption_extent(g, y0, x0, width):
    """Columns of the 7 caption rows at (y0, x0) that hold white text."""
    strip = g[y0:y0 + 7, x0:x0 + width]
    assert set(np.unique(strip)) <= {40, 255}
    return np.nonzero((strip == 255).all(axis=2).any(axis=0))[0]


def test_preview_labels_caption_each_tile(cifar_dir, tmp_path):
    root, images, labels = cifar_dir
    uri = "cifar10:" + root
    idx = first_indices(uri, 2, 4)
    out = str(tmp_path / "l.png")
    plain = preview_png(uri, "--pipeline", "to u8", "--count", 4, "--columns", 2, "--seed", 2,
                        "-o", out)
    g = preview_png(uri, "--pipeline", "to u8", "--count", 4, "--columns", 2, "--seed", 2,
                    "--labels", "-o", out)
    assert g.shape == (2 * (64 + 11) + 2, 2 * 64 + 2, 3)
    for t, i in enumerate(idx):
        y, x = (t // 2) * (75 + 2), (t % 2) * 66
        py, px = (t // 2) * 66, (t % 2) * 66
        assert (g[y:y + 64, x:x + 64] == plain[py:py + 64, px:px + 64]).all()  # tile untouched
        text = "#%d label %d" % (i, labels[i])  # CIFAR-10 files carry no class names
        cols = caption_extent(g, y + 66, x, 64)
        n = len(text[:(64 + 1) // 6].rstrip())  # cut to the 10 characters of 64 pixels
        assert cols.min() == 0  # '#' starts at the left edge
        assert cols.max() <= 6 * n - 2, (text, cols)
        assert cols.max() >= 6 * (n - 1), (text, cols)  # the last character drawn has ink
        assert (g[y + 64:y + 66, x:x + 64] == 40).all() and (g[y + 73:y + 75, x:x + 64] == 40).all()


def test_preview_labels_name_the_class(tmp_path):
    from PIL import Image
    root = tmp_path / "f"
    for cls, v in (("ant", 10), ("bumblebee", 200)):
        (root / cls).mkdir(parents=True)
        Image.fromarray(np.full((70, 70, 3), v, np.uint8)).save(str(root / cls / "0.png"))
    out = str(tmp_path / "n.png")
    g = preview_png(str(root), "--pipeline", "center_crop 64 | to u8", "--count", 2,
                    "--columns", 2, "--labels", "--seed", 0, "-o", out)
    assert g.shape == (64 + 11, 2 * 64 + 2, 3)
    for x in (0, 66):
        v = g[10, x + 10, 0]
        text = "#0 ant" if v == 10 else "#1 bumbleb"  # cut to the 10 characters of 64 pixels
        cols = caption_extent(g, 66, x, 64)
        assert 6 * (len(text) - 1) <= cols.max() <= 6 * len(text) - 2, (text, cols)


def test_inspect_tfrecord_indents_index_lines_and_says_names_are_missing(tmp_path):
    """A TFRecord set's "index" note has a line per file: each continues
    under the first, not at column 0. Its labels are bare numbers: inspect
    says the dataset names no classes instead of printing blank names."""
    from tfrecord_writer import example, write_tfrecord
    d = tmp_path / "set"
    d.mkdir()
    for f in range(3):
        write_tfrecord(str(d / ("part-%02d.tfrecord" % f)),
                       [example({"image/encoded": b"x%d" % i, "image/class/label": i % 2})
                        for i in range(4)])
    out = run_stoker("inspect", "tfrecord:%s" % d).stdout
    lines = out.splitlines()
    at = [i for i, l in enumerate(lines) if l.startswith("index ")]
    assert len(at) == 1, out
    index = lines[at[0]:at[0] + 3]
    for f, line in enumerate(index):
        assert ("part-%02d.tfrecord" % f) in line, out
        assert line.startswith("index     " if f == 0 else " " * 10), out
        assert not line[10:].startswith(" "), out
    assert "labels:   2 classes (numbers only: the dataset names no classes)" in out
    counts = [l.split() for l in lines if re.match(r"^ +[01] +\d+$", l)]
    assert counts == [["0", "6"], ["1", "6"]], out


def test_bench_names_variable_size_images(tmp_path):
    from PIL import Image
    for i, (h, w) in enumerate(((20, 30), (40, 10))):
        (tmp_path / "c").mkdir(exist_ok=True)
        Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(str(tmp_path / "c" / ("%d.png" % i)))
    out = run_stoker("bench", str(tmp_path), "--pipeline", "resize 8,8 | to u8").stdout
    assert out.splitlines()[0] == "stoker bench: %s (2 samples, variable size)" % tmp_path, out
