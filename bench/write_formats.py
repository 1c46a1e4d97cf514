#!/usr/bin/python3
"""Write one image set in every container stoker and NVIDIA DALI read, with independent writers.

The benchmarks that compare readers (bench/formats_vs_dali.py) need the same JPEG bytes, in
the same order, in each format. This script writes them with Python's own libraries, never
stoker's code, so the benchmark also cross-checks the readers:

    tfrecord/   photos-NNNNN.tfrecord (tf.train.Example: image/encoded, image/class/label;
                framing with masked CRC-32C from the crc32c module) + DALI's text index
                photos-NNNNN.idx ("offset size" per record, what tools/tfrecord2idx writes)
    recordio/   photos.rec + photos.idx: MXNet RecordIO (dmlc magic framing, IRHeader
                flag=0, float label, id) as mxnet.recordio.pack_img lays it out
    lmdb/       data.mdb: Caffe Datum {encoded=true, data=JPEG, label}, keys "%08d" (the
                python lmdb module; the Datum class built at run time from a descriptor)
    wds/        photos-NNNNN.tar: WebDataset members KEY.jpg + KEY.cls (tarfile, ustar)
    h5/         photos.h5: /images vlen uint8 (h5py.vlen_dtype), /labels int64
    raw/        raw pixels for the array readers: every image decoded by PIL and resized to
                SIZExSIZE (bilinear): images.npy (N,S,S,3) uint8 + labels.npy; one .npy per
                sample in raw/samples/ (DALI's numpy reader reads a file per sample) with
                raw/samples/labels.txt
    list.txt    the order: "path<TAB>label" lines, sorted by class then name (the order
                `stoker pack` of the image folder uses)

    /usr/bin/python3 bench/write_formats.py --images DIR/train --out WORK [--limit N]
           [--shards 4] [--size 256] [--formats tfrecord,recordio,lmdb,wds,h5,raw]
"""
import argparse
import os
import struct
import sys
import tarfile
import io

import numpy as np

IMG_EXT = (".jpg", ".jpeg", ".png")


def listing(root, limit):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    items = []
    for label, c in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, c))):
            for f in sorted(files):
                if f.lower().endswith(IMG_EXT):
                    items.append((os.path.join(dirpath, f), label))
    items.sort(key=lambda t: (t[1], t[0]))
    return items[:limit] if limit else items


def read(path):
    with open(path, "rb") as f:
        return f.read()


def shards_of(items, n):
    per = (len(items) + n - 1) // n
    return [items[i:i + per] for i in range(0, len(items), per)]


# --- protobuf messages built at run time (no protoc, no generated code) ---------------

