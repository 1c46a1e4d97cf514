"""The CUDA backend from Python (docs/gpu.md, docs/python.md "Batches on a
GPU"): a Loader with device="cuda:0" delivers the same batches as the host
loader (device=None), in every placement.

Without a GPU (CI, this project's machines) the device is emulated:
STOKER_CUDA_EMULATE=1 (set here, before any loader is made) makes "cuda:N"
a device whose memory is host memory and whose kernels run their
per-element code on the CPU (src/gpu/emulate.c), and its batches come back
as host memory (Batch.device == "cpu"). Everything but the driver runs, so
the comparison is exact: the raw bytes of every image, label and index over
two shuffled epochs, 2 worker threads, a partial last batch.

The reference is independent of the code under test: the host loader runs
the CPU pipeline, which the rest of the suite checks against PIL and
torchvision; the device path (decode on the CPU, resample/flip/jitter/
normalize/cast in the GPU kernels, docs/gpu.md) shares none of its pixel
loops.

STOKER_GPU_REAL=1 (tests/gpu/run.sh on a GPU machine): the same comparisons
against the real device: the emulation flag is cleared, batches arrive in
CUDA memory and are fetched with torch (torch.from_dlpack, so the stream
protocol is exercised). Tolerance there: uint8 outputs, labels and indices
exact; float outputs within 1e-6 absolute for float32 and one unit in the
last place of the output type for float16/bfloat16 (kernels.h expects bit
equality on a device whose float arithmetic is IEEE, as CUDA's is without
--use_fast_math; the tolerance only keeps one stray rounding from hiding
every other result). The largest difference of every comparison is written
to $STOKER_GPU_REPORT (JSON lines) when set.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import need_photos, run_stoker
from module_util import PY_PATH, stoker

REAL = os.environ.get("STOKER_GPU_REAL") == "1"
DEVICE = os.environ.get("STOKER_GPU_DEVICE", "cuda:0")
REPORT = os.environ.get("STOKER_GPU_REPORT")

PRESETS = ["imagenet-train-few", "imagenet-train-extensive", "imagenet-val"]
# (spec, extra Loader arguments)
SPECS = [(p, {}) for p in PRESETS] + [
    ("random_resized_crop 160 | flip 0.5 | color_jitter 0.4 0.4 0.4 0.1 | normalize imagenet | "
     "to f16 chw", {}),
    ("resize 128 | center_crop 112 | posterize 4 | to u8 hwc", {}),
    ("random_resized_crop 96 | grayscale 0.5 | to bf16 hwc", {}),
    ("random_resized_crop 64 | flip 0.5 | color_jitter 0.4 0.4 0.4 | normalize imagenet | "
     "to f32 chw", {"views": 2}),
]
PLACEMENTS = ["gpu", "cpu", "auto"]
BATCH = 4  # 21 photos, 14 synthetic images: both leave a partial last batch
EPOCHS = 2


@pytest.fixture(autouse=True)
def emulated(monkeypatch):
    """Emulate the device unless STOKER_GPU_REAL=1 (the library reads the
    variable when a loader opens its device)."""
    if REAL:
        monkeypatch.delenv("STOKER_CUDA_EMULATE", raising=False)
    else:
        monkeypatch.setenv("STOKER_CUDA_EMULATE", "1")


# --------------------------------------------------------------------------- data sets

def _link_photos(dest, classes, per_class):
    root = need_photos("train")
    train = os.path.join(root, "train")
    for c in sorted(os.listdir(train))[:classes]:
        os.makedirs(os.path.join(dest, c))
        for f in sorted(os.listdir(os.path.join(train, c)))[:per_class]:
            os.symlink(os.path.join(train, c, f), os.path.join(dest, c, f))


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """3 classes x 7 real JPEGs of the photos set (colour, grayscale, CMYK,
    progressive, 4:2:0 / 4:4:4: whatever the first files hold)."""
    d = str(tmp_path_factory.mktemp("photos"))
    _link_photos(d, 3, 7)
    return d


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """2 classes x 7 images of noise (no smooth area hides a rounding
    difference): JPEGs of odd sizes, two grayscale, a PNG, one tall and one
    wide enough that a crop must be resampled both ways."""
    d = tmp_path_factory.mktemp("synthetic")
    rng = np.random.default_rng(15)
    sizes = [(37, 53), (64, 64), (120, 31), (29, 140), (301, 257), (90, 91), (18, 22)]
    for c in ("a", "b"):
        (d / c).mkdir()
        for i, (h, w) in enumerate(sizes):
            if c == "b" and i in (1, 4):
                img = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
            else:
                img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            if c == "a" and i == 2:
                img.save(d / c / ("%d.png" % i))
            else:
                img.save(d / c / ("%d.jpg" % i), quality=85 + i)
    return str(d)


@pytest.fixture(scope="module")
def with_corrupt(tmp_path_factory):
    """2 classes x 6 photos plus the photos set's corrupt files (truncated,
    empty, random bytes, a PNG named .jpg, a header claiming 65500x65500)
    in the second class."""
    root = need_photos("train", "corrupt")
    d = str(tmp_path_factory.mktemp("corrupt"))
    _link_photos(d, 2, 6)
    second = sorted(os.listdir(d))[1]
    bad = sorted(os.listdir(os.path.join(root, "corrupt")))[:5]
    for f in bad:
        os.symlink(os.path.join(root, "corrupt", f), os.path.join(d, second, "zz_" + f))
    return d


DATASETS = ["photos", "synthetic"]


# --------------------------------------------------------------------------- fetching batches

NP_DTYPE = {"uint8": np.uint8, "float16": np.float16, "float32": np.float32,
            "bfloat16": np.uint16}


def cuda_torch():
    """torch, when it has CUDA (a Debian torch is CPU-only), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


