"""User-defined ops (docs/ops.md): one brightness op written three ways — a C
plugin (examples/plugin_brightness, built in-tree as
libstk_plugin_brightness.so), a @numba.cfunc (NumbaOp) and a Python function
(PythonOp) — each equal bit for bit to the built-in op
``color_jitter brightness=F:F`` through the loader with 1 and 2 threads;
random user ops deterministic for any thread count; shape changes; and the
bad inputs: missing plugin, no init symbol, wrong ABI version, an init that
fails, an op whose run fails, a Python op raising, a Numba function with the
wrong signature."""
import os

import numpy as np
import pytest

from conftest import BUILD, CI
import module_util  # noqa: F401  (imports stoker from the build)
import stoker

numba = pytest.importorskip("numba") if not CI else __import__("numba")

PLUGIN = os.path.join(BUILD, "libstk_plugin_brightness.so")
TEST_PLUGIN = os.path.join(BUILD, "libstk_test_plugin.so")


def plugin(path):
    if not os.path.exists(path):
        pytest.skip("%s is not built (the C tests build it)" % path)
    return path


@numba.cfunc(stoker.NumbaOp.SIGNATURE)
def numba_brightness(src, h, w, c, dst, oh, ow, oc, args, random):
    """The built-in brightness on uint8: ToTensor, times F, clamp, times 255,
    round half to even, in float32 as stoker computes it."""
    n = h * w * c
    a = numba.carray(src, (n,))
    b = numba.carray(dst, (n,))
    f = numba.float32(args[0])
    for i in range(n):
        v = f * (numba.float32(a[i]) / numba.float32(255.0))
        v = min(max(v, numba.float32(0.0)), numba.float32(1.0))
        b[i] = numba.uint8(round(v * numba.float32(255.0)))
    return 0


@numba.cfunc(stoker.NumbaOp.SIGNATURE)
def numba_random_brightness(src, h, w, c, dst, oh, ow, oc, args, random):
    """Brightness by a factor drawn per sample in [args[0], args[1]]."""
    n = h * w * c
    a = numba.carray(src, (n,))
    b = numba.carray(dst, (n,))
    f = numba.float32(args[0] + (args[1] - args[0]) * random[0])
    for i in range(n):
        v = f * (numba.float32(a[i]) / numba.float32(255.0))
        v = min(max(v, numba.float32(0.0)), numba.float32(1.0))
        b[i] = numba.uint8(round(v * numba.float32(255.0)))
    return 0


def python_brightness(factor):
    f = np.float32(factor)

    def brightness(image, random):
        x = f * (image.astype(np.float32) / np.float32(255))
        return np.rint(np.clip(x, 0, 1) * np.float32(255)).astype(np.uint8)
    return brightness


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(12)
    return rng.integers(0, 256, (45, 20, 14, 3), dtype=np.uint8)


def run(images, transforms, threads=1, **kw):
    ds = stoker.from_numpy(images)
    loader = stoker.Loader(ds, batch_size=8, transforms=transforms, dtype="uint8",
                           layout="NHWC", output="numpy", num_threads=threads, **kw)
    out = [np.asarray(b).copy() for b, _ in loader]
    loader.close()
    return np.concatenate(out)


@pytest.mark.parametrize("factor", [0.0, 0.6, 1.0, 1.5, 3.25])
@pytest.mark.parametrize("threads", [1, 2])
def test_three_brightness_ops_equal_builtin(images, factor, threads):
    stoker.load_plugin(plugin(PLUGIN))
    ref = run(images, ["color_jitter brightness=%r:%r" % (factor, factor)], threads)
    # (the built-in's reference, independently: the formula in NumPy float32)
    want = np.rint(np.clip(np.float32(factor) * (images.astype(np.float32) / np.float32(255)),
                           0, 1) * np.float32(255)).astype(np.uint8)
    assert np.array_equal(ref, want)
    ops = {"C plugin": stoker.UserOp("brightness", factor),
           "NumbaOp": stoker.NumbaOp(numba_brightness, args=(factor,)),
           "PythonOp": stoker.PythonOp(python_brightness(factor))}
    for what, op in ops.items():
        got = run(images, [op], threads)
        assert np.array_equal(got, ref), what


def test_after_resize_and_with_other_ops(images):
    stoker.load_plugin(plugin(PLUGIN))
    head = [stoker.Resize((11, 9)), stoker.RandomHorizontalFlip()]
    ref = run(images, head + ["color_jitter brightness=1.7:1.7"], 2, shuffle=True, seed=5)
    for op in (stoker.UserOp("brightness", 1.7), stoker.NumbaOp(numba_brightness, args=(1.7,)),
               stoker.PythonOp(python_brightness(1.7))):
        assert np.array_equal(run(images, head + [op], 2, shuffle=True, seed=5), ref)
    # Float stages after a user op take its uint8 output.
    spec = stoker.build_spec([stoker.Resize((11, 9)), stoker.NumbaOp(numba_brightness, args=(2,)),
                              stoker.Normalize([0.5] * 3, [0.25] * 3)])
    assert spec.startswith("resize 11,9 | numba_brightness 2 | normalize")


