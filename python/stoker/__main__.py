"""`python -m stoker` and the `stoker` console script of an installed package.

Both run the command-line tool itself: the C code of cli/ compiled into the
extension module (stoker._stoker.cli_main), the same code as the `stoker`
executable CMake builds, not a Python re-implementation. See docs/cli.md.

    python -m stoker inspect data/train
    stoker bench data/train --pipeline imagenet-train-few --digest
"""
import signal
import sys

from . import _stoker


def main(argv=None):
    """Run the tool with argv (default: sys.argv[1:]); returns its exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not hasattr(_stoker, "cli_main"):
        sys.stderr.write("stoker: this build of the stoker module has no command-line tool "
                         "(CMake built it with STK_BUILD_CLI=OFF)\n")
        return 1
    # As a C program would: Ctrl-C ends the tool at once (Python's handler
    # would only set a flag while the C code runs), and a closed pipe
    # (`stoker order ... | head`) ends it quietly instead of write errors.
    if argv is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    return _stoker.cli_main(["stoker"] + args)


if __name__ == "__main__":
    sys.exit(main())