_driver = {}


def driver_copy(images):
    """A device batch copied to the host with the CUDA driver (ctypes), for
    a Python without a CUDA torch: __dlpack__(stream=None) makes the legacy
    default stream wait for the batch, and cuMemcpyDtoH (synchronous, on
    that stream) is ordered after it."""
    import ctypes
    if "cu" not in _driver:
        cu = ctypes.CDLL("libcuda.so.1")
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        n = int(images.device.split(":")[1])
        for rc in (cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), n),
                   cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
                   cu.cuCtxSetCurrent(ctx)):
            assert rc == 0, "CUDA driver call failed: %d" % rc
        cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        _driver["cu"] = cu
    images.__dlpack__(stream=None)  # the capsule is dropped; the wait stays queued
    out = np.empty(images.shape, NP_DTYPE[images.dtype])
    rc = _driver["cu"].cuMemcpyDtoH_v2(out.ctypes.data, images.data_ptr(), out.nbytes)
    assert rc == 0, "cuMemcpyDtoH failed: %d" % rc
    return out


def host_array(images):
    """A batch's image as a host NumPy array (a copy): raw element bits
    (bfloat16 as uint16). A Batch in CUDA memory is fetched with torch
    (torch.from_dlpack: torch's current stream waits for it) when torch has
    CUDA, else with the driver."""
    if getattr(images, "device", "cpu") == "cpu":
        return np.array(images)
    torch = cuda_torch()
    if torch is None:
        return driver_copy(images)
    t = torch.from_dlpack(images)  # __dlpack__(stream=torch's current stream)
    assert t.is_cuda
    t = t.cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def run_loader(root, spec, device=None, placement="auto", epochs=EPOCHS, with_loader=False,
               **kw):
    """Every batch of `epochs` shuffled epochs: (image array, dtype name,
    labels, indices); with_loader: (those, the closed loader's stats and
    device_info)."""
    loader = stoker.Loader(root, batch_size=BATCH, shuffle=True, seed=11, pipeline=spec,
                           num_threads=2, output="dlpack", device=device, placement=placement,
                           **kw)
    out = []
    with loader:
        info = loader.device_info
        for _ in range(epochs):
            for images, labels, indices in loader.iter_with_indices():
                out.append((host_array(images), images.dtype, np.array(labels),
                            np.array(indices)))
                del images
        st = loader.stats()
    return (out, st, info) if with_loader else out


_reference = {}


def reference(root, spec, **kw):
    """The host loader's batches (device=None), once per (data, spec)."""
    key = (root, spec, tuple(sorted(kw.items())))
    if key not in _reference:
        _reference[key] = run_loader(root, spec, **kw)
    return _reference[key]


def _ulp(values, dtype):
    """One unit in the last place of `values` (float64) in the output type."""
    if dtype == "float16":
        return np.spacing(np.abs(values).astype(np.float16)).astype(np.float64)
    if dtype == "bfloat16":
        return np.spacing(np.abs(values).astype(np.float32)).astype(np.float64) * 65536.0
    return np.full(values.shape, 1e-6)


