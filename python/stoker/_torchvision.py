"""torchvision transform objects, translated into stoker transforms.

A torchvision user ports a training script by handing the pipeline they
already have to ``stoker.Loader(transforms=...)``: a
``torchvision.transforms.Compose``, or a list mixing torchvision objects,
stoker transforms and stage strings. Each torchvision object is read
(its attributes: ``size``, ``scale``, ``ratio``, ``interpolation``, ``p``,
``padding``, ``fill``, ``degrees``, ``brightness``..., ``mean``/``std``)
and rebuilt as the stoker transform of the same name, whose constructor
refuses what stoker cannot do (an interpolation other than bilinear, bicubic
or nearest (RandomRotation, RandomAffine: bilinear or nearest),
``pad_if_needed``, ``max_size``...) with a ValueError naming the argument;
this module adds the name of the torchvision transform to that message.
A transform with no stoker equivalent (``Lambda``, ``ToPILImage``, a
class stoker does not have) is refused by name: nothing is dropped
silently, and nothing runs in Python.

``ToTensor``, ``PILToTensor`` and ``ConvertImageDtype`` choose the output:
float32 scaled to [0, 1] (stoker's ``ToTensor`` marker), uint8, or the
dtype given; the last one of them wins, as in torchvision where each
converts what the previous stages produced. The layout is NCHW either way
(a torchvision tensor is CHW).

torchvision is never imported here: an object is recognised by the module
of its class (``torchvision.transforms...``), so stoker does not need
torchvision installed, and the translation reads only plain attributes.
The mapping is written out for the classes listed in ``_TRANSLATE``; the
ops of the C op table with an argument schema (RandomPosterize,
RandomSolarize, ...) are translated by their argument names, which are
torchvision's; any other stoker class of the same name is built from the
attributes named as its constructor's parameters, and refused when the
torchvision object keeps an argument that the stoker class does not take.
"""
import numbers

from . import transforms as _t

__all__ = ["is_torchvision", "translate"]


def is_torchvision(obj):
    """Whether obj is an instance of a class defined in torchvision.transforms
    (a subclass written elsewhere is not: its behaviour is its own)."""
    mod = getattr(type(obj), "__module__", "") or ""
    return mod == "torchvision.transforms" or mod.startswith("torchvision.transforms.")


class OutputDtype(_t.Transform):
    """A marker for the output element type chosen by a torchvision
    PILToTensor (uint8) or ConvertImageDtype: adds nothing to the spec."""

    def __init__(self, dtype, source):
        self.dtype = dtype
        self.source = source

    def spec(self):
        return ""


def _name(obj):
    return "torchvision.transforms.%s" % type(obj).__name__


def _interp(obj):
    """The interpolation as its name ('bilinear', 'nearest', ...): an
    InterpolationMode's value, or a PIL constant as given."""
    mode = getattr(obj, "interpolation", "bilinear")
    return getattr(mode, "value", mode)


def _perspective(obj):
    """RandomPerspective: the op (a row of the op table) samples bilinearly,
    torchvision's default, and fills every channel with one value; another
    interpolation or a per-channel fill is refused, never dropped."""
    interp = _interp(obj)
    if interp != "bilinear":
        raise ValueError("%s cannot be translated: stoker's perspective interpolates "
                         "bilinearly only (interpolation=%r)" % (_name(obj), interp))
    fill = obj.fill
    values = list(fill) if isinstance(fill, (list, tuple)) else [0 if fill is None else fill]
    if len(set(values)) != 1:
        raise ValueError("%s cannot be translated: stoker's perspective fills every channel "
                         "with one value (fill=%r)" % (_name(obj), fill))
    return _t.RandomPerspective(obj.distortion_scale, obj.p, fill=values[0])


def _jitter(value):
    """ColorJitter keeps None for 'no jitter' and [lo, hi] otherwise."""
    if value is None:
        return 0
    if isinstance(value, numbers.Real):
        return value
    return tuple(value)


