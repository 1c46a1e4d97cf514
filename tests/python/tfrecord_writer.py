"""An independent TFRecord writer for the tfrecord: reader's tests.

tf.train.Example is built from a descriptor at run time (google.protobuf's
descriptor_pb2 + message_factory, Debian's python3-protobuf): the messages
of tensorflow/core/example/{example,feature}.proto, serialized by protobuf
itself, not encoded by hand. The framing's CRC-32C comes from Debian's
python3-crc32c, checked at import against a bitwise implementation here
and the published check value (CRC-32C of b"123456789" is 0xe3069283).
"""
import struct

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def _crc32c_bitwise(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


try:
    import crc32c as _crc32c_mod

    def crc32c(data):
        return _crc32c_mod.crc32c(bytes(data))
except ImportError:  # pragma: no cover - the bitwise one is slow but right
    crc32c = _crc32c_bitwise

assert _crc32c_bitwise(b"123456789") == 0xE3069283
assert crc32c(b"123456789") == 0xE3069283
assert crc32c(bytes(range(256)) * 3) == _crc32c_bitwise(bytes(range(256)) * 3)


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _build():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="stoker_test/example.proto",
                                             package="tensorflow", syntax="proto3")

    def msg(name, *fields, oneof=None):
        m = fdp.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, num, ftype, label, type_name, packed, in_oneof in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if packed:
                f.options.packed = True
            if in_oneof:
                f.oneof_index = 0
        return m

    REP, OPT = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", ("value", 1, F.TYPE_BYTES, REP, None, False, False))
    msg("FloatList", ("value", 1, F.TYPE_FLOAT, REP, None, True, False))
    msg("Int64List", ("value", 1, F.TYPE_INT64, REP, None, True, False))
    msg("Feature",
        ("bytes_list", 1, F.TYPE_MESSAGE, OPT, ".tensorflow.BytesList", False, True),
        ("float_list", 2, F.TYPE_MESSAGE, OPT, ".tensorflow.FloatList", False, True),
        ("int64_list", 3, F.TYPE_MESSAGE, OPT, ".tensorflow.Int64List", False, True),
        oneof="kind")
    feats = msg("Features", ("feature", 1, F.TYPE_MESSAGE, REP,
                             ".tensorflow.Features.FeatureEntry", False, False))
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=OPT)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=OPT,
                    type_name=".tensorflow.Feature")
    msg("Example", ("features", 1, F.TYPE_MESSAGE, OPT, ".tensorflow.Features", False, False))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    out = {}
    for name in ("Example", "Feature", "Features", "BytesList", "FloatList", "Int64List"):
        d = pool.FindMessageTypeByName("tensorflow." + name)
        if hasattr(message_factory, "GetMessageClass"):
            out[name] = message_factory.GetMessageClass(d)
        else:
            out[name] = message_factory.MessageFactory(pool).GetPrototype(d)
    return out


CLASSES = _build()
Example = CLASSES["Example"]


def example(features):
    """Serialized tf.train.Example of {key: bytes | [bytes] | int | [int] | float | [float]}."""
    ex = Example()
    for key, v in features.items():
        f = ex.features.feature[key]
        vals = v if isinstance(v, (list, tuple)) else [v]
        if vals and isinstance(vals[0], (bytes, bytearray)):
            f.bytes_list.value.extend(bytes(x) for x in vals)
        elif vals and isinstance(vals[0], float):
            f.float_list.value.extend(vals)
        else:
            f.int64_list.value.extend(int(x) for x in vals)
    return ex.SerializeToString()


def frame(data):
    """One TFRecord record: length, masked CRC of it, data, masked CRC of it."""
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc(n)) + data + struct.pack("<I", masked_crc(data))


def write_tfrecord(path, records):
    """A TFRecord file of `records` (serialized messages); their offsets."""
    offs = []
    with open(path, "wb") as f:
        for r in records:
            offs.append(f.tell())
            f.write(frame(r))
    return offs


def write_dali_index(tfrecord_path, index_path):
    """The index DALI's tools/tfrecord2idx writes: "offset size" per record."""
    with open(tfrecord_path, "rb") as f, open(index_path, "w") as idx:
        while True:
            cur = f.tell()
            n = f.read(8)
            if not n:
                break
            f.read(4)
            (ln,) = struct.unpack("<q", n)
            f.read(ln)
            f.read(4)
            idx.write(str(cur) + " " + str(f.tell() - cur) + "\n")