def _as_float(a, dtype):
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def assert_same_batches(got, want, what):
    assert len(got) == len(want), "%s: %d batches, the host loader %d" % (what, len(got),
                                                                         len(want))
    worst = 0.0
    for k, ((g, dt, gl, gi), (w, wdt, wl, wi)) in enumerate(zip(got, want)):
        assert dt == wdt and g.shape == w.shape, (what, k, g.shape, w.shape, dt, wdt)
        assert np.array_equal(gi, wi), "%s: batch %d indices differ" % (what, k)
        assert np.array_equal(gl, wl), "%s: batch %d labels differ" % (what, k)
        if REAL and dt != "uint8":
            gf, wf = _as_float(g, dt), _as_float(w, dt)
            diff = np.abs(gf - wf)
            worst = max(worst, float(diff.max(initial=0.0)))
            bad = diff > _ulp(wf, dt)
            assert not bad.any(), "%s: batch %d: %d values beyond the tolerance, max |diff| %g" \
                % (what, k, int(bad.sum()), float(diff.max()))
        else:
            same = np.array_equal(g.view(np.uint8), w.view(np.uint8))
            if not same:
                n = int((g.view(np.uint8) != w.view(np.uint8)).sum())
                pytest.fail("%s: batch %d: %d bytes differ from the host loader's" % (what, k, n))
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps({"test": what, "batches": len(got), "max_abs_diff": worst}) + "\n")


# --------------------------------------------------------------------------- equality

@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("spec,extra", SPECS, ids=[s.split(" |")[0].replace(" ", "_") +
                                                   ("_views" if e else "") for s, e in SPECS])
@pytest.mark.parametrize("data", DATASETS)
def test_device_batches_equal_host_batches(request, data, spec, extra, placement):
    root = request.getfixturevalue(data)
    want = reference(root, spec, **extra)
    got = run_loader(root, spec, device=DEVICE, placement=placement, **extra)
    assert_same_batches(got, want, "%s %r placement=%s" % (data, spec, placement))


@pytest.mark.parametrize("spec,contrast", [("imagenet-train-few", False),
                                           ("imagenet-val", False),
                                           ("imagenet-train-extensive", True)])
def test_kernels_per_op_equal_fused(photos, monkeypatch, spec, contrast):
    """STOKER_GPU_KERNELS=per-op (VPASS then OUT) and the default fused
    STK_K_VOUT give the host loader's batches; Loader.device_timing counts
    the timed batches, their launches and which ran fused (none when every
    row has a contrast step, whose mean needs the whole head first)."""
    want = reference(photos, spec)
    timings = {}
    for kernels in ("per-op", "fused"):
        monkeypatch.setenv("STOKER_GPU_KERNELS", kernels)
        loader = stoker.Loader(photos, batch_size=BATCH, shuffle=True, seed=11, pipeline=spec,
                               num_threads=2, output="dlpack", device=DEVICE, placement="gpu")
        got = []
        with loader:
            assert "kernels %s" % kernels.replace("-", " ") in loader.device_info
            for _ in range(EPOCHS):
                for images, labels, indices in loader.iter_with_indices():
                    got.append((host_array(images), images.dtype, np.array(labels),
                                np.array(indices)))
                    del images
            timings[kernels] = t = loader.device_timing
        assert_same_batches(got, want, "%r kernels=%s" % (spec, kernels))
        assert t["batches"] > 0 and t["kernel_s"] > 0, t
        assert t["decode_batches"] == 0 and t["decode_s"] == 0, t
    per_op, fused = timings["per-op"], timings["fused"]
    assert per_op["fused_batches"] == 0
    assert fused["fused_batches"] == (0 if contrast else fused["batches"])
    per_batch = lambda t: t["launches"] / t["batches"]
    if contrast:
        assert per_batch(fused) == pytest.approx(per_batch(per_op), abs=1.0)
    else:  # one launch (VPASS) fewer a batch
        assert per_batch(fused) == pytest.approx(per_batch(per_op) - 1, abs=0.5)
    monkeypatch.setenv("STOKER_GPU_KERNELS", "fastest")
    with pytest.raises(ValueError, match="STOKER_GPU_KERNELS=fastest"):
        stoker.Loader(photos, batch_size=BATCH, pipeline=spec, output="dlpack", device=DEVICE,
                      placement="gpu")


def test_device_timing_without_kernels(synthetic):
    """No device: None; copy mode (the GPU runs nothing): None; format mode
    (placement cpu: the GPU runs only the output kernel): a dict."""
    spec = "random_resized_crop 48 | rotate 10 | normalize imagenet | to f32 chw"
    with stoker.Loader(synthetic, batch_size=BATCH, pipeline=spec) as loader:
        assert loader.device_timing is None
    with stoker.Loader(synthetic, batch_size=BATCH, pipeline=spec, output="dlpack",
                       device=DEVICE, placement="auto") as loader:
        assert loader.device_info.startswith("copy")
        assert loader.device_timing is None
    spec = "random_resized_crop 48 | normalize imagenet | to f32 chw"
    with stoker.Loader(synthetic, batch_size=BATCH, pipeline=spec, output="dlpack",
                       device=DEVICE, placement="cpu") as loader:
        assert loader.device_info.startswith("format")
        for _ in range(3):
            for images, labels in loader:
                del images
        t = loader.device_timing
        assert t["batches"] > 0 and t["launches"] == t["batches"] and t["fused_batches"] == 0


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_skip_policy_gives_the_same_rows(with_corrupt, placement):
    spec = "imagenet-train-extensive"
    want = reference(with_corrupt, spec, on_error="skip")
    rows = np.concatenate([w[3] for w in want])
    kept = set(rows.tolist())
    assert len(rows) == EPOCHS * len(kept) and len(kept) < 17  # each once an epoch; some skipped
    got = run_loader(with_corrupt, spec, device=DEVICE, placement=placement, on_error="skip")
    assert_same_batches(got, want, "corrupt %r placement=%s" % (spec, placement))