def _size(size):
    """torchvision keeps (h, w) tuples (and lists of one for Resize)."""
    if isinstance(size, numbers.Integral):
        return size
    return tuple(size)


def _dtype_name(obj):
    dt = obj.dtype
    name = str(getattr(dt, "name", None) or dt)
    return name[6:] if name.startswith("torch.") else name


def _convert_image_dtype(obj):
    name = _dtype_name(obj)
    if name in ("float32", "float", "float16", "half", "uint8"):
        return OutputDtype({"float": "float32", "half": "float16"}.get(name, name), _name(obj))
    raise ValueError("%s(dtype=%s) is not supported by stoker: the output can be uint8, "
                     "float16 or float32" % (_name(obj), name))


def _policy_fill(o):
    """A policy's fill as stoker takes it: one pixel value (torchvision's
    None is 0; a per-channel list only when its values are all equal)."""
    f = o.fill
    if f is None:
        return 0
    if isinstance(f, (list, tuple)):
        if len(f) == 0 or any(v != f[0] for v in f):
            raise ValueError("%s(fill=%r) is not supported by stoker: one value for every "
                             "channel" % (_name(o), f))
        f = f[0]
    return f


def _policy(o, build):
    """A torchvision augmentation policy: nearest interpolation only (the
    argument is checked, never dropped), then the stoker class."""
    _t._nearest_only(o.interpolation, _name(o))
    return build(o)


# class name -> builder(obj) -> stoker Transform, reading the object's attributes.
_TRANSLATE = {
    "AutoAugment": lambda o: _policy(o, lambda o: _t.AutoAugment(
        o.policy, fill=None if o.fill is None else _policy_fill(o))),
    "RandAugment": lambda o: _policy(o, lambda o: _t.RandAugment(
        o.num_ops, o.magnitude, o.num_magnitude_bins, _policy_fill(o))),
    "TrivialAugmentWide": lambda o: _policy(o, lambda o: _t.TrivialAugmentWide(
        o.num_magnitude_bins, _policy_fill(o))),
    "RandomResizedCrop": lambda o: _t.RandomResizedCrop(
        _size(o.size), scale=tuple(o.scale), ratio=tuple(o.ratio), interpolation=_interp(o),
        antialias=getattr(o, "antialias", None)),
    "Resize": lambda o: _t.Resize(
        _size(o.size), interpolation=_interp(o), max_size=getattr(o, "max_size", None),
        antialias=getattr(o, "antialias", None)),
    "CenterCrop": lambda o: _t.CenterCrop(_size(o.size)),
    "RandomCrop": lambda o: _t.RandomCrop(
        _size(o.size), padding=o.padding, pad_if_needed=o.pad_if_needed, fill=o.fill,
        padding_mode=o.padding_mode),
    "Pad": lambda o: _t.Pad(o.padding, fill=o.fill, padding_mode=o.padding_mode),
    "RandomHorizontalFlip": lambda o: _t.RandomHorizontalFlip(o.p),
    "RandomVerticalFlip": lambda o: _t.RandomVerticalFlip(o.p),
    "ColorJitter": lambda o: _t.ColorJitter(
        brightness=_jitter(o.brightness), contrast=_jitter(o.contrast),
        saturation=_jitter(o.saturation), hue=_jitter(o.hue)),
    "Normalize": lambda o: _t.Normalize(tuple(o.mean), tuple(o.std)),
    "RandomRotation": lambda o: _t.RandomRotation(
        tuple(o.degrees), interpolation=_interp(o), expand=o.expand, center=o.center,
        fill=0 if o.fill is None else o.fill),
    "RandomPerspective": lambda o: _perspective(o),
    "ToTensor": lambda o: _t.ToTensor(),
    "PILToTensor": lambda o: OutputDtype("uint8", _name(o)),
    "ConvertImageDtype": _convert_image_dtype,
}

