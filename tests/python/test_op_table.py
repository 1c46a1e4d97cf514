"""The op table (src/ops/op_table.c) against what is written about it
elsewhere: every op the C parser knows has a section or table line in
docs/pipeline.md and a transform class in python/stoker/transforms.py
(written by hand for the ops that parse their own arguments, generated from
stk_op_describe for the ops with a schema), named as the table says.

The list of ops comes from the library itself: the unknown-op message lists
every name and alias of the table ("known ops: pad, random_crop, ...")."""
import ctypes as C
import inspect
import os
import pickle
import re

import pytest

import stoker
from stoker import _stoker, transforms
from stk_ctypes import lib

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
# Ops without a transform class, and why.
NO_CLASS = {"to": "Loader(dtype=, layout=)", "decode": "implied by encoded input",
            "hflip": "an alias of flip",
            "plugin": "stoker.load_plugin(path) (docs/ops.md)"}


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
                "ColorJitter": (0.1,), "RandomPosterize": (3,), "RandomSolarize": (128,),
                "GaussianBlur": (3,), "RandomApply": ([stoker.RandomGrayscale(1)],),
                "RandomAffine": (10,)}
    row = ROWS[cls.op]
    if row[4] is not None:  # generated: the low end of each required param
        examples[name] = tuple(lo for _, _, required, lo, _, _ in row[4] if required)
    t = cls(*examples.get(name, ()))
    assert t.spec().split()[0] == cls.op
    assert row[3] == name  # the class is named as the table says


ROWS = {row[0]: row for row in _stoker.op_table()}


def test_op_table_matches_the_parser():
    """stk_op_describe lists the ops of the "known ops" message, in order,
    with the aliases it accepts."""
    names = []
    for name, aliases, usage, tv, params in _stoker.op_table():
        names += [name] + (aliases.split("|") if aliases else [])
    assert names == table_ops()
    assert ROWS["flip"][1] == "hflip" and ROWS["flip"][3] == "RandomHorizontalFlip"
    assert {n for n, r in ROWS.items() if r[3] is None} == {"to", "decode", "plugin"}
    assert ROWS["random_crop"][4] is None  # parses its own arguments
    # posterize's schema, as torchvision's RandomPosterize(bits, p=0.5) takes it
    assert ROWS["posterize"][2:] == ("BITS [p=P]", "RandomPosterize",
                                     (("bits", True, True, 0.0, 8.0, 0.0),
                                      ("p", False, False, 0.0, 1.0, 0.5)))


GENERATED = sorted(r[3] for r in ROWS.values() if r[3] and r[4] is not None)


def test_schema_ops_get_generated_classes():
    assert {"RandomPosterize", "RandomSolarize"} <= set(GENERATED)
    for name in GENERATED:
        cls = getattr(stoker, name)
        assert issubclass(cls, stoker.Transform) and cls.__module__ == "stoker.transforms"
        assert name in stoker.__all__ and name in transforms.__all__
        assert "transforms.%s" % name in cls.__doc__ and "Generated" in cls.__doc__
        params = ROWS[cls.op][4]
        sig = inspect.signature(cls)
        assert list(sig.parameters) == [p[0] for p in params]
        for (pname, whole, required, lo, hi, dflt), par in zip(params, sig.parameters.values()):
            if required:
                assert par.default is inspect.Parameter.empty
            else:
                assert par.default == dflt and type(par.default) is (int if whole else float)


@pytest.mark.parametrize("name", GENERATED)
def test_generated_class_arguments(name):
    """Positional or keyword as torchvision's constructor; spec() writes
    every value by name; repr, equality and pickling; each value out of its
    range is refused at construction with the C parser's message."""
    cls = getattr(stoker, name)
    params = ROWS[cls.op][4]
    args = [lo if whole else (lo + hi) / 2 for _, whole, _, lo, hi, _ in params]
    a = cls(*args)
    b = cls(**{p[0]: v for p, v in zip(params, args)})
    assert a == b and hash(a) == hash(b)
    assert a.spec() == " ".join([cls.op] + ["%s=%s" % (p[0], transforms._text(v, p[0]))
                                            for p, v in zip(params, args)])
    assert repr(a) == "%s(%s)" % (name, ", ".join("%s=%r" % (p[0], v)
                                                  for p, v in zip(params, args)))
    assert pickle.loads(pickle.dumps(a)) == a
    stoker.spec_check(a.spec() + " | to u8", 8, 8, 3)
    for k, (pname, whole, required, lo, hi, dflt) in enumerate(params):
        bad = list(args)
        bad[k] = hi + 1
        with pytest.raises(stoker.SpecError) as e:
            cls(*bad)
        assert "%s %s must be a %s from %s to %s" % (
            cls.op, pname, "whole number" if whole else "number",
            transforms._num(lo, ""), transforms._num(hi, "")) in str(e.value)
        assert "column" in str(e.value)  # the C parser's message, caret and all
        with pytest.raises(TypeError, match="%s must be a number" % pname):
            cls(*(args[:k] + ["1 | rotate 10"] + args[k + 1:]))
    if any(p[2] for p in params):
        with pytest.raises(TypeError, match="missing a required argument"):
            cls()
    with pytest.raises(TypeError, match="unexpected keyword"):
        cls(*args, no_such_arg=1)


def test_spec_validate_checks_the_text_alone():
    _stoker.spec_validate("center_crop 4096 | posterize 3")  # no shape: no size check
    with pytest.raises(stoker.SpecError, match="unknown op 'no_such_op'"):
        _stoker.spec_validate("no_such_op")
    with pytest.raises(stoker.SpecError, match="posterize must come before normalize"):
        _stoker.spec_validate("normalize mnist | posterize 3")


def test_stub_entries_of_generated_classes_follow_the_table():
    """python/stoker/__init__.pyi may give a generated class an entry (its
    module __getattr__ covers those without one); an entry lists the
    table's params in order, with a default exactly where the table has
    one."""
    with open(os.path.join(ROOT, "python", "stoker", "__init__.pyi")) as f:
        stub = f.read()
    assert re.search(r"^def __getattr__\(name: str\) -> Any: \.\.\.", stub, re.M)
    checked = 0
    for name in GENERATED:
        m = re.search(r"^class %s\(Transform\):\n    def __init__\(self, (.*?)\) -> None"
                      % name, stub, re.M | re.S)
        if not m:
            continue
        args = [a.strip() for a in m.group(1).split(",")]
        want = [p[0] for p in ROWS[getattr(stoker, name).op][4]]
        assert [a.split(":")[0] for a in args] == want, name
        assert [a.endswith("= ...") for a in args] == \
            [not p[2] for p in ROWS[getattr(stoker, name).op][4]], name
        checked += 1
    assert checked >= 2  # RandomPosterize, RandomSolarize