def test_raise_policy_names_the_corrupt_file(with_corrupt):
    loader = stoker.Loader(with_corrupt, batch_size=BATCH, pipeline="imagenet-val",
                           num_threads=2, output="dlpack", device=DEVICE, placement="gpu")
    with pytest.raises(stoker.DataError, match="zz_"):
        for _ in loader:
            pass


@pytest.mark.parametrize("spec,op", [
    ("random_resized_crop 64 | rotate 10 | normalize imagenet | to f32 chw", "rotate"),
    ("random_resized_crop 64 | normalize imagenet | random_erasing 0.5 | to f32 chw",
     "random_erasing"),
])
def test_op_without_gpu_kernel(synthetic, spec, op):
    """placement='gpu' refuses a spec with an op the GPU path lacks, naming
    it; 'auto' then runs the pipeline on the CPU and equals the host loader."""
    with pytest.raises(ValueError, match=op):
        stoker.Loader(synthetic, batch_size=BATCH, pipeline=spec, output="dlpack",
                      device=DEVICE, placement="gpu")
    got = run_loader(synthetic, spec, device=DEVICE, placement="auto")
    assert_same_batches(got, reference(synthetic, spec), "auto %r" % spec)


def test_torch_and_numpy_outputs(synthetic):
    """output='torch' and 'numpy' with a device: emulation delivers host
    memory, so both work and equal the host loader; on a real device torch
    gets CUDA tensors (labels stay on the host) and numpy refuses."""
    spec = "random_resized_crop 48 | flip 0.5 | normalize imagenet | to f32 chw"
    ref = reference(synthetic, spec)
    want = [w[0] for w in ref[:len(ref) // EPOCHS]]  # epoch 0
    torch = pytest.importorskip("torch")
    if REAL and cuda_torch() is None:
        pytest.skip("this torch has no CUDA (tests/gpu/run.sh: STOKER_GPU_PYTHON)")
    loader = stoker.Loader(synthetic, batch_size=BATCH, shuffle=True, seed=11, pipeline=spec,
                           num_threads=2, output="torch", device=DEVICE, placement="gpu")
    got = []
    for images, labels in loader:
        assert labels.device.type == "cpu" and labels.dtype == torch.int64
        assert images.device.type == ("cuda" if REAL else "cpu")
        got.append(images.cpu().numpy().copy())
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))

    loader = stoker.Loader(synthetic, batch_size=BATCH, shuffle=True, seed=11, pipeline=spec,
                           num_threads=2, output="numpy", device=DEVICE)
    if REAL:
        with pytest.raises(ValueError, match="numpy"):
            next(iter(loader))
    else:
        got = [np.array(images) for images, _ in loader]
        assert all(np.array_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("mode", ["batch", "elem"])
def test_mixup_on_device_batches(synthetic, mode):
    """stoker.Mixup on device batches (its per-row factors follow the
    images to the GPU) equals Mixup on the host batches; soft labels stay
    on the host."""
    pytest.importorskip("torch")
    if REAL and cuda_torch() is None:
        pytest.skip("this torch has no CUDA (tests/gpu/run.sh: STOKER_GPU_PYTHON)")
    spec = "random_resized_crop 32 | flip 0.5 | normalize imagenet | to f32 chw"

    def run(device):
        mix = stoker.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode=mode, num_classes=2)
        loader = stoker.Loader(synthetic, batch_size=BATCH, shuffle=True, seed=5, pipeline=spec,
                               num_threads=2, output="torch", device=device,
                               batch_transform=mix)
        return [(x.cpu().numpy().copy(), y.numpy().copy(), y.device.type) for x, y in loader]

    want, got = run(None), run(DEVICE)
    assert len(got) == len(want)
    for (gx, gy, gdev), (wx, wy, _) in zip(got, want):
        assert gdev == "cpu" and np.array_equal(gy, wy)
        if REAL:
            assert np.abs(gx - wx).max(initial=0.0) <= 1e-6
        else:
            assert np.array_equal(gx, wx)


