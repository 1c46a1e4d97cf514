"""wheel_smoke.py — what scripts/wheels.sh checks in a fresh venv where a wheel was installed.

Two halves, run by two interpreters:

    /usr/bin/python3 tests/wheel_smoke.py make DIR
        Debian's Python writes the data with independent writers (NumPy, PIL,
        h5py, zarr): an image folder DIR/folder (PNG and JPEG files, two
        classes), the same pixels as an HDF5 file DIR/data.h5 (/images,
        /labels) and a Zarr v2 group DIR/zarr (Blosc-compressed chunks), and
        the expected pixels and labels DIR/expected.npz (the PNG pixels as
        written, the JPEG as PIL decodes it; stoker's decoders match PIL's
        exactly, tests/python/test_codec_pil.py).

    VENV/bin/python tests/wheel_smoke.py check DIR [--cli BUILD/stoker]
        The venv's Python, from a directory outside the checkout: imports
        stoker, checks that every C library the extension needs was loaded
        from the wheel (stoker.libs/, what auditwheel copied in) and none from
        the system, loads each dataset with stoker.Loader and compares the
        batch with the expected pixels and labels exactly, runs the installed
        command-line tool (VENV/bin/stoker and `python -m stoker`: --help,
        version, a usage error, `pack --raw --zstd` whose shards are loaded
        too) and, with --cli, compares `bench --digest` of the installed tool
        with the CMake-built one on the same data (the same C code).

Prints one line per check and "wheel-smoke: N passed, 0 failed"; exits 1 at the
first failure with what differed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

H, W = 20, 24
CLASSES = {"cat": ["0.png", "1.png"], "dog": ["0.png", "1.jpg", "2.png"]}
# The C libraries the extension links (setup.py) and the names auditwheel
# gives their copies: stoker.libs/libjpeg-HASH.so.62... Not zlib: the
# manylinux policies count libz.so.1 as part of every system (with libc,
# libm, libstdc++), so auditwheel leaves it out and the system's is used.
VENDORED = ["libjpeg", "libspng", "libzstd", "libblosc", "liblmdb", "libjansson", "libxxhash", "libhdf5", "libwebp",
            "libtiff", "libgif"]

passed = 0


def ok(what):
    global passed
    passed += 1
    print(f"ok {passed}: {what}", flush=True)


def fail(what):
    print(f"wheel smoke: FAILED: {what}", file=sys.stderr, flush=True)
    print(f"wheel-smoke: {passed} passed, 1 failed", flush=True)
    sys.exit(1)


def make(out):
    import h5py
    import numpy as np
    import zarr
    from numcodecs import Blosc
    from PIL import Image

    rng = np.random.default_rng(11)
    images, labels = [], []
    for label, (cls, files) in enumerate(sorted(CLASSES.items())):
        os.makedirs(os.path.join(out, "folder", cls), exist_ok=True)
        for name in sorted(files):
            # smooth gradients plus noise: JPEG keeps them close, PNG exact
            y, x = np.mgrid[0:H, 0:W]
            base = np.stack([x * 10, y * 12, (x + y) * 5], axis=-1) + label * 40
            px = np.clip(base + rng.integers(0, 30, (H, W, 3)), 0, 255).astype(np.uint8)
            path = os.path.join(out, "folder", cls, name)
            if name.endswith(".png"):
                Image.fromarray(px).save(path)
            else:
                Image.fromarray(px).save(path, quality=90)
                with Image.open(path) as im:
                    px = np.asarray(im.convert("RGB"))
            images.append(px)
            labels.append(label)
    images = np.stack(images)
    labels = np.array(labels, dtype=np.int64)
    np.savez(os.path.join(out, "expected.npz"), images=images, labels=labels)
    with h5py.File(os.path.join(out, "data.h5"), "w") as f:
        f.create_dataset("images", data=images)
        f.create_dataset("labels", data=labels)
    g = zarr.group(store=zarr.DirectoryStore(os.path.join(out, "zarr")), overwrite=True)
    g.create_dataset("images", data=images, chunks=(2, H, W, 3),
                     compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
    g.create_dataset("labels", data=labels, chunks=(3,), compressor=Blosc(cname="zstd"))
    print(f"wheel smoke: wrote {len(labels)} samples to {out}")


def run(argv, want_rc=0, want=None):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != want_rc or (want and want not in r.stdout + r.stderr):
        fail(f"{' '.join(argv)}: exit {r.returncode} (expected {want_rc})"
             f"{f', no {want!r} in the output' if want else ''}:\n{r.stdout}{r.stderr}")
    return r.stdout


def check(data, cli):
    import numpy as np

    import stoker

    pkg = os.path.dirname(os.path.abspath(stoker.__file__))
    if not pkg.startswith(os.path.realpath(sys.prefix) + os.sep):
        fail(f"stoker was imported from {pkg}, not from the venv {sys.prefix}")
    ok(f"import stoker {stoker.__version__} from {pkg}")

    # Every library was loaded from the wheel's stoker.libs/, none from the system.
    libs = os.path.realpath(os.path.join(os.path.dirname(pkg), "stoker.libs"))
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if "/" in line}
    for name in VENDORED:
        files = [m for m in mapped if os.path.basename(m).startswith(name + "-")
                 or os.path.basename(m).startswith(name + ".so")
                 or os.path.basename(m).startswith(name + "_")]
        if not files:
            fail(f"{name} is not loaded after import stoker (mapped: {sorted(mapped)})")
        outside = [m for m in files if not os.path.realpath(m).startswith(libs + os.sep)]
        if outside:
            fail(f"{name} was loaded from {outside}, not from the wheel's {libs}")
    ok(f"{', '.join(VENDORED)} loaded from {libs}")

    exp = np.load(os.path.join(data, "expected.npz"))
    n = len(exp["labels"])

    def same(uri, what):
        # the crop to the images' own size states it for the image folder
        loader = stoker.Loader(uri, batch_size=n, shuffle=False, dtype="uint8", layout="NHWC",
                               output="numpy", num_threads=2, transforms=[stoker.CenterCrop((H, W))])
        batches = list(loader)
        if len(batches) != 1:
            fail(f"{uri}: {len(batches)} batches, expected 1")
        images, labels = batches[0]
        if images.shape != exp["images"].shape or not np.array_equal(images, exp["images"]):
            diff = (np.abs(images.astype(int) - exp["images"]).max()
                    if images.shape == exp["images"].shape else images.shape)
            fail(f"{uri}: pixels differ from the expected ones ({diff})")
        if not np.array_equal(labels, exp["labels"]):
            fail(f"{uri}: labels {labels.tolist()}, expected {exp['labels'].tolist()}")
        ok(f"Loader({what}) gives the expected {n} samples exactly")

    same(os.path.join(data, "folder"), "image folder: PNG via libspng, JPEG via libjpeg")
    same("hdf5:" + os.path.join(data, "data.h5"), "hdf5: via libhdf5")
    same("zarr:" + os.path.join(data, "zarr"), "zarr: Blosc chunks via libblosc")

    # The installed tool: the console script and python -m stoker.
    exe = os.path.join(os.path.dirname(sys.executable), "stoker")
    run([exe, "--help"], want="usage: stoker [--plugin LIB.so]... COMMAND")
    ok(f"{exe} --help")
    run([sys.executable, "-m", "stoker", "version"], want=f"stoker {stoker.__version__}")
    ok("python -m stoker version")
    run([exe, "nosuch"], want_rc=2, want="unknown command 'nosuch'")
    ok("stoker nosuch: exit 2, 'unknown command'")
    # two calls in one process, the first stopped by a usage error inside a
    # cluster of short options: the second must parse its own argv
    code = ("import sys, stoker._stoker as s; "
            "a = s.cli_main(['stoker', 'order', '5', '-zq']); "
            "b = s.cli_main(['stoker', 'order', '5', '--seed', '1']); sys.exit(a * 10 + b)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    order = [int(x) for x in r.stdout.split()]
    if r.returncode != 20 or sorted(order) != list(range(5)):
        fail(f"cli_main twice: exit {r.returncode} (expected 20), output {r.stdout!r} {r.stderr!r}")
    ok("cli_main twice in one process: exit 2 then 0, a permutation of 0..4")
    tmp = tempfile.mkdtemp(prefix="wheel-smoke-")  # a fresh pack each run (left on failure)
    stk = os.path.join(tmp, "stk-raw")
    run([exe, "pack", os.path.join(data, "folder"), stk, "--raw", "--zstd", "3", "-q"])
    same(stk, "stoker pack --raw --zstd (the installed CLI) then .stk via libzstd")
    if cli:
        bench = ["bench", stk, "--pipeline", f"center_crop {H},{W} | flip 0.5 | to f32 chw", "--batch", "2",
                 "--epochs", "2", "--seed", "7", "--shuffle", "global", "--digest"]
        mine = [x for x in run([exe] + bench).splitlines() if x.startswith("digest:")]
        theirs = [x for x in run([cli] + bench).splitlines() if x.startswith("digest:")]
        if not mine or mine != theirs:
            fail(f"bench --digest: the installed tool prints {mine}, {cli} prints {theirs}")
        ok(f"bench --digest equal to {cli}'s: {mine[0]}")
    shutil.rmtree(tmp)
    print(f"wheel-smoke: {passed} passed, 0 failed")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) in (3, 5) and sys.argv[1] == "check" and \
            (len(sys.argv) == 3 or sys.argv[3] == "--cli"):
        check(sys.argv[2], sys.argv[4] if len(sys.argv) == 5 else None)
    else:
        sys.exit("usage: wheel_smoke.py make DIR | check DIR [--cli STOKER]")