# Why a transform has no translation, where there is more to say than that.
_WHY = {
    "Lambda": "it runs Python code per sample, and stoker runs the pipeline in native "
              "threads; write the step as a stoker transform or apply it to the batch",
    "ToPILImage": "stoker decodes images itself and never makes PIL images; drop it",
    "RandomChoice": "stoker has no RandomChoice wrapper",
    "RandomOrder": "stoker has no RandomOrder wrapper",
}


def _table_op(obj, cls):
    """An op of the C op table with an argument schema: its arguments, by
    name, are the torchvision object's attributes."""
    kept = [k for k in vars(obj) if not k.startswith("_") and k != "training"]
    extra = [k for k in kept if k not in cls._args]
    if extra:  # none is dropped silently
        raise ValueError("%s cannot be translated: stoker.%s takes no %s argument"
                         % (_name(obj), cls.__name__, ", ".join(repr(k) for k in extra)))
    kwargs = {}
    for arg in cls._args:
        if not hasattr(obj, arg):
            raise ValueError("%s cannot be translated: stoker.%s needs %r, which the "
                             "torchvision object does not have" % (_name(obj), cls.__name__, arg))
        kwargs[arg] = getattr(obj, arg)
    return cls(**kwargs)


def _by_signature(obj, cls):
    """A stoker class of the same name without a translation above: its
    constructor's parameters are read from the object's attributes of the
    same names, and every argument the torchvision object keeps must be one
    of them, so that none is dropped silently."""
    import inspect
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    names = {p.name for p in params}
    kept = [k for k in vars(obj) if not k.startswith("_") and k != "training"]
    extra = [k for k in kept if k not in names]
    if extra:
        raise ValueError("%s cannot be translated: stoker.%s takes no %s argument"
                         % (_name(obj), cls.__name__, ", ".join(repr(k) for k in extra)))
    kwargs = {}
    for p in params:
        if hasattr(obj, p.name):
            v = getattr(obj, p.name)
            kwargs[p.name] = getattr(v, "value", v) if p.name == "interpolation" else v
        elif p.default is p.empty:
            raise ValueError("%s cannot be translated: stoker.%s needs %r, which the "
                             "torchvision object does not have" % (_name(obj), cls.__name__,
                                                                   p.name))
    return cls(**kwargs)


def _one(obj):
    name = type(obj).__name__
    build = _TRANSLATE.get(name)
    if build is None:
        cls = getattr(_t, name, None)
        if isinstance(cls, type) and issubclass(cls, _t._TableOp):
            build = lambda o: _table_op(o, cls)  # noqa: E731
        elif isinstance(cls, type) and issubclass(cls, _t.Transform) and cls.op:
            build = lambda o: _by_signature(o, cls)  # noqa: E731
    if build is None:
        why = _WHY.get(name, "stoker has no transform of that name (the transforms it has are "
                             "listed in docs/python.md)")
        raise ValueError("%s has no stoker equivalent: %s" % (_name(obj), why))
    try:
        return build(obj)
    except AttributeError as e:
        # an object of another torchvision version that keeps other attributes
        raise ValueError("%s cannot be translated: the object has no attribute %r that "
                         "stoker reads (another torchvision version?); write the stoker "
                         "transform instead" % (_name(obj), getattr(e, "name", None) or str(e))
                         ) from None
    except (ValueError, TypeError) as e:
        # The stoker class names the argument; say which torchvision object
        # it was (the same exception, SpecError with its .code included).
        msg = str(e.args[0]) if e.args else str(e)
        if not msg.startswith(_name(obj)):
            e.args = ("%s: %s" % (_name(obj), msg),) + tuple(e.args[1:])
        raise


def translate(items):
    """A list of stoker transforms (and stage strings) for ``items``: a
    torchvision Compose, one torchvision transform, or a sequence mixing
    them with stoker transforms and stage strings. Nested Compose objects
    are flattened."""
    if is_torchvision(items):
        items = [items]
    out = []
    for item in items:
        if is_torchvision(item):
            if type(item).__name__ == "Compose":
                out.extend(translate(list(item.transforms)))
            else:
                out.append(_one(item))
        else:
            out.append(item)
    return out
