"""The native Loader's keyword arguments come from the library's loader
parameter table (src/pipeline/loader_params.c, stk_loader_param_describe;
issue 27): every row is a keyword of _stoker._Loader with the row's type
and bounds, a value outside them raises naming the bounds, and a row the
Python Loader has no argument of its own for (decode_budget) passes
through stoker.Loader(..., decode_budget=N) unchanged. A loader given
every row at its default delivers the batches of one given nothing."""
import os

import numpy as np
import pytest
from PIL import Image

from module_util import stoker

_Loader = stoker._stoker._Loader
PIPE = "resize 16 | center_crop 16 | to u8 hwc"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """12 small JPEGs (16x16) and one large one (1200x1000, 05.jpg), as
    tests/test_loader_params.c writes them."""
    root = tmp_path_factory.mktemp("budget")
    (root / "c").mkdir()
    rng = np.random.default_rng(5)
    for i in range(13):
        h, w = (1200, 1000) if i == 5 else (16, 16)
        px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(px).save(root / "c" / ("%02d.jpg" % i), quality=90)
    return str(root)


def rows():
    return {r[0]: r for r in _Loader.params()}


def test_the_table_is_exposed():
    table = rows()
    for name in ("batch_size", "seed", "on_error", "fields", "decode_budget", "eager"):
        assert name in table
    name, kind, lo, hi, default, doc, values = table["on_error"]
    assert (kind, lo, hi, default, values) == ("enum", 0, 2, 0, "raise,skip,replace")
    assert table["decode_budget"][1] == "uint" and table["decode_budget"][4] == 0
    assert all(doc and "\n" not in doc for _, _, _, _, _, doc, _ in table.values())


def value_for(row):
    name, kind, lo, hi, default, _, values = row
    if kind == "string":
        return {"fields": "image,label", "device": "cpu"}.get(name, "")
    if kind == "enum":
        return values.split(",")[lo]
    return default


def test_every_row_is_a_keyword(folder):
    ds = stoker.open("imagefolder:" + folder)
    for row in _Loader.params():
        if row[1] == "pointer":
            with pytest.raises(TypeError, match=row[0] + " cannot be given from Python"):
                _Loader(ds, PIPE, **{row[0]: 1})
            continue
        loader = _Loader(ds, PIPE, **{row[0]: value_for(row)})
        loader.close()
    with pytest.raises(TypeError, match="no_such_row"):
        _Loader(ds, PIPE, no_such_row=1)


@pytest.mark.parametrize("name", [r[0] for r in _Loader.params() if r[1] in ("uint", "int")])
def test_out_of_bounds_names_the_bounds(folder, name):
    ds = stoker.open("imagefolder:" + folder)
    _, _, lo, hi, _, _, _ = rows()[name]
    bad = hi + 1
    with pytest.raises(ValueError, match=r"%s %d is out of bounds \[%d, %d\]" % (name, bad, lo,
                                                                                  hi)):
        _Loader(ds, PIPE, **{name: bad})
    if lo > 0:
        with pytest.raises(ValueError, match=r"\[%d, %d\]" % (lo, hi)):
            _Loader(ds, PIPE, **{name: lo - 1})


def test_enum_names_and_bounds(folder):
    ds = stoker.open("imagefolder:" + folder)
    with pytest.raises(ValueError, match=r"on_error must be 0 \(raise\), 1 \(skip\) or 2 "
                                         r"\(replace\)"):
        _Loader(ds, PIPE, on_error=3)
    with pytest.raises(ValueError, match=r"decoder must be 0 \(cpu\) or 1 \(nvjpeg\)"):
        _Loader(ds, PIPE, decoder="gpu")
    _Loader(ds, PIPE, on_error="skip").close()


def batches(loader):
    return [(np.array(images), np.array(labels)) for images, labels in loader]


def test_decode_budget_bounds_a_decode(folder):
    def make(**kw):
        return stoker.Loader("imagefolder:" + folder, batch_size=13, pipeline=PIPE,
                             num_threads=2, shuffle=False, output="numpy", **kw)

    whole = batches(make(decode_budget=0))
    assert whole[0][0].shape[0] == 13
    loader = make(decode_budget=24 * 1024, on_error="skip")
    got = batches(loader)
    assert got[0][0].shape[0] == 12
    (index, path, why), = loader.skipped
    assert index == 5 and os.path.basename(path) == "05.jpg" and "24576" in why, why
    np.testing.assert_array_equal(got[0][0][3], whole[0][0][3])
    with pytest.raises(stoker.DataError, match="05.jpg"):
        batches(make(decode_budget=24 * 1024))
    with pytest.raises(ValueError, match=r"decode_budget -1 is out of bounds"):
        make(decode_budget=-1)
    with pytest.raises(TypeError, match="did you mean decode_budget="):
        make(decode_budgets=1)


def test_defaults_give_the_same_batches(folder):
    """Every row given at its default (the enum's first name, strings
    unset) delivers what a loader given nothing delivers."""
    ds = stoker.open("imagefolder:" + folder)
    given = {r[0]: r[4] for r in _Loader.params() if r[1] in ("uint", "int", "bool", "enum")}
    given["batch_size"] = 4
    given["seed"] = 7
    plain = _Loader(ds, PIPE, batch_size=4, seed=7)
    full = _Loader(ds, PIPE, **given)
    a, b = list(plain), list(full)
    assert len(a) == len(b) == 4
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x[0]), np.asarray(y[0]))
        np.testing.assert_array_equal(np.asarray(x[1]), np.asarray(y[1]))
