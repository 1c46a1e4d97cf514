"""The layer order of src/ (docs/layers.md), as scripts/check_layers.py checks
it: the real tree passes, and each kind of violation — an include upwards, an
include across siblings, a relative include, a public header or a client of
the public API including src/, a directory missing from the table, a call
upwards seen only in the object files — is reported with its file and line
and fails the check; so is a reader of src/format that calls open, pread,
mmap, madvise or posix_fadvise itself instead of going through src/io. CTest
runs the same script over the library's objects (test "layers")."""
import importlib.util
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "check_layers", os.path.join(ROOT, "scripts", "check_layers.py"))
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)


def test_the_tree_keeps_the_layer_order():
    assert check_layers.check_includes(ROOT) == []


def test_the_table_is_the_documented_picture():
    """docs/layers.md names each directory and what it may include."""
    with open(os.path.join(ROOT, "docs", "layers.md"), encoding="utf-8") as f:
        doc = f.read()
    for layer in check_layers.LAYERS:
        assert "src/%s" % layer in doc
    assert sorted(os.listdir(os.path.join(ROOT, "src"))) == sorted(check_layers.LAYERS)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


@pytest.fixture
def tree(tmp_path):
    """A small tree in the project's shape that keeps the order."""
    root = str(tmp_path)
    write(root, "include/stoker/stoker.h", "#include <stdint.h>\n")
    write(root, "src/core/error.h", '#include "stoker/stoker.h"\n')
    write(root, "src/core/error.c", '#include "core/error.h"\n#include <sys/mman.h>\n')
    write(root, "src/io/source.c", '#include "core/error.h"\n')
    write(root, "src/codec/codec.h", '#include "core/error.h"\n')
    write(root, "src/codec/jpeg.c", '#include "codec.h"\n#include "codec/codec.h"\n')
    write(root, "src/format/dataset.c", '#include "codec/codec.h"\n#include "io/source.h"\n')
    write(root, "src/ops/plan.c", '#include "codec/codec.h"\n')
    write(root, "src/pipeline/loader.c", '#include "format/dataset.h"\n#include "ops/plan.h"\n')
    write(root, "src/tools/pack.c", '#include "pipeline/sampler.h"\n#include "format/x.h"\n')
    write(root, "cli/main.c", '#include "cli.h"\n#include <stoker/stoker.h>\n')
    write(root, "python/_stoker.c", "#include <Python.h>\n#include <stoker/stoker.h>\n")
    return root


def test_a_clean_tree_passes(tree):
    assert check_layers.check_includes(tree) == []
    assert check_layers.main(["--root", tree]) == 0


@pytest.mark.parametrize("rel, line, expect", [
    ("src/core/rng.c", '#include "pipeline/sampler.h"',
     'src/core/rng.c:2: includes "pipeline/sampler.h": pipeline is above core'),
    ("src/codec/png.c", '#include <format/dataset.h>',
     'src/codec/png.c:2: includes "format/dataset.h": format is above codec'),
    ("src/ops/plan.c", '#include "pipeline/sampler.h"',
     'src/ops/plan.c:2: includes "pipeline/sampler.h": pipeline is above ops'),
    ("src/format/dataset.c", '#include "ops/plan.h"',
     'src/format/dataset.c:2: includes "ops/plan.h": format may use only core, io, codec'),
    ("src/format/stk/stk_shard.c", '#include "pipeline/sampler.h"',
     'src/format/stk/stk_shard.c:2: includes "pipeline/sampler.h": pipeline is above format'),
    ("src/io/source.c", '#include "../tools/pack.h"',
     'src/io/source.c:2: includes "../tools/pack.h": tools is above io'),
    ("include/stoker/stoker.h", '#include "core/util.h"',
     'include/stoker/stoker.h:2: includes "core/util.h": include/ may use only the public API (include/stoker)'),
    ("cli/main.c", '#include "format/dataset.h"',
     'cli/main.c:2: includes "format/dataset.h": cli/ may use only the public API (include/stoker)'),
    ("python/_stoker.c", '#include "core/error.h"',
     'python/_stoker.c:2: includes "core/error.h": python/ may use only the public API (include/stoker)'),
])
def test_a_violation_is_named_and_fails(tree, capsys, rel, line, expect):
    path = os.path.join(tree, rel)
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else "/* */\n"
    write(tree, rel, old.splitlines()[0] + "\n" + line + "\n")
    problems = check_layers.check_includes(tree)
    assert [p.split(" (docs/layers.md)")[0] for p in problems] == [expect]
    assert check_layers.main(["--root", tree]) == 1
    out = capsys.readouterr().out
    assert expect in out and "1 layer violation" in out


