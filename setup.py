"""Build of the Python module for `pip install .` (see pyproject.toml).

Compiles python/_stoker.c together with the library sources src/*/*.c and
the command-line tool's sources cli/*.c (without their main(): the `stoker`
console script and `python -m stoker` call it through _stoker.cli_main) into
one extension, stoker._stoker, linked with the system libraries libstoker
uses (Debian: zlib1g-dev libjpeg62-turbo-dev libspng-dev libzstd-dev liblmdb-dev libjansson-dev libcurl4-openssl-dev
libwebp-dev libtiff-dev libgif-dev, libblosc-dev libxxhash-dev, libssl-dev libexpat1-dev, and libhdf5-dev when pkg-config finds it).
The pure-Python package is python/stoker/. Build files (and the egg-info)
go to build-pip/ so they never mix with a CMake build/ directory.
MANIFEST.in lists what the sdist carries: everything compiled here.

    /usr/bin/python3 -m venv --system-site-packages /tmp/venv
    /tmp/venv/bin/pip install --no-build-isolation .

A wheel that needs none of those libraries installed: scripts/wheels.sh
(auditwheel copies them into the wheel; docs/python.md, "Building").
"""
import glob
import os
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # the paths below are relative to the repository root
# egg_base (below) must exist: a fresh clone or an unpacked sdist has no build-pip/
os.makedirs("build-pip", exist_ok=True)

sources = ["python/_stoker.c", "python/_stoker_ops.c"] + sorted(glob.glob("src/*/*.c")) + sorted(glob.glob("cli/*.c"))


def pkg_config(name):
    """(include dirs, library dirs, libraries) of a pkg-config package, or None."""
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", name], check=True,
                             capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return ([f[2:] for f in out if f.startswith("-I")], [f[2:] for f in out if f.startswith("-L")],
            [f[2:] for f in out if f.startswith("-l")])


# libhdf5 for the hdf5: reader, as CMakeLists.txt finds it (Debian: libhdf5-dev,
# whose serial build lives in /usr/include/hdf5/serial); without it the reader
# refuses hdf5: URIs with a message.
hdf5 = pkg_config("hdf5")

extension = Extension(
    "stoker._stoker",
    sources=sources,
    include_dirs=["include", "src"] + (hdf5[0] if hdf5 else []),
    library_dirs=hdf5[1] if hdf5 else [],
    # a changed header rebuilds the module too (setuptools compares times)
    depends=sorted(glob.glob("include/stoker/*.h") + glob.glob("src/*/*.h") + glob.glob("cli/*.h")),
    define_macros=[("STK_STATIC_DEFINE", None), ("_GNU_SOURCE", None), ("NDEBUG", None),
                   ("STK_HAVE_CLI", None), ("STK_CLI_NO_MAIN", None)]
    + ([("STK_HAVE_HDF5", None)] if hdf5 else []),
    libraries=["z", "jpeg", "spng", "zstd", "blosc", "lmdb", "jansson", "curl", "xxhash", "pthread", "m", "dl"]
    + (hdf5[2] if hdf5 else [])
    + ["webp", "webpdemux", "tiff", "gif"]  # WebP, TIFF, GIF (src/codec/)
    + ["crypto", "expat"],  # S3: SigV4's SHA-256/HMAC (libssl-dev), ListObjectsV2 XML (libexpat1-dev)
    # -ffp-contract=off as in CMakeLists.txt: no fused multiply-add, so the
    # module's output is bit-identical to the CMake build's with any compiler.
    extra_compile_args=["-std=c11", "-O3", "-fvisibility=hidden", "-ffp-contract=off",
                        "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

setup(
    packages=["stoker"],
    package_dir={"": "python"},
    package_data={"stoker": ["*.pyi", "py.typed"]},
    ext_modules=[extension],
    # build files and the egg-info metadata both go to build-pip/, so
    # `pip install .` leaves the source tree as it was
    options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}},
)
