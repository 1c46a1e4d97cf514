"""The ImageNet transforms from Python: specs like torchvision's arguments,
and a Loader over an image folder of JPEGs (made here with PIL) whose
batches equal the CLI's digest for the same spec."""
import io

import numpy as np
import pytest
import xxhash
from PIL import Image

from conftest import run_stoker
from module_util import stoker


def test_transform_specs():
    assert stoker.RandomResizedCrop(224).spec() == \
        "random_resized_crop 224 scale=0.08:1 ratio=0.75:1.3333333333333333"
    assert stoker.Resize(256).spec() == "resize 256"
    assert stoker.Resize((200, 300)).spec() == "resize 200,300"
    assert stoker.RandomRotation(10, fill=5).spec() == "rotate 10 fill=5"
    assert stoker.ColorJitter(0.4, 0.4, 0.4).spec() == \
        "color_jitter brightness=0.4 contrast=0.4 saturation=0.4 hue=0"
    with pytest.raises(ValueError, match="interpolation"):
        stoker.Resize(256, interpolation="nearest-exact")
    with pytest.raises(ValueError, match="hue"):
        stoker.ColorJitter(hue=0.7)
    # The specs compile (stk_spec_check with a variable input shape).
    spec = " | ".join([stoker.RandomResizedCrop(32).spec(), stoker.RandomRotation(5).spec(),
                       stoker.ColorJitter(0.4, 0.4, 0.4, 0.1).spec(), "to f32 chw"])
    shape, dtype, layout = stoker.spec_check(spec, 0, 0, 0)
    assert tuple(shape) == (3, 32, 32)


@pytest.fixture
def jpeg_folder(tmp_path):
    rng = np.random.default_rng(3)
    for c in ["cat", "dog"]:
        (tmp_path / c).mkdir()
        for i in range(9):
            arr = rng.integers(0, 256, (40 + 3 * i, 50 - 2 * i, 3), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / c / ("%d.jpg" % i), quality=90)
    return str(tmp_path)


def test_loader_on_jpegs_matches_cli_digest(jpeg_folder):
    transforms = [stoker.RandomResizedCrop(24), stoker.RandomHorizontalFlip(),
                  stoker.ColorJitter(0.4, 0.4, 0.4),
                  stoker.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    loader = stoker.Loader(jpeg_folder, batch_size=5, seed=7, shuffle=True, transforms=transforms,
                           num_threads=2, output="numpy")
    h = xxhash.xxh3_128()
    n = 0
    for images, labels in loader:
        assert images.shape[1:] == (3, 24, 24) and images.dtype == np.float32
        h.update(np.ascontiguousarray(images).tobytes())
        h.update(np.asarray(labels, dtype="<i8").tobytes())
        n += len(labels)
    assert n == 18
    p = run_stoker("bench", jpeg_folder, "--pipeline", loader.pipeline, "--batch", 5, "--seed", 7,
                   "--digest")
    cli = [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]
    assert cli == "%032x" % h.intdigest()


def test_corrupt_files_named_under_raise_and_skipped_exactly_once(tmp_path):
    """Good JPEGs and hostile files (truncated, empty, random bytes, a header
    claiming 65500x65500) in one image folder: raise names the file; skip
    delivers every good sample exactly once and counts the bad ones."""
    rng = np.random.default_rng(5)
    root = tmp_path / "imgs"
    bad_names = set()
    for c in ["a", "b"]:
        (root / c).mkdir(parents=True)
        for i in range(12):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (30, 34, 3), dtype=np.uint8)).save(buf, "JPEG")
            data = buf.getvalue()
            kind = i % 6
            if c == "b" and kind == 1:
                data = data[: len(data) // 2]
            elif c == "b" and kind == 2:
                data = b""
            elif c == "b" and kind == 3:
                data = rng.integers(0, 256, 700, dtype=np.uint8).tobytes()
            elif c == "b" and kind == 4:
                huge = bytearray(data)
                sof = huge.index(b"\xff\xc0")
                huge[sof + 5:sof + 9] = (65500).to_bytes(2, "big") * 2
                data = bytes(huge)
            name = "%02d.jpg" % i
            if c == "b" and kind in (1, 2, 3, 4):
                bad_names.add(name)
            (root / c / name).write_bytes(data)
    n_good = 24 - len(bad_names)  # bad ones only in class b
    spec = [stoker.RandomResizedCrop(16), stoker.RandomHorizontalFlip()]
    loader = stoker.Loader(str(root), batch_size=4, shuffle=True, seed=1, transforms=spec,
                           output="numpy")
    with pytest.raises(stoker.DataError) as e:
        for _ in loader:
            pass
    assert any(("b/%s" % n) in str(e.value) for n in bad_names), str(e.value)

    loader = stoker.Loader(str(root), batch_size=4, shuffle=True, seed=1, transforms=spec,
                           output="numpy", on_error="skip")
    seen = []
    for images, labels, indices in loader.iter_with_indices():
        assert len(images) == len(labels) == len(indices)
        seen += [int(i) for i in indices]
    # ImageFolder order: class a's 12 files, then class b's; the bad ones are
    # b's files with i % 6 in 1..4.
    bad_indices = {12 + i for i in range(12) if i % 6 in (1, 2, 3, 4)}
    assert len(seen) == len(set(seen)) == n_good
    assert set(seen) == set(range(24)) - bad_indices
    assert loader.stats()["skipped"] >= len(bad_indices)


def test_pack_from_python_lists_skips_and_loads(jpeg_folder, tmp_path_factory):
    import os
    tmp_path = tmp_path_factory.mktemp("packed")  # outside the image folder
    open(os.path.join(jpeg_folder, "dog", "zz_truncated.jpg"), "wb").write(b"\xff\xd8\xff\xe0junk")
    out = tmp_path / "shards"
    r = stoker.pack(jpeg_folder, out, shard_size=20000, jobs=2)
    assert r["records"] == 18 and r["skipped"] == 1 and r["shards"] >= 2
    (index, reason), = r["skipped_inputs"]
    assert "zz_truncated.jpg" in reason
    ds = stoker.open(str(out))
    assert len(ds) == 18
    loader = stoker.Loader(str(out), batch_size=6, transforms=[stoker.RandomResizedCrop(16)],
                           output="numpy")
    assert sum(len(labels) for _, labels in loader) == 18
    with pytest.raises(stoker.DataError, match="zz_truncated"):
        stoker.pack(jpeg_folder, tmp_path / "strict", strict=True)
    with pytest.raises(ValueError, match="mode"):
        stoker.pack(jpeg_folder, tmp_path / "x", mode="zip")
    assert r["restarted"] == 0
    # restart=4: the JPEGs rewritten with restart markers; the same pixels,
    # so the same batches as from the byte-for-byte pack.
    r2 = stoker.pack(jpeg_folder, tmp_path / "rst", restart=4)
    assert r2["records"] == 18 and r2["restarted"] > 0

    def batches(path):
        ld = stoker.Loader(str(path), batch_size=6, seed=3, output="numpy",
                           transforms=[stoker.RandomResizedCrop(16)])
        return [x.copy() for x, _ in ld]
    for a, b in zip(batches(out), batches(tmp_path / "rst")):
        assert np.array_equal(a, b)
    with pytest.raises(stoker.StokerError, match="restart"):
        stoker.pack(jpeg_folder, tmp_path / "y", mode="raw", restart=4)