def test_cli_digest_equals_host(synthetic):
    """stoker bench --device: an emulated device's digest is the host
    loader's; on a real device --digest is refused (it reads host memory)."""
    spec = "imagenet-train-extensive"
    args = ["bench", synthetic, "--pipeline", spec, "--batch", BATCH, "--seed", 3, "--threads",
            2, "--epochs", 2, "--digest"]
    host = run_stoker(*args)
    want = [l for l in host.stdout.splitlines() if l.startswith("digest: ")]
    for placement in PLACEMENTS:
        p = run_stoker(*args, "--device", DEVICE, "--placement", placement, check=False)
        if REAL:
            assert p.returncode == 1 and "--digest reads batches on the host" in p.stderr
            continue
        assert p.returncode == 0, p.stderr
        assert [l for l in p.stdout.splitlines() if l.startswith("digest: ")] == want
        assert "device:     %s, placement %s, decoder cpu; batches delivered in host memory" \
            % (DEVICE, placement) in p.stdout
    if not REAL:  # the emulated nvJPEG is libjpeg-turbo: the same digest
        p = run_stoker(*args, "--device", DEVICE, "--placement", "gpu", "--decoder", "nvjpeg")
        assert [l for l in p.stdout.splitlines() if l.startswith("digest: ")] == want
        assert "placement gpu, decoder nvjpeg; batches delivered in host memory" in p.stdout
    p = run_stoker(*args[:-1], "--decoder", "nvjpeg", check=False)
    assert p.returncode == 2 and "--decoder needs --device" in p.stderr


# --------------------------------------------------------------------------- errors

def test_malformed_device_is_a_value_error(synthetic):
    for bad in ("cuda:x", "cuda:", "cuda:1.5", "gpu", "cuda:-1"):
        with pytest.raises(ValueError):
            stoker.Loader(synthetic, batch_size=BATCH, pipeline="imagenet-val", device=bad)
    with pytest.raises(ValueError, match="placement"):
        stoker.Loader(synthetic, batch_size=BATCH, pipeline="imagenet-val", device=DEVICE,
                      placement="fast")
    with pytest.raises(TypeError):
        stoker.Loader(synthetic, batch_size=BATCH, pipeline="imagenet-val", device=0)
    with pytest.raises(ValueError, match="placement"):  # the extension checks it too
        stoker._stoker._Loader(stoker.open(synthetic), "imagenet-val", device=DEVICE,
                               placement=7)
    p = run_stoker("bench", synthetic, "--pipeline", "imagenet-val", "--device", "cuda:x",
                   check=False)
    assert p.returncode == 2, p.stderr
    p = run_stoker("bench", synthetic, "--pipeline", "imagenet-val", "--placement", "gpu",
                   check=False)
    assert p.returncode == 2 and "--placement needs --device" in p.stderr


def test_cpu_device_is_host(synthetic):
    """device='cpu' (and a torch.device('cpu')) is the host loader."""
    spec = "imagenet-val"
    assert_same_batches(run_loader(synthetic, spec, device="cpu", placement="gpu"),
                        reference(synthetic, spec), "device=cpu")
    torch = pytest.importorskip("torch")
    loader = stoker.Loader(synthetic, batch_size=BATCH, pipeline=spec,
                           device=torch.device("cpu"))
    assert loader.device == "cpu" and "device=" not in repr(loader)
    loader = stoker.Loader(synthetic, batch_size=BATCH, pipeline=spec, device=DEVICE,
                           placement="cpu")
    assert loader.device == DEVICE and loader.placement == "cpu"
    assert "device=%s placement=cpu" % DEVICE in repr(loader)
    assert loader.options["device"] == DEVICE
    assert loader.stats()["gpu_head_rows"] == 0