def test_random_user_ops_are_deterministic(images):
    stoker.load_plugin(plugin(PLUGIN))
    flat = np.full_like(images, 120)
    ops = [stoker.UserOp("random_brightness", 0.2, 1.8),
           stoker.NumbaOp(numba_random_brightness, args=(0.2, 1.8), random=1),
           stoker.PythonOp(lambda img, r: (img * (0.2 + 1.6 * r[0])).clip(0, 255)
                           .astype(np.uint8), random=1)]
    for op in ops:
        one = run(flat, [stoker.RandomHorizontalFlip(), op], 1, shuffle=True, seed=3)
        for threads in (2, 3):
            assert np.array_equal(run(flat, [stoker.RandomHorizontalFlip(), op], threads,
                                      shuffle=True, seed=3), one), (op, threads)
        # One factor per sample: the samples differ from each other.
        assert len(np.unique(one[:, 0, 0, 0])) > len(one) // 2
        # Another seed, other draws.
        assert not np.array_equal(run(flat, [op], 1, shuffle=True, seed=4), one)


def test_same_draws_for_every_kind(images):
    """The draws come from the sample's stream at the op's place: a NumbaOp
    and a PythonOp with random=2 see the same numbers."""
    seen = {}

    @numba.cfunc(stoker.NumbaOp.SIGNATURE)
    def write_random(src, h, w, c, dst, oh, ow, oc, args, random):
        b = numba.carray(dst, (oh * ow * oc,))
        for i in range(oh * ow * oc):
            b[i] = numba.uint8(int(random[i % 2] * 256.0))
        return 0

    def py_random(img, r):
        out = np.empty(img.shape, np.uint8).reshape(-1)
        out[0::2] = (r[0] * 256.0).astype(np.uint8)
        out[1::2] = (r[1] * 256.0).astype(np.uint8)
        return out.reshape(img.shape)
    for name, op in (("numba", stoker.NumbaOp(write_random, random=2)),
                     ("python", stoker.PythonOp(py_random, random=2))):
        seen[name] = run(images, [op], 2, shuffle=True, seed=9)
    assert np.array_equal(seen["numba"], seen["python"])
    assert len(np.unique(seen["numba"][:, 0, 0, 0])) > 10


