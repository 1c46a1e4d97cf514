"""The op table (src/ops/op_table.c) against what is written about it
elsewhere: every op the C parser knows has a section or table line in
docs/pipeline.md and a transform class in python/stoker/transforms.py.

The list of ops comes from the library itself: the unknown-op message lists
every name and alias of the table ("known ops: pad, random_crop, ...")."""
import ctypes as C
import os
import re

import pytest

import stoker
from stoker import transforms
from stk_ctypes import lib

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
# Ops without a transform class, and why.
NO_CLASS = {"to": "Loader(dtype=, layout=)", "decode": "implied by encoded input",
            "hflip": "an alias of flip"}


def table_ops():
    lib.stk_spec_check.argtypes = [C.c_char_p, C.c_uint32, C.c_uint32, C.c_uint32, C.c_void_p,
                                   C.c_void_p, C.c_void_p]
    assert lib.stk_spec_check(b"no_such_op", 4, 4, 3, None, None, None) < 0
    msg = lib.stk_errmsg().decode()
    m = re.search(r"known ops: (.*?) \(presets: ", msg)
    assert m, msg
    return m.group(1).split(", ")


def test_the_table_lists_the_ops_the_parser_accepts():
    ops = table_ops()
    assert ops[:4] == ["pad", "random_crop", "center_crop", "flip"]
    assert len(ops) == len(set(ops))
    for op in ops:
        # Each listed name is parsed as an op: any message but "unknown op".
        try:
            stoker.spec_check(op, 4, 4, 3)
        except stoker.SpecError as e:
            assert "unknown op" not in str(e), (op, str(e))


def test_every_op_has_a_doc_line():
    with open(os.path.join(ROOT, "docs", "pipeline.md")) as f:
        doc = f.read()
    # A heading naming it ("### `flip [P]`, alias `hflip [P]`; `vflip [P]`")
    # or a line of the uint8 point ops table ("| `posterize BITS [p=P]` | ...").
    missing = [op for op in table_ops()
               if not re.search(r"^### .*`%s[ `]" % re.escape(op), doc, re.M) and
               not re.search(r"^\| `%s[ `]" % re.escape(op), doc, re.M)]
    assert not missing, "docs/pipeline.md has no section or table line for %s" % missing


def test_every_op_has_a_transform_class():
    have = {getattr(transforms, name).op for name in transforms.__all__
            if isinstance(getattr(transforms, name), type) and getattr(transforms, name).op}
    missing = [op for op in table_ops() if op not in have and op not in NO_CLASS]
    assert not missing, "python/stoker/transforms.py has no class for %s" % missing
    assert not have - set(table_ops()), "classes name ops the table does not have"


@pytest.mark.parametrize("name", [n for n in transforms.__all__
                                  if isinstance(getattr(transforms, n), type) and
                                  getattr(transforms, n).op])
def test_a_class_writes_its_op(name):
    cls = getattr(transforms, name)
    examples = {"RandomCrop": (8,), "CenterCrop": (8,), "Pad": (2,), "RandomResizedCrop": (8,),
                "Resize": (8,), "RandomRotation": (10,), "Normalize": ((0.5,), (0.25,)),
                "ColorJitter": (0.1,), "RandomPosterize": (3,), "RandomSolarize": (128,)}
    t = cls(*examples.get(name, ()))
    assert t.spec().split()[0] == cls.op