def test_a_directory_outside_the_table_fails(tree):
    write(tree, "src/dsp/kernel.c", '#include "core/error.h"\n')
    assert check_layers.check_includes(tree) == [
        "src/dsp/kernel.c: directory src/dsp is not in the layer table (docs/layers.md, "
        "scripts/check_layers.py)"]


def compile_object(tmp_path, rel, code):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the objects")
    src = tmp_path / (rel.replace("/", "_"))
    src.write_text(code)
    obj = tmp_path / "obj" / (rel + ".o")
    obj.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-c", "-o", str(obj), str(src)], check=True)
    return str(obj)


def test_a_call_upwards_is_found_in_the_objects(tmp_path):
    """Every layer includes the public header, which declares the whole API,
    so only the objects show a call from format into the loader."""
    loader = compile_object(tmp_path, "src/pipeline/loader.c",
                            "int stk_loader_next(void); int stk_loader_next(void) { return 1; }\n")
    dataset = compile_object(tmp_path, "src/format/dataset.c",
                             "int stk_loader_next(void); int stk_dataset_read(void);\n"
                             "int stk_dataset_read(void) { return stk_loader_next(); }\n")
    pack = compile_object(tmp_path, "src/tools/pack.c",
                          "int stk_dataset_read(void); int stk_pack(void);\n"
                          "int stk_pack(void) { return stk_dataset_read(); }\n")
    assert check_layers.check_symbols([loader, pack]) == []
    assert check_layers.check_symbols([loader, dataset, pack]) == [
        "src/format/dataset.c: uses stk_loader_next, defined in src/pipeline/loader.c: "
        "pipeline is above format (docs/layers.md)"]


def test_the_readers_get_their_bytes_through_io():
    """No reader of src/format calls open/pread/mmap/madvise/... itself."""
    assert check_layers.check_io_calls(ROOT) == []


@pytest.mark.parametrize("call, name", [
    ("int fd = open(path, O_RDONLY | O_CLOEXEC);", "open"),
    ("fd = openat(root_fd, rel, O_RDONLY | O_NONBLOCK);", "openat"),
    ("ssize_t k = pread(fd, buf, n, 0);", "pread"),
    ("k = read (fd, buf, n);", "read"),
    ("void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);", "mmap"),
    ("munmap((void *)s->map, size);", "munmap"),
    ("madvise((void *)p, n, MADV_RANDOM);", "madvise"),
    ("posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);", "posix_fadvise"),
])
def test_a_reader_calling_the_os_itself_fails(tree, capsys, call, name):
    write(tree, "src/format/npy.c",
          '#include "io/source.h"\nstatic int f(void)\n{\n    %s\n    return 0;\n}\n' % call)
    expect = ("src/format/npy.c:4: calls %s(): the readers of src/format get their bytes "
              "through src/io (src/io/source.h)" % name)
    assert check_layers.check_io_calls(tree) == [expect]
    assert check_layers.main(["--root", tree]) == 1
    assert expect in capsys.readouterr().out


def test_the_stk_folder_is_checked_but_its_writer(tree):
    """src/format/stk/ is the format layer: its reader files get their bytes
    through src/io like any other; only the writer, which creates files, is
    exempt."""
    write(tree, "src/format/stk/stk_shard.c", "static int f(void) { return pread(fd, b, 1, 0); }\n")
    write(tree, "src/format/stk/stk_writer.c", "static int g(void) { return open(p, O_WRONLY); }\n")
    assert check_layers.check_io_calls(tree) == [
        "src/format/stk/stk_shard.c:1: calls pread(): the readers of src/format get their bytes "
        "through src/io (src/io/source.h)"]


def test_what_the_io_check_leaves_alone(tree):
    """Directories opened for walking, method calls, comments, strings, the
    writer, and src/io itself."""
    write(tree, "src/format/imagefolder.c",
          "/* read() opens the file: pread( in a comment */\n"
          "static int f(int root_fd, const char *rel)\n{\n"
          "    int fd = openat(root_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);\n"
          "    int d = open(rel,\n                 O_RDONLY | O_DIRECTORY);\n"
          "    ds->vt->read(ds, 0, NULL, NULL);\n    r.open(rel);\n"
          '    stk_fail(1, "mmap(%s) failed", rel); // madvise(\n'
          "    return stk_source_pread(src, buf, 1, 0) + my_read(fd) + fd + d;\n}\n")
    write(tree, "src/format/stk/stk_writer.c", "static int g(void) { return open(p, O_WRONLY); }\n")
    write(tree, "src/io/source.c", "static int h(void) { return pread(fd, b, 1, 0); }\n")
    assert check_layers.check_io_calls(tree) == []