@pytest.mark.skipif(REAL, reason="this machine has a CUDA driver")
def test_no_driver_is_a_clear_error(synthetic):
    """Without STOKER_CUDA_EMULATE on a machine without libcuda.so.1 (or a
    build without kernels), device='cuda:0' raises UnsupportedError (a
    ValueError) saying which. In a fresh process: the emulation flag of
    this one must not leak in."""
    code = ("import stoker, sys\n"
            "try:\n"
            "    stoker.Loader(sys.argv[1], pipeline='imagenet-val', device='cuda:0')\n"
            "except stoker.UnsupportedError as e:\n"
            "    print('UnsupportedError', isinstance(e, ValueError), e.code, e)\n")
    env = {k: v for k, v in os.environ.items() if k != "STOKER_CUDA_EMULATE"}
    env["PYTHONPATH"] = PY_PATH
    p = subprocess.run([sys.executable, "-c", code, synthetic], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("UnsupportedError True -10 "), p.stdout
    assert "libcuda.so.1" in p.stdout or "built without CUDA kernels" in p.stdout, p.stdout


# --------------------------------------------------------------------------- DLPack

def test_dlpack_stream_argument():
    """DLPack's stream protocol as __dlpack__ of a CUDA batch reads it (the
    argument handling alone: it runs without a GPU). None: the legacy
    default stream (the C API's 0); 1 and 2: the legacy and per-thread
    default streams (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, passed on);
    larger: a CUstream; -1: no synchronisation (None here); 0 and other
    negative values are refused (the standard calls 0 ambiguous)."""
    f = stoker._stoker._dlpack_stream
    assert f(None) == 0
    assert f(1) == 1 and f(2) == 2
    assert f(0x7F00DEADBEEF) == 0x7F00DEADBEEF
    assert f(2**64 - 1) == 2**64 - 1  # a pointer-sized handle
    assert f(-1) is None
    for bad in (0, -2, -(2**70), 2**64):
        with pytest.raises(ValueError):
            f(bad)
    for bad in ("1", 1.0, True, object()):
        with pytest.raises(TypeError):
            f(bad)


def test_batch_device_and_dlpack(synthetic):
    """A host batch (no device, or an emulated one) says 'cpu' and (1, 0),
    ignores `stream` as before; a real device batch says (2, N), refuses the
    buffer protocol, checks `stream` and dl_device."""
    spec = "imagenet-val"
    loader = stoker.Loader(synthetic, batch_size=BATCH, shuffle=True, seed=11, pipeline=spec,
                           num_threads=2, output="dlpack", device=DEVICE, placement="gpu")
    images, labels = next(iter(loader))
    assert labels.__dlpack_device__() == (1, 0)
    if not REAL:
        assert images.device == "cpu" and images.__dlpack_device__() == (1, 0)
        images.__dlpack__(stream=0)  # a host batch ignores the stream, as before
        assert np.asarray(images).shape == images.shape
        return
    n = int(DEVICE.split(":")[1]) if ":" in DEVICE else 0
    assert images.device == "cuda:%d" % n and images.__dlpack_device__() == (2, n)
    assert ("device=cuda:%d" % n) in repr(images)
    with pytest.raises(BufferError):
        memoryview(images)
    with pytest.raises(ValueError):
        images.__dlpack__(stream=0)
    with pytest.raises(BufferError):
        images.__dlpack__(stream=-1, dl_device=(1, 0))
    images.__dlpack__(stream=-1)
    images.__dlpack__(stream=None, dl_device=(2, n), max_version=(1, 0))
    torch = cuda_torch()
    if torch is None:
        pytest.skip("this torch has no CUDA (tests/gpu/run.sh: STOKER_GPU_PYTHON)")
    s = torch.cuda.Stream(device=n)
    with torch.cuda.stream(s):
        t = torch.from_dlpack(images)  # __dlpack__(stream=s): s waits for the batch
        t = t * 1.0  # read it on s
    s.synchronize()
    want = reference(synthetic, spec)[0]
    assert_same_batches([(t.cpu().numpy(), images.dtype, want[2], want[3])], [want],
                        "torch.from_dlpack on a side stream")


# --------------------------------------------------------------------------- decoder nvjpeg

# What decoder='nvjpeg' may differ by on a device (docs/gpu.md, "GPU JPEG
# decoding"): nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's,
# so pixels differ by rounding. In uint8 levels: a mean |difference| of at
# most 2 and at most 0.5% of the values off by more than 32 (float outputs
# are compared in levels of their uint8 source: |diff| * 255 * the spec's
# normalize std, 0.225 for imagenet). In emulation the decoder is
# libjpeg-turbo itself: batches equal the host loader's byte for byte.
NVJPEG_MEAN_LEVELS = 2.0
NVJPEG_FAR_LEVELS, NVJPEG_FAR_SHARE = 32, 0.005
NVJPEG_SPECS = [
    ("imagenet-train-extensive", 255.0 * 0.225),
    ("imagenet-val", 255.0 * 0.225),
    ("random_resized_crop 160 | flip 0.5 | to u8 hwc", 1.0),
    ("resize 128 | center_crop 112 | to u8 hwc", 1.0),
]


def assert_close_batches(got, want, what, levels_per_unit):
    """decoder nvjpeg on a device: same indices and labels, pixels within
    the stated tolerance; the figures go to the report."""
    assert len(got) == len(want), "%s: %d batches, the host loader %d" % (what, len(got),
                                                                         len(want))
    diffs = []
    for k, ((g, dt, gl, gi), (w, wdt, wl, wi)) in enumerate(zip(got, want)):
        assert dt == wdt and g.shape == w.shape, (what, k, g.shape, w.shape, dt, wdt)
        assert np.array_equal(gi, wi), "%s: batch %d indices differ" % (what, k)
        assert np.array_equal(gl, wl), "%s: batch %d labels differ" % (what, k)
        diffs.append((np.abs(_as_float(g, dt) - _as_float(w, dt)) * levels_per_unit).ravel())
    d = np.concatenate(diffs) if diffs else np.zeros(1)
    mean, far = float(d.mean()), float((d > NVJPEG_FAR_LEVELS).mean())
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps({"test": what, "batches": len(got), "mean_levels": mean,
                                "p99_levels": float(np.percentile(d, 99)),
                                "max_levels": float(d.max()), "far_share": far}) + "\n")
    assert mean <= NVJPEG_MEAN_LEVELS, "%s: mean |diff| %.3f levels" % (what, mean)
    assert far <= NVJPEG_FAR_SHARE, "%s: %.3f%% of values off by more than %d levels" % (
        what, 100 * far, NVJPEG_FAR_LEVELS)


