#!/usr/bin/python3
"""Regenerate fuzz/corpus/hdf5/ (docs/fuzzing.md): seeds for fuzz/fuzz_hdf5.c.

Each seed is the 24-byte header fuzz_hdf5.c reads (sizeof_addr and
sizeof_lengths selectors, element count, base address, offset of the raw
elements), then a whole file h5py wrote, with the values libhdf5 reports for
it: variable-length uint8 datasets of a few sizes (small objects sharing a
collection, one object bigger than a collection, an empty element, a file
with a user block), and damaged copies (bad signature, bad object index,
an object size past the collection, the file cut short). Deterministic for
a given h5py/libhdf5; the generated files are committed.

    /usr/bin/python3 fuzz/make_hdf5_corpus.py
"""
import os
import struct
import tempfile

import h5py
import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "hdf5")
SEL = {2: 0, 4: 1, 8: 2}


def write(path, blobs, userblock=0):
    kw = {"userblock_size": userblock} if userblock else {}
    with h5py.File(path, "w", **kw) as f:
        d = f.create_dataset("images", (len(blobs),), dtype=h5py.vlen_dtype(np.uint8))
        for i, b in enumerate(blobs):
            d[i] = np.frombuffer(b, np.uint8)
    with h5py.File(path, "r") as f:
        d = f["images"]
        sa, sl = f.id.get_create_plist().get_sizes()
        ub = f.id.get_create_plist().get_userblock()
        return d.id.get_offset(), len(blobs), sa, sl, ub


def seed(name, image, off, n, sa, sl, ub):
    head = struct.pack("<BBHIQQ", SEL[sa], SEL[sl], 0, n, ub, off)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(head + image)


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        if old.startswith("gen-"):
            os.remove(os.path.join(OUT, old))
    rng = np.random.default_rng(3)
    sets = {
        "small": [bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in (1, 7, 8, 9, 100)],
        "big": [bytes(rng.integers(0, 256, 5000, dtype=np.uint8)), b"\xff\xd8\xff"],
        "empty": [b"abc", b"", b"defgh"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, blobs in sets.items():
            p = os.path.join(tmp, name + ".h5")
            meta = write(p, blobs)
            image = open(p, "rb").read()
            seed("gen-%s" % name, image, *meta)
            if name == "small":
                off, n, sa, sl, ub = meta
                # the first collection: where element 0 points
                addr = struct.unpack_from("<Q", image, off + 4)[0] + ub
                bad = bytearray(image)
                bad[addr:addr + 4] = b"GCOX"
                seed("gen-bad-signature", bytes(bad), *meta)
                bad = bytearray(image)
                bad[addr + 16] = 0x77  # object 1's index
                seed("gen-bad-index", bytes(bad), *meta)
                bad = bytearray(image)
                bad[addr + 24:addr + 32] = struct.pack("<Q", 1 << 40)  # object 1's size
                seed("gen-bad-object-size", bytes(bad), *meta)
                bad = bytearray(image)
                bad[addr + 8:addr + 16] = struct.pack("<Q", 1 << 50)  # collection size
                seed("gen-bad-collection-size", bytes(bad), *meta)
                seed("gen-truncated", image[:addr + 40], *meta)
        p = os.path.join(tmp, "ub.h5")
        meta = write(p, sets["small"], userblock=512)
        seed("gen-userblock", open(p, "rb").read(), *meta)


if __name__ == "__main__":
    main()
