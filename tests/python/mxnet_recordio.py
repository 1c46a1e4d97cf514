"""MXNet RecordIO written from its documented layout, independent of stoker's
reader: dmlc-core's framing (include/dmlc/recordio.h: magic 0xced7230a,
lrecord = cflag << 29 | length, data padded to 4 bytes; a record whose data
holds the magic at a 4-aligned position is split there into parts with
cflag 1, 2 ... 3 and the magic dropped) and mxnet/recordio.py's image
records (IRHeader 'IfQQ': flag, label, id, id2; a float32 label vector when
flag > 0; then the encoded image), with the .idx MXIndexedRecordIO writes
("KEY\\tOFFSET" per record)."""
import struct

MAGIC = 0xced7230a
MAGIC_BYTES = struct.pack("<I", MAGIC)


def frames(data):
    """The framed bytes of one record, as dmlc::RecordIOWriter::WriteRecord."""
    out = bytearray()
    start = 0
    for i in range(0, len(data) - len(data) % 4, 4):
        if data[i:i + 4] == MAGIC_BYTES:
            out += struct.pack("<II", MAGIC, (1 if start == 0 else 2) << 29 | (i - start))
            out += data[start:i]
            start = i + 4
    out += struct.pack("<II", MAGIC, (3 if start else 0) << 29 | (len(data) - start))
    out += data[start:]
    out += b"\0" * (-len(data) % 4)
    return bytes(out)


def pack(label, image, id=0, id2=0):
    """mxnet.recordio.pack: a number label in the header (flag 0), or a
    sequence as a float32 vector after it (flag = its length, label 0)."""
    if isinstance(label, (int, float)):
        return struct.pack("<IfQQ", 0, float(label), id, id2) + image
    vec = struct.pack("<%df" % len(label), *label)
    return struct.pack("<IfQQ", len(label), 0.0, id, id2) + vec + image


def write_rec(path, records, idx_path=None, keys=None):
    """Write records (each the bytes pack() made) to path, and the index
    when idx_path is given; returns each record's offset."""
    offsets = []
    with open(path, "wb") as f:
        for rec in records:
            offsets.append(f.tell())
            f.write(frames(rec))
    if idx_path:
        with open(idx_path, "w") as f:
            for i, off in enumerate(offsets):
                f.write("%d\t%d\n" % (keys[i] if keys else i, off))
    return offsets