def _cpu_decoded_files(root):
    """Files of `root` an nvJPEG decoder leaves to the CPU in emulation: not
    a JPEG, or not 3 components (gray, CMYK)."""
    n = 0
    for c in sorted(os.listdir(root)):
        for f in sorted(os.listdir(os.path.join(root, c))):
            with Image.open(os.path.join(root, c, f)) as im:
                n += im.format != "JPEG" or im.mode not in ("RGB", "YCbCr")
    return n


@pytest.mark.parametrize("spec,levels", NVJPEG_SPECS, ids=[s.split(" |")[0].replace(" ", "_")
                                                           for s, _ in NVJPEG_SPECS])
@pytest.mark.parametrize("data", DATASETS)
def test_nvjpeg_batches(request, data, spec, levels):
    if REAL and data == "synthetic":
        pytest.skip("noise images: the decoders' upsampling differs by design there; the "
                    "tolerance is stated for photographs (emulation covers them exactly)")
    root = request.getfixturevalue(data)
    want = reference(root, spec)
    got = run_loader(root, spec, device=DEVICE, placement="gpu", decoder="nvjpeg")
    what = "%s %r decoder=nvjpeg" % (data, spec)
    if REAL:
        assert_close_batches(got, want, what, levels)
    else:
        assert_same_batches(got, want, what)


def test_nvjpeg_counts_rows_decoded_on_the_cpu(synthetic):
    """The synthetic set's PNG and two grayscale JPEGs go to the CPU, once
    an epoch; the other rows are the GPU decoder's."""
    loader = stoker.Loader(synthetic, batch_size=BATCH, shuffle=True, seed=11,
                           pipeline="imagenet-train-few", num_threads=2, output="dlpack",
                           device=DEVICE, placement="gpu", decoder="nvjpeg")
    assert loader.decoder == "nvjpeg"
    assert _cpu_decoded_files(synthetic) == 3
    delivered = on_cpu = 0
    with loader:
        for _ in range(EPOCHS):
            for images, labels, paths in loader.iter_with_paths():
                delivered += len(paths)
                for p in paths:
                    with Image.open(p) as im:
                        on_cpu += im.format != "JPEG" or im.mode != "RGB"
                del images
        st = loader.stats()
    assert delivered == 14 * EPOCHS and on_cpu == 3 * EPOCHS
    # rows staged past the last delivered batch (prefetch) may count too
    ahead = st["samples"] - delivered
    if REAL:  # the device may also refuse or fail some (counted too)
        assert st["gpu_decode_cpu_rows"] >= on_cpu
    else:
        assert on_cpu <= st["gpu_decode_cpu_rows"] <= on_cpu + ahead


def test_nvjpeg_skip_policy_gives_the_same_rows(with_corrupt):
    """Corrupt files (truncated, random bytes, a PNG named .jpg, absurd
    dimensions) are skipped exactly as on the CPU path: the checks happen
    in the workers before anything reaches nvJPEG."""
    spec = "imagenet-train-extensive"
    want = reference(with_corrupt, spec, on_error="skip")
    got = run_loader(with_corrupt, spec, device=DEVICE, placement="gpu", decoder="nvjpeg",
                     on_error="skip")
    if REAL:
        assert_close_batches(got, want, "corrupt %r decoder=nvjpeg" % spec, 255.0 * 0.225)
    else:
        assert_same_batches(got, want, "corrupt %r decoder=nvjpeg" % spec)


