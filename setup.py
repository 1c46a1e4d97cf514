"""Build of the Python module for `pip install .` (see pyproject.toml).

Compiles python/_stoker*.c together with the library sources src/*/*.c and
src/*/*/*.c (src/format/stk/) and the command-line tool's sources cli/*.c
(without their main(): the `stoker` console script and `python -m stoker`
call it through _stoker.cli_main) into one extension, stoker._stoker, linked
with the system libraries libstoker uses (Debian: zlib1g-dev libjpeg62-turbo-dev libspng-dev libzstd-dev liblmdb-dev libjansson-dev libcurl4-openssl-dev
libwebp-dev libtiff-dev libgif-dev, libblosc-dev libxxhash-dev, libssl-dev libexpat1-dev, and libhdf5-dev when pkg-config finds it).
The CUDA kernels (src/gpu/kernels.cu) are compiled with nvcc when it is
found, and embedded as a fat binary (STOKER_CUDA=0 builds without them,
STOKER_CUDA=1 requires them; docs/gpu.md, "Building"); no CUDA library is
linked. The pure-Python package is python/stoker/. Build files (and the egg-info)
go to build-pip/ so they never mix with a CMake build/ directory.
MANIFEST.in lists what the sdist carries: everything compiled here.

The ~100 C files compile in parallel, one compiler per core (STOKER_BUILD_JOBS=N
sets the number; `setup.py build_ext -j N` too), each finished file printed
with a count: `pip install -v .` shows the progress, which plain `pip install`
hides behind its spinner (2.5 minutes on a busy 2-core machine, against 7
one file at a time).

    /usr/bin/python3 -m venv --system-site-packages /tmp/venv
    /tmp/venv/bin/pip install --no-build-isolation .

A wheel that needs none of those libraries installed: scripts/wheels.sh
(auditwheel copies them into the wheel; docs/python.md, "Building").
"""
import concurrent.futures
import glob
import os
import subprocess
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # the paths below are relative to the repository root
# egg_base (below) must exist: a fresh clone or an unpacked sdist has no build-pip/
os.makedirs("build-pip", exist_ok=True)

# CMake's src/gpu/fatbin_none.c is not compiled here: BuildExt adds a generated fatbin.c.
sources = (sorted(glob.glob("python/_stoker*.c"))  # the extension: one file per type (python/_stoker.h)
           + sorted(f for f in glob.glob("src/*/*.c") + glob.glob("src/*/*/*.c")  # src/format/stk/
                    if f != os.path.join("src", "gpu", "fatbin_none.c"))
           + sorted(glob.glob("cli/*.c")))


def cuda_kernels(build_temp):
    """The C file holding the CUDA kernels' fat binary (docs/gpu.md, "Building"):
    build_temp/gpu/fatbin.c, written by scripts/embed_fatbin.py (never into
    the source tree).

    STOKER_CUDA=0: no kernels (stk_gpu_fatbin_size 0, as CMake's
    src/gpu/fatbin_none.c); =1: nvcc must be found and succeed; unset (auto):
    the kernels are built when nvcc is found ($CUDACXX, PATH,
    /usr/local/cuda/bin/nvcc), and a failing nvcc gives a build without them
    (a warning). nvcc runs with the flags CMake uses. The file is rewritten
    only when its text changes, so a rerun (or a switch of STOKER_CUDA)
    rebuilds the module exactly when needed. No CUDA library is linked: the
    module loads the driver at run time."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("embed_fatbin", os.path.join("scripts", "embed_fatbin.py"))
    embed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(embed)
    out = os.path.join(build_temp, "gpu", "fatbin.c")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    want = os.environ.get("STOKER_CUDA", "").strip().lower()
    required = want in ("1", "on", "yes", "true")
    nvcc = None if want in ("0", "off", "no", "false") else embed.find_nvcc()
    if nvcc:
        try:
            embed.build(nvcc, HERE, os.path.join(build_temp, "gpu", "kernels.fatbin"), out, keep_same=True)
            return out
        except Exception as e:  # nvcc failed (its messages went to stderr)
            if required:
                raise SystemExit("setup.py: STOKER_CUDA=1 but nvcc failed: %s" % e)
            print("setup.py: WARNING: nvcc failed (%s): stoker is built without CUDA kernels" % e)
    elif required:
        raise SystemExit("setup.py: STOKER_CUDA=1 but nvcc was not found (CUDACXX, PATH, /usr/local/cuda/bin)")
    else:
        print("setup.py: %s: stoker is built without CUDA kernels (the emulated device only)"
              % ("STOKER_CUDA=0" if want else "nvcc not found"))
    embed.embed(b"", out, keep_same=True)
    return out


def build_jobs(parallel):
    """How many files compile at once: $STOKER_BUILD_JOBS, else build_ext's -j,
    else one per core."""
    env = os.environ.get("STOKER_BUILD_JOBS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise SystemExit("setup.py: STOKER_BUILD_JOBS=%r: expected a number of jobs" % env)
    if isinstance(parallel, int) and not isinstance(parallel, bool) and parallel > 0:
        return parallel
    return os.cpu_count() or 1


def parallel_compile(compiler, jobs, sources, output_dir=None, macros=None, include_dirs=None,
                     debug=0, extra_preargs=None, extra_postargs=None, depends=None):
    """CCompiler.compile with `jobs` files at a time, printing each file
    done. distutils compiles an extension's sources one after another (its
    -j runs whole extensions in parallel, and stoker is one extension); the
    steps are distutils' own (_setup_compile, _get_cc_args, _compile), only
    run from a thread pool. The first failure stops files not yet started,
    and is raised once the running ones end."""
    macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs)
    cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
    todo = [(obj,) + tuple(build[obj]) for obj in objects if obj in build]
    t0, done = time.monotonic(), 0
    print("setup.py: compiling %d files, %d at a time" % (len(todo), jobs), flush=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(compiler._compile, obj, src, ext, cc_args, extra_postargs, pp_opts): src
                   for obj, src, ext in todo}
        try:
            for f in concurrent.futures.as_completed(futures):
                f.result()
                done += 1
                print("setup.py: [%d/%d] %s (%.0f s)" % (done, len(todo), futures[f], time.monotonic() - t0),
                      flush=True)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return objects


class BuildExt(build_ext):
    """build_ext that adds the kernels' C file (only when compiling: an sdist
    or egg_info step runs no nvcc) and compiles the files in parallel."""

    def build_extension(self, ext):
        if ext.name == "stoker._stoker":
            ext.sources = list(ext.sources) + [cuda_kernels(self.build_temp)]
        jobs = build_jobs(self.parallel)
        compiler = self.compiler
        # A compiler class without distutils' three steps (not the Unix one)
        # keeps its own serial compile.
        if jobs > 1 and all(hasattr(compiler, a) for a in ("_setup_compile", "_get_cc_args", "_compile")):
            compiler.compile = lambda sources, *a, **k: parallel_compile(compiler, jobs, sources, *a, **k)
            try:
                super().build_extension(ext)
            finally:
                del compiler.compile  # the instance attribute: the class's method again
        else:
            super().build_extension(ext)


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
    depends=sorted(glob.glob("include/stoker/*.h") + glob.glob("src/*/*.h") + glob.glob("src/*/*/*.h")
                   + glob.glob("cli/*.h")
                   + glob.glob("python/*.h")
                   + ["src/gpu/kernels.cu", "scripts/embed_fatbin.py"]),
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
    cmdclass={"build_ext": BuildExt},
    # build files and the egg-info metadata both go to build-pip/, so
    # `pip install .` leaves the source tree as it was
    options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}},
)
