"""The example plugin (examples/plugin_brightness) built as a user would:
stoker installed into a temporary prefix (`cmake --install build --prefix
TMP`), the example configured with its own CMakeLists.txt, which finds the
installed stoker through pkg-config (PKG_CONFIG_PATH), then loaded into a
fresh Python process whose brightness op must equal the built-in
`color_jitter brightness=F:F`."""
import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, ROOT
import module_util


def test_example_plugin_builds_against_installed_stoker(tmp_path):
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip("no CMake build at %s" % BUILD)
    cmake = shutil.which("cmake")
    prefix = tmp_path / "prefix"
    subprocess.run([cmake, "--install", BUILD, "--prefix", str(prefix)], check=True,
                   capture_output=True)
    pcs = glob.glob(str(prefix / "**" / "pkgconfig" / "stoker.pc"), recursive=True)
    assert len(pcs) == 1, pcs
    assert (prefix / "include" / "stoker" / "op.h").exists()
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]))
    # The relocatable stoker.pc points into the prefix.
    cflags = subprocess.run(["pkg-config", "--cflags", "stoker"], env=env, check=True,
                            capture_output=True, text=True).stdout
    assert os.path.realpath(str(prefix / "include")) in [
        os.path.realpath(f[2:]) for f in cflags.split() if f.startswith("-I")]
    src = tmp_path / "example"
    shutil.copytree(os.path.join(ROOT, "examples", "plugin_brightness"), src)
    out = tmp_path / "build-plugin"
    subprocess.run([cmake, "-S", str(src), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release"],
                   env=env, check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(out)], env=env, check=True, capture_output=True)
    lib = out / "libstoker_brightness.so"
    assert lib.exists()

    # A fresh process: the in-tree copy of the plugin registers the same names.
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import stoker
        stoker.load_plugin(sys.argv[1])
        imgs = np.random.default_rng(1).integers(0, 256, (21, 9, 7, 3), dtype=np.uint8)
        def run(spec, threads):
            L = stoker.Loader(stoker.from_numpy(imgs), batch_size=4, pipeline=spec,
                              output="numpy", num_threads=threads)
            return np.concatenate([np.asarray(b).copy() for b, _ in L])
        for threads in (1, 2):
            ref = run("color_jitter brightness=1.25:1.25 | to u8 hwc", threads)
            got = run("brightness 1.25 | to u8 hwc", threads)
            assert np.array_equal(ref, got), threads
            got = run("plugin %s | brightness 1.25 | to u8 hwc" % sys.argv[1], threads)
            assert np.array_equal(ref, got), threads
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=module_util.PY_PATH)
    r = subprocess.run([sys.executable, "-c", code, str(lib)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
