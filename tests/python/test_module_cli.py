"""`python -m stoker` and stoker._stoker.cli_main: the C tool inside the module.

The installed package's `stoker` script and `python -m stoker` run cli/*.c
compiled into the extension (cli/main.c's stk_cli_main). Here the module of
the CMake build (PYTHONPATH=build/python) is compared with the CMake-built
executable build/stoker: the same output, messages and exit status for the
same argv, and the same digest for the same pipeline. The wheel of
scripts/wheels.sh is checked the same way by tests/wheel_smoke.py.
"""
import os
import signal
import subprocess
import sys

import pytest

from conftest import STOKER, run_stoker

import stoker
from stoker import _stoker

SPEC = "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw"


def run_module(*args):
    return subprocess.run([sys.executable, "-m", "stoker", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("argv", [
    ["--help"], ["help", "bench"], ["help", "pack"], ["version"], [],
    ["nosuch"], ["help", "nosuch"], ["order", "20", "--seed", "4", "--epoch", "1"],
    ["order", "20", "--rank", "1", "--world-size", "3"], ["order", "-1"],
    ["order", "20", "--bogus"], ["bench", "/nonexistent/dir", "--pipeline", SPEC],
])
def test_same_output_and_status_as_the_executable(argv):
    want = run_stoker(*argv, check=False)
    got = run_module(*argv)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_usage_errors_exit_2_with_the_message():
    p = run_module("bench", "x", "--threads", "0")
    assert p.returncode == 2
    assert p.stderr == "stoker: --threads must be at least 1, got '0'\n"


def test_bench_digest_equals_the_executable(cifar_dir):
    args = ["bench", "cifar10:" + cifar_dir[0], "--pipeline", SPEC, "--batch", 16, "--epochs", 2,
            "--seed", 3, "--threads", 2, "--digest"]
    digests = []
    for p in (run_stoker(*args), run_module(*args)):
        assert p.returncode == 0, p.stderr
        digests.append([l for l in p.stdout.splitlines() if l.startswith("digest: ")])
    assert len(digests[0]) == 1 and digests[0] == digests[1]


def test_pack_through_the_module_then_load(tmp_path, cifar_dir):
    dest = tmp_path / "stk"
    p = run_module("pack", "cifar10:" + cifar_dir[0], dest, "-q")
    assert p.returncode == 0, p.stderr
    ds = stoker.open(str(dest))
    images, labels = cifar_dir[1], cifar_dir[2]
    assert len(ds) == len(labels)
    pixels, label = ds[5]
    assert label == labels[5]
    assert (pixels == images[5].transpose(1, 2, 0)).all()


def test_cli_main_twice_in_one_process():
    """The first call stops inside the short-option cluster "-zq" (unknown
    -z): getopt is left pointing at 'q' of that argv. The second call must
    parse its own argv from the start (stk_cli_main re-initialises getopt)."""
    code = ("import sys, stoker._stoker as s\n"
            "a = s.cli_main(['stoker', 'order', '5', '-zq'])\n"
            "b = s.cli_main(['stoker', 'order', '6', '--seed', '1'])\n"
            "c = s.cli_main(['stoker', 'order', '4', '-s', '2', '-e', '1'])\n"
            "sys.exit(a * 100 + b * 10 + c)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 200, p.stderr
    assert p.stderr == run_stoker("order", 5, "-zq", check=False).stderr
    assert "unknown option" in p.stderr
    want = run_stoker("order", 6, "--seed", 1).stdout + run_stoker("order", 4, "-s", 2, "-e", 1).stdout
    assert p.stdout == want


def test_cli_main_argument_errors():
    with pytest.raises(ValueError, match="program name"):
        _stoker.cli_main([])
    with pytest.raises(TypeError, match="list of str"):
        _stoker.cli_main(5)
    with pytest.raises(TypeError):
        _stoker.cli_main(["stoker", 3])
    with pytest.raises(ValueError, match="null"):
        _stoker.cli_main(["stoker", "order", "5\0"])


def test_closed_pipe_ends_it_like_the_executable():
    """`stoker order N | head -1`: SIGPIPE ends the tool quietly, as it ends
    the C program (Python ignores SIGPIPE; __main__ restores the default)."""
    for argv in ([STOKER], [sys.executable, "-m", "stoker"]):
        p = subprocess.Popen(argv + ["order", "5000000"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        first = p.stdout.readline()
        p.stdout.close()
        rc = p.wait(timeout=120)
        err = p.stderr.read()
        p.stderr.close()
        assert first.strip().isdigit()
        assert rc == -signal.SIGPIPE, (argv, rc, err)
        assert err == b"", (argv, err)


def test_console_script_entry_point():
    """pyproject.toml's [project.scripts] names stoker.__main__:main, which
    returns the status (the script calls sys.exit on it)."""
    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {"stoker": "stoker.__main__:main"}
    code = "import sys, stoker.__main__ as m; sys.argv = ['stoker', 'version']; sys.exit(m.main())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, "stoker %s\n" % stoker.__version__)
