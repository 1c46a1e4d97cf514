"""Caffe's Datum message (caffe.proto), built at run time from a descriptor
with python3-protobuf: an independent writer for the lmdb: reader's tests
(no generated code, no Caffe)."""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _datum_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="stoker_test_caffe_datum.proto",
                                             package="caffe", syntax="proto2")
    m = fdp.message_type.add(name="Datum")
    for name, number, typ, label in [
            ("channels", 1, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
            ("height", 2, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
            ("width", 3, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
            ("data", 4, _F.TYPE_BYTES, _F.LABEL_OPTIONAL),
            ("label", 5, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
            ("float_data", 6, _F.TYPE_FLOAT, _F.LABEL_REPEATED),
            ("encoded", 7, _F.TYPE_BOOL, _F.LABEL_OPTIONAL)]:
        m.field.add(name=name, number=number, type=typ, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("caffe.Datum")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


Datum = _datum_class()


def raw_datum(chw, label):
    """A raw Datum of a (C, H, W) uint8 array, as Caffe's CVMatToDatum writes it."""
    c, h, w = chw.shape
    return Datum(channels=c, height=h, width=w, data=chw.tobytes(), label=label,
                 encoded=False).SerializeToString()


def encoded_datum(data, label):
    """An encoded Datum: the image file's bytes, as convert_imageset --encoded writes."""
    return Datum(data=data, label=label, encoded=True).SerializeToString()