def test_shape_changing_python_op(images):
    def gray_half(img, r):
        return img[::2, ::2, :1].copy()
    op = stoker.PythonOp(gray_half, shape=lambda h, w, c: ((h + 1) // 2, (w + 1) // 2, 1))
    got = run(images, [op])
    assert got.shape == (45, 10, 7, 1)
    assert np.array_equal(got, images[:, ::2, ::2, :1])
    assert stoker.spec_check(op.spec() + " | to f32 chw", 20, 14, 3)[0] == (1, 10, 7)


# -- bad input ----------------------------------------------------------------------------------

def test_plugin_errors(tmp_path):
    with pytest.raises(stoker.NotFound, match="plugin /nonexistent/x.so"):
        stoker.load_plugin("/nonexistent/x.so")
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not a library")
    with pytest.raises(stoker.InvalidArgument, match="cannot be loaded"):
        stoker.load_plugin(str(junk))
    with pytest.raises(stoker.InvalidArgument, match="has no stk_plugin_init function"):
        stoker.load_plugin(plugin(os.path.join(BUILD, "libstk_test_plugin_noinit.so")))
    bad = plugin(os.path.join(BUILD, "libstk_test_plugin_badabi.so"))
    with pytest.raises(stoker.UnsupportedError) as e:
        stoker.load_plugin(bad)
    msg = str(e.value)
    assert bad in msg and "'test_future'" in msg
    assert "op ABI version 2, but this stoker" in msg and "has op ABI version 1" in msg
    with pytest.raises(stoker.InvalidArgument, match="stk_plugin_init returned"):
        stoker.load_plugin(plugin(os.path.join(BUILD, "libstk_test_plugin_initfails.so")))
    # In a spec: the error points at the path.
    with pytest.raises(stoker.NotFound, match="column 8"):
        stoker.spec_check("plugin /nonexistent/y.so | to u8", 8, 8, 3)


def test_run_error_names_sample_and_op(images):
    stoker.load_plugin(plugin(TEST_PLUGIN))
    imgs = images.copy()
    imgs[:, 0, 0, 0] = np.where(imgs[:, 0, 0, 0] == 7, 8, imgs[:, 0, 0, 0])
    imgs[17, 0, 0, 0] = 7
    with pytest.raises(stoker.DataError) as e:
        run(imgs, [stoker.UserOp("test_fail", 7)])
    assert "sample 17" in str(e.value) and "op 'test_fail' of plugin" in str(e.value)
    assert "the first byte is 7" in str(e.value)
    got = run(imgs, [stoker.UserOp("test_fail", 7)], on_error="skip")
    assert np.array_equal(got, np.delete(imgs, 17, axis=0))
    with pytest.raises(stoker.StokerError, match="op 'test_fatal'.*this op always fails"):
        run(imgs, ["test_fatal"], on_error="skip")


def test_python_op_raising(images):
    def broken(img, r):
        return {}["missing key"]
    with pytest.raises(stoker.StokerError) as e:
        run(images, [stoker.PythonOp(broken)])
    msg = str(e.value)
    assert "sample " in msg and "op 'python_broken'" in msg
    assert "KeyError: 'missing key'" in msg and "in broken" in msg  # the traceback's end

    def wrong_dtype(img, r):
        return img.astype(np.float32)
    with pytest.raises(stoker.StokerError, match="returned an array of float32, expected uint8"):
        run(images, [stoker.PythonOp(wrong_dtype)])

    def wrong_shape(img, r):
        return img[1:]
    with pytest.raises(stoker.StokerError, match=r"shape \(19, 14, 3\), expected \(20, 14, 3\)"):
        run(images, [stoker.PythonOp(wrong_shape)])

    def bad_sample(img, r):
        if img[0, 0, 0] == images[5, 0, 0, 0] and np.array_equal(img, images[5]):
            raise stoker.DataError("sample 5 is unusable")
        return img
    got = run(images, [stoker.PythonOp(bad_sample)], on_error="skip")
    assert np.array_equal(got, np.delete(images, 5, axis=0))


def test_numba_wrong_signature():
    @numba.cfunc("void(CPointer(uint8), CPointer(uint8), int64, int64, int64)")
    def old_style(src, dst, h, w, c):
        pass
    with pytest.raises(TypeError, match=r"stoker calls it as int32\(CPointer\(uint8\), int64"):
        stoker.NumbaOp(old_style)

    @numba.njit
    def not_a_cfunc(x):
        return x
    with pytest.raises(TypeError, match="takes a @numba.cfunc"):
        stoker.NumbaOp(not_a_cfunc)
    with pytest.raises(TypeError, match="must be a number"):
        stoker.NumbaOp(numba_brightness, args=("1.5; rm",))
    with pytest.raises(ValueError, match="random must be 0 to 16"):
        stoker.NumbaOp(numba_brightness, args=(1,), random=17)
    with pytest.raises(TypeError, match="callable"):
        stoker.PythonOp(42)


def test_spec_order_errors():
    op = stoker.NumbaOp(numba_brightness, args=(1.2,))
    with pytest.raises(stoker.SpecError, match="must come before color_jitter"):
        stoker.spec_check(stoker.build_spec(["color_jitter brightness=0.4", op]), 8, 8, 3)
    with pytest.raises(stoker.SpecError, match="before resize is not supported"):
        stoker.spec_check(op.spec() + " | resize 4,4", 8, 8, 3)
    with pytest.raises(stoker.SpecError, match="a PythonOp takes no spec arguments"):
        stoker.spec_check(stoker.PythonOp(python_brightness(1)).spec() + " 3", 8, 8, 3)
    # The same function registers once.
    assert stoker.NumbaOp(numba_brightness, args=(2,)).spec() == "numba_brightness 2"


def test_cli_plugin_option(cifar_dir):
    from conftest import run_stoker
    lib = plugin(PLUGIN)
    uri = "cifar10:%s" % cifar_dir[0]
    digests = []
    for spec in ("color_jitter brightness=1.5:1.5 | to u8 hwc", "brightness 1.5 | to u8 hwc"):
        p = run_stoker("--plugin", lib, "bench", uri, "--pipeline", spec, "--digest",
                       "--threads", "2", "--no-shuffle")
        digests.append([l for l in p.stdout.splitlines() + p.stderr.splitlines()
                        if "digest" in l.lower()])
    assert digests[0] and digests[0] == digests[1]
    p = run_stoker("--plugin", "/nonexistent/p.so", "version", check=False)
    assert p.returncode == 1 and "plugin /nonexistent/p.so" in p.stderr
    p = run_stoker("--plugin", check=False)
    assert p.returncode == 2 and "option '--plugin' needs a value" in p.stderr