def test_nvjpeg_needs_the_gpu_augmentation(synthetic):
    with pytest.raises(stoker.InvalidArgument, match="decoder nvjpeg"):
        stoker.Loader(synthetic, batch_size=BATCH, pipeline="imagenet-val", output="dlpack",
                      device=DEVICE, placement="cpu", decoder="nvjpeg")
    with pytest.raises(stoker.InvalidArgument, match="decoder nvjpeg"):
        stoker.Loader(synthetic, batch_size=BATCH, output="dlpack", device=DEVICE,
                      pipeline="random_resized_crop 64 | rotate 10 | to f32 chw",
                      placement="auto", decoder="nvjpeg")
    with pytest.raises(ValueError, match="decoder"):
        stoker.Loader(synthetic, batch_size=BATCH, pipeline="imagenet-val", output="dlpack",
                      decoder="nvjpeg")
    with pytest.raises(ValueError, match="decoder"):
        stoker.Loader(synthetic, batch_size=BATCH, pipeline="imagenet-val", output="dlpack",
                      device=DEVICE, decoder="turbo")


def test_nvjpeg_share(photos, monkeypatch):
    """STOKER_NVJPEG_SHARE=0.5: about half of the JPEG rows (a fixed hash
    of each row's stream) go to nvJPEG, the rest to the workers; the batches
    are the same (exactly in emulation); a bad value is refused."""
    spec = "imagenet-train-extensive"
    want = reference(photos, spec)
    monkeypatch.setenv("STOKER_NVJPEG_SHARE", "0.5")
    got, st, info = run_loader(photos, spec, device=DEVICE, placement="gpu", decoder="nvjpeg",
                               with_loader=True)
    assert "JPEGs (a share)" in info
    if REAL:
        assert_close_batches(got, want, "photos %r share 0.5" % spec, 255.0 * 0.225)
    else:
        assert_same_batches(got, want, "photos %r share 0.5" % spec)
    rows = sum(len(g[2]) for g in got)
    assert 0.25 * rows <= st["gpu_decode_cpu_rows"] <= 0.8 * st["samples"], st
    monkeypatch.setenv("STOKER_NVJPEG_SHARE", "1.5")
    with pytest.raises(stoker.InvalidArgument, match="STOKER_NVJPEG_SHARE"):
        stoker.Loader(photos, batch_size=BATCH, pipeline=spec, output="dlpack", device=DEVICE,
                      placement="gpu", decoder="nvjpeg")


@pytest.fixture(scope="module")
def with_cut_scan(tmp_path_factory):
    """2 classes x 6 photos plus a JPEG whose header is sound and which ends
    in an EOI marker, but whose entropy-coded data is cut in half: it passes
    every check a worker makes before handing a JPEG to nvJPEG, and only the
    decode finds it corrupt."""
    d = str(tmp_path_factory.mktemp("cutscan"))
    _link_photos(d, 2, 6)
    second = sorted(os.listdir(d))[1]
    src = sorted(os.listdir(os.path.join(d, second)))[0]
    with open(os.path.join(d, second, src), "rb") as f:
        good = f.read()
    with open(os.path.join(d, second, "zz_cut_scan.jpg"), "wb") as f:
        f.write(good[:len(good) // 2] + b"\xff\xd9")
    return d


def test_nvjpeg_corrupt_scan_is_skipped_or_named(with_cut_scan):
    """A JPEG found corrupt only at decode time (after the rows are staged):
    under the skip policy the same rows are delivered as on the CPU path
    (which skips it in the worker); under raise the error names the file."""
    if REAL:
        pytest.skip("nvJPEG decodes a scan cut short without an error (measured on the H100 "
                    "with the hardware and GPU-hybrid backends): docs/gpu.md, 'Damaged files'; "
                    "a restart-marked JPEG is checked before the hand-over "
                    "(tests/test_gpu_pipeline.c)")
    spec = "imagenet-train-extensive"
    want = reference(with_cut_scan, spec, on_error="skip")
    kept = set(np.concatenate([w[3] for w in want]).tolist())
    assert len(kept) == 12  # the CPU path skips the cut file, and only it
    got, st, _ = run_loader(with_cut_scan, spec, device=DEVICE, placement="gpu",
                            decoder="nvjpeg", on_error="skip", with_loader=True)
    if REAL:
        assert_close_batches(got, want, "cut scan %r decoder=nvjpeg" % spec, 255.0 * 0.225)
    else:
        assert_same_batches(got, want, "cut scan %r decoder=nvjpeg" % spec)
    assert st["skipped"] == EPOCHS
    loader = stoker.Loader(with_cut_scan, batch_size=BATCH, pipeline=spec, num_threads=2,
                           output="dlpack", device=DEVICE, placement="gpu", decoder="nvjpeg")
    # (the message says it failed at decode time, so the test took that path)
    with pytest.raises(stoker.DataError, match="zz_cut_scan.*GPU JPEG decode"):
        for _ in loader:
            pass