def message_classes():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    fd = descriptor_pb2.FileDescriptorProto(name="stoker_bench.proto", package="bench")
    F = descriptor_pb2.FieldDescriptorProto

    def msg(name, fields):
        m = fd.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m
    OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("BytesList", [("value", 1, F.TYPE_BYTES, REP, None)])
    fl = msg("FloatList", [("value", 1, F.TYPE_FLOAT, REP, None)])
    fl.field[0].options.packed = True
    il = msg("Int64List", [("value", 1, F.TYPE_INT64, REP, None)])
    il.field[0].options.packed = True
    feat = msg("Feature", [("bytes_list", 1, F.TYPE_MESSAGE, OPT, ".bench.BytesList"),
                           ("float_list", 2, F.TYPE_MESSAGE, OPT, ".bench.FloatList"),
                           ("int64_list", 3, F.TYPE_MESSAGE, OPT, ".bench.Int64List")])
    feat.oneof_decl.add(name="kind")
    for f in feat.field:
        f.oneof_index = 0
    feats = msg("Features", [("feature", 1, F.TYPE_MESSAGE, REP, ".bench.Features.FeatureEntry")])
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=OPT)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=OPT,
                    type_name=".bench.Feature")
    entry.options.map_entry = True
    msg("Example", [("features", 1, F.TYPE_MESSAGE, OPT, ".bench.Features")])
    msg("Datum", [("channels", 1, F.TYPE_INT32, OPT, None), ("height", 2, F.TYPE_INT32, OPT, None),
                  ("width", 3, F.TYPE_INT32, OPT, None), ("data", 4, F.TYPE_BYTES, OPT, None),
                  ("label", 5, F.TYPE_INT32, OPT, None),
                  ("float_data", 6, F.TYPE_FLOAT, REP, None),
                  ("encoded", 7, F.TYPE_BOOL, OPT, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return {n: get(pool.FindMessageTypeByName("bench." + n)) for n in ("Example", "Datum")}


def write_tfrecord(items, out, nshards):
    import crc32c

    def masked(data):
        c = crc32c.crc32c(data)
        return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
    Example = message_classes()["Example"]
    os.makedirs(out, exist_ok=True)
    for s, part in enumerate(shards_of(items, nshards)):
        base = os.path.join(out, "photos-%05d" % s)
        with open(base + ".tfrecord", "wb") as f, open(base + ".idx", "w") as idx:
            for path, label in part:
                ex = Example()
                ex.features.feature["image/encoded"].bytes_list.value.append(read(path))
                ex.features.feature["image/class/label"].int64_list.value.append(label)
                data = ex.SerializeToString()
                head = struct.pack("<Q", len(data))
                at = f.tell()
                f.write(head + struct.pack("<I", masked(head)) + data +
                        struct.pack("<I", masked(data)))
                idx.write("%d %d\n" % (at, f.tell() - at))


def write_recordio(items, out):
    # dmlc-core recordio: u32 magic, u32 (cflag << 29 | length), data, pad to 4 bytes.
    # mxnet.recordio.pack: IRHeader "IfQQ" (flag, label, id, id2) + payload.
    MAGIC = 0xced7230a
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "photos.rec"), "wb") as f, \
            open(os.path.join(out, "photos.idx"), "w") as idx:
        for i, (path, label) in enumerate(items):
            payload = struct.pack("<IfQQ", 0, float(label), i, 0) + read(path)
            if struct.pack("<I", MAGIC) in payload:
                sys.exit("%s holds the RecordIO magic: would need a split record" % path)
            idx.write("%d\t%d\n" % (i, f.tell()))
            f.write(struct.pack("<II", MAGIC, len(payload)) + payload)
            f.write(b"\0" * ((4 - len(payload) % 4) % 4))


def write_lmdb(items, out):
    import lmdb
    Datum = message_classes()["Datum"]
    os.makedirs(out, exist_ok=True)
    total = sum(os.path.getsize(p) for p, _ in items)
    env = lmdb.open(out, map_size=max(1 << 26, total * 2 + (64 << 20)), subdir=True)
    with env.begin(write=True) as txn:
        for i, (path, label) in enumerate(items):
            d = Datum(channels=3, height=0, width=0, data=read(path), label=label, encoded=True)
            txn.put(b"%08d" % i, d.SerializeToString())
    env.close()


def write_wds(items, out, nshards):
    os.makedirs(out, exist_ok=True)
    i = 0
    for s, part in enumerate(shards_of(items, nshards)):
        with tarfile.open(os.path.join(out, "photos-%05d.tar" % s), "w",
                          format=tarfile.USTAR_FORMAT) as t:
            for path, label in part:
                key = "%08d" % i
                i += 1
                for name, data in ((key + ".jpg", read(path)), (key + ".cls", b"%d" % label)):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(data)
                    ti.mtime = 0
                    t.addfile(ti, io.BytesIO(data))


def write_h5(items, out):
    import h5py
    os.makedirs(out, exist_ok=True)
    with h5py.File(os.path.join(out, "photos.h5"), "w") as f:
        d = f.create_dataset("images", (len(items),), dtype=h5py.vlen_dtype(np.uint8))
        for i, (path, _) in enumerate(items):
            d[i] = np.frombuffer(read(path), dtype=np.uint8)
        f.create_dataset("labels", data=np.array([l for _, l in items], dtype=np.int64))


def write_raw(items, out, size):
    from PIL import Image
    os.makedirs(os.path.join(out, "samples"), exist_ok=True)
    arr = np.empty((len(items), size, size, 3), dtype=np.uint8)
    for i, (path, _) in enumerate(items):
        with Image.open(path) as im:
            arr[i] = np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR))
        np.save(os.path.join(out, "samples", "%08d.npy" % i), arr[i])
    labels = np.array([l for _, l in items], dtype=np.int64)
    np.save(os.path.join(out, "images.npy"), arr)
    np.save(os.path.join(out, "labels.npy"), labels)
    with open(os.path.join(out, "samples", "labels.txt"), "w") as f:
        f.writelines("%d\n" % l for l in labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", required=True, help="ImageFolder root (class directories)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--formats", default="tfrecord,recordio,lmdb,wds,h5,raw")
    a = ap.parse_args()
    items = listing(a.images, a.limit)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "list.txt"), "w") as f:
        f.writelines("%s\t%d\n" % (os.path.abspath(p), l) for p, l in items)
    for fmt in a.formats.split(","):
        dest = os.path.join(a.out, fmt)
        if os.path.exists(os.path.join(dest, "DONE")):
            continue
        print("writing %s (%d images)" % (fmt, len(items)), flush=True)
        {"tfrecord": lambda: write_tfrecord(items, dest, a.shards),
         "recordio": lambda: write_recordio(items, dest),
         "lmdb": lambda: write_lmdb(items, dest),
         "wds": lambda: write_wds(items, dest, a.shards),
         "h5": lambda: write_h5(items, dest),
         "raw": lambda: write_raw(items, dest, a.size)}[fmt]()
        open(os.path.join(dest, "DONE"), "w").close()


if __name__ == "__main__":
    main()
