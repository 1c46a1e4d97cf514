"""Transforms named and parameterised like torchvision's.

Each transform is a small value object whose ``spec()`` returns its stage of
the pipeline spec language (docs/pipeline.md). ``stoker.Loader`` joins the
stages with ``' | '`` and appends ``to DTYPE LAYOUT``; nothing runs in
Python. Arguments torchvision has but stoker does not support raise
``ValueError`` naming the argument. Values are checked by the C parser only
(``_stoker.spec_validate`` when a transform is made: SpecError with the
parser's message); Python checks types, so that no text can reach the spec.

The classes of the ops whose arguments are a schema of numbers in the C op
table (src/ops/op_table.c: RandomPosterize, RandomSolarize, ...) are not
written here: they are generated at import from ``_stoker.op_table()``, so a
new op of that kind needs no Python edit, and their values are checked by
the C parser only.
"""
import inspect
import numbers
import operator
import re

from . import _stoker


def _num(x, what):
    """A number as the spec language writes it (repr round-trips). Only the
    type is checked here, so that no text can be slipped into the spec; the
    value (range, finiteness) is checked by the C parser."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError("%s must be a number, got %r" % (what, x))
    if float(x).is_integer() and abs(x) < 2 ** 53:
        return str(int(x))
    return repr(float(x))


def _int(x, what):
    """A whole number (type only: the C parser checks the value)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError("%s must be an int, got %r" % (what, x))
    return str(int(x))


def _seq(x, what, kind="an int or a sequence of ints"):
    try:
        return list(x)
    except TypeError:
        raise TypeError("%s must be %s, got %r" % (what, kind, x))


def _size(size, what="size"):
    """torchvision's size: an int (square) or a sequence (h, w) or (s,);
    any other length is written as given and refused by the C parser."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return _int(size, what)
    seq = [_int(v, what) for v in _seq(size, what)]
    return seq[0] if len(seq) == 2 and seq[0] == seq[1] else ",".join(seq)


def _padding(padding):
    """torchvision's padding: N, (N,), (LR, TB) or (L, T, R, B)."""
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        return _int(padding, "padding")
    return ",".join(_int(p, "padding") for p in _seq(padding, "padding"))


def _fill(fill):
    """A pixel value or one per channel (the C parser checks 0-255)."""
    vals = fill if isinstance(fill, (list, tuple)) else [fill]
    return ",".join(_num(v, "fill") for v in vals)


def _mode(padding_mode):
    """The padding mode as one word (the C parser knows the modes)."""
    if not isinstance(padding_mode, str) or not re.fullmatch(r"[A-Za-z_]+", padding_mode):
        raise ValueError("padding_mode must be one word (constant, edge, reflect or "
                         "symmetric), got %r" % (padding_mode,))
    return padding_mode


def _range(values, what):
    """A number or a (min, max) sequence as `min:max` (the C parser checks
    the order and the bounds)."""
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        return _num(values, what)
    return ":".join(_num(v, what) for v in _seq(values, what, "a number or a (min, max) pair"))


def _fill_mode(fill, padding_mode):
    """The ` fill=F` / ` mode=M` arguments of a pad, each written only when
    it is not the default (fill 0, mode 'constant')."""
    s = ""
    if not (isinstance(fill, numbers.Real) and not isinstance(fill, bool) and fill == 0):
        s += " fill=" + _fill(fill)
    if _mode(padding_mode) != "constant":
        s += " mode=" + padding_mode
    return s


def _validate(text):
    """Have the C parser check a spec text (no input shape): SpecError with
    its message (the column, the value and what is accepted)."""
    _stoker.spec_validate(text)
    return text


class Transform:
    """Base class: a stage of the pipeline spec. ``spec()`` is its text.

    ``op`` names the op of the C op table (src/ops/op_table.c) the class
    writes; tests/python/test_op_table.py checks that every op of the table
    has a class here (``to`` is the Loader's dtype/layout, ``decode`` is
    implied by encoded input).
    """

    op = None

    def spec(self):
        """The stage text for the pipeline spec language (docs/pipeline.md)."""
        raise NotImplementedError

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in sorted(vars(self).items())))

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash((type(self).__name__, self.spec()))


class RandomCrop(Transform):
    """Crop at a random place, like ``torchvision.transforms.RandomCrop``.

    ``size`` is an int (square) or (h, w). ``padding`` (int, (lr, tb) or
    (l, t, r, b)) pads first with ``fill`` (a pixel value 0-255, or one per
    channel) in ``padding_mode`` ('constant', 'edge', 'reflect',
    'symmetric'). ``pad_if_needed=True`` is not supported (write a Pad).
    Spec: ``random_crop H[,W] [padding=P fill=F mode=M]``. The values are
    checked by the C parser (SpecError), also ``fill`` and ``padding_mode``
    without ``padding``, where they are unused.
    """

    op = "random_crop"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        if pad_if_needed:
            raise ValueError("RandomCrop(pad_if_needed=True) is not supported by stoker: add an "
                             "explicit Pad(...) before the crop")
        self.size = size
        self.padding = padding
        self.fill = fill
        self.padding_mode = padding_mode
        _validate(self.spec())
        if padding is None and (fill != 0 or padding_mode != "constant"):
            _validate("pad 0" + _fill_mode(fill, padding_mode))  # unused, still checked

    def spec(self):
        s = "random_crop " + _size(self.size)
        if self.padding is not None:
            s += " padding=" + _padding(self.padding) + _fill_mode(self.fill, self.padding_mode)
        return s


class CenterCrop(Transform):
    """Crop the centre, like ``torchvision.transforms.CenterCrop``.

    ``size`` is an int or (h, w); offsets round like torchvision
    (round half to even). A crop larger than the image is an error (add a
    Pad). Spec: ``center_crop H[,W]``.
    """

    op = "center_crop"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, size):
        self.size = size
        _validate(self.spec())

    def spec(self):
        return "center_crop " + _size(self.size)


class Pad(Transform):
    """Pad the borders, like ``torchvision.transforms.Pad``.

    ``padding``: int, (left/right, top/bottom) or (left, top, right, bottom);
    ``fill``: pixel value 0-255 (or one per channel) for 'constant';
    ``padding_mode``: 'constant', 'edge', 'reflect' or 'symmetric'. Must
    come before Normalize. Spec: ``pad P [fill=F] [mode=M]``.
    """

    op = "pad"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, padding, fill=0, padding_mode="constant"):
        self.padding = padding
        self.fill = fill
        self.padding_mode = padding_mode
        _validate(self.spec())

    def spec(self):
        return "pad " + _padding(self.padding) + _fill_mode(self.fill, self.padding_mode)


class RandomHorizontalFlip(Transform):
    """Flip left-right with probability ``p``, like torchvision's. Spec: ``flip P``."""

    op = "flip"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, p=0.5):
        self.p = p
        _validate(self.spec())

    def spec(self):
        return "flip " + _num(self.p, "p")


class RandomVerticalFlip(Transform):
    """Flip top-bottom with probability ``p``, like torchvision's. Spec: ``vflip P``."""

    op = "vflip"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, p=0.5):
        self.p = p
        _validate(self.spec())

    def spec(self):
        return "vflip " + _num(self.p, "p")


def _interpolation(interpolation, antialias, what, bicubic=True):
    """'bilinear', 'bicubic' (Pillow's antialiased filters) or 'nearest'
    (Pillow's) from torchvision's InterpolationMode, its value or PIL's
    constant (2, 3, 0)."""
    name = str(getattr(interpolation, "value", interpolation)).lower()
    name = {"2": "bilinear", "interpolationmode.bilinear": "bilinear",
            "3": "bicubic", "interpolationmode.bicubic": "bicubic",
            "0": "nearest", "interpolationmode.nearest": "nearest"}.get(name, name)
    if name not in (("bilinear", "bicubic", "nearest") if bicubic else ("bilinear",)):
        raise ValueError("%s(interpolation=%r) is not supported by stoker: only %s "
                         "(Pillow's resize)"
                         % (what, interpolation,
                            "bilinear, bicubic or nearest" if bicubic else "bilinear"))
    if antialias is False:
        raise ValueError("%s(antialias=False) is not supported: stoker always antialiases, "
                         "as torchvision does for PIL images" % what)
    return name


def _bilinear_only(interpolation, antialias, what):
    _interpolation(interpolation, antialias, what, bicubic=False)


def _interp_arg(name):
    """The spec's ` interpolation=...`, written only when not the default."""
    return "" if name == "bilinear" else " interpolation=" + name


class RandomResizedCrop(Transform):
    """Crop a random area and aspect, then resize, like torchvision's
    ``RandomResizedCrop`` (same sampling procedure: up to 10 attempts, then
    the central fallback; Pillow's antialiased bilinear or bicubic resize).
    Spec: ``random_resized_crop H[,W] scale=LO:HI ratio=LO:HI
    [interpolation=bicubic]``.
    """

    op = "random_resized_crop"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation="bilinear", antialias=None):
        self.interpolation = _interpolation(interpolation, antialias, "RandomResizedCrop")
        self.size = size
        self.scale = tuple(_seq(scale, "scale", "a (min, max) pair"))
        self.ratio = tuple(_seq(ratio, "ratio", "a (min, max) pair"))
        _validate(self.spec())

    def spec(self):
        return "random_resized_crop %s scale=%s ratio=%s%s" % (
            _size(self.size), _range(self.scale, "scale"), _range(self.ratio, "ratio"),
            _interp_arg(self.interpolation))


class Resize(Transform):
    """Resize like torchvision's ``Resize``: an int (or ``(s,)``) scales the
    shorter side (the longer one truncated as torchvision computes it),
    (h, w) gives exactly that size — written ``resize H,W`` even when h == w,
    since ``resize S`` means the shorter side; Pillow's antialiased
    bilinear or bicubic (``interpolation=``). ``max_size`` is not supported.
    """

    op = "resize"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, size, interpolation="bilinear", max_size=None, antialias=None):
        self.interpolation = _interpolation(interpolation, antialias, "Resize")
        if max_size is not None:
            raise ValueError("Resize(max_size=...) is not supported by stoker")
        if isinstance(size, numbers.Integral) and not isinstance(size, bool):
            self.size = size
        else:
            seq = _seq(size, "size")
            self.size = seq[0] if len(seq) == 1 else tuple(seq)
        _validate(self.spec())

    def spec(self):
        if isinstance(self.size, numbers.Integral) and not isinstance(self.size, bool):
            return "resize " + _int(self.size, "size") + _interp_arg(self.interpolation)
        # Always every number: "resize S" would mean the shorter side, so a
        # square (S, S) must stay "resize S,S" (exactly S x S).
        return "resize " + ",".join(_int(v, "size") for v in _seq(self.size, "size")) + \
            _interp_arg(self.interpolation)


class RandomRotation(Transform):
    """Rotate by a random angle, like torchvision's ``RandomRotation``,
    expand=False, rotation about the centre; ``fill`` is a pixel value 0-255
    (or one per channel). ``interpolation``: 'bilinear' (stoker's default;
    spec ``rotate D [fill=F]``) or 'nearest' (torchvision's default, so a
    torchvision ``RandomRotation(10)`` passed as it is works): ``F.rotate``
    with nearest is ``F.affine`` with the angle negated and nothing else
    drawn, so it runs as the ``affine`` op (spec ``affine -HI:-LO
    [fill=F]``), which matches torchvision value for value.
    """

    op = "rotate"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, degrees, interpolation="bilinear", expand=False, center=None, fill=0):
        name = str(getattr(interpolation, "value", interpolation)).lower()
        name = {"2": "bilinear", "interpolationmode.bilinear": "bilinear",
                "0": "nearest", "interpolationmode.nearest": "nearest"}.get(name, name)
        if name not in ("bilinear", "nearest"):
            raise ValueError("RandomRotation(interpolation=%r) is not supported: pass "
                             "interpolation=InterpolationMode.BILINEAR or "
                             "InterpolationMode.NEAREST" % (interpolation,))
        if expand:
            raise ValueError("RandomRotation(expand=True) is not supported (fixed output size)")
        if center is not None:
            raise ValueError("RandomRotation(center=...) is not supported (rotates about the "
                             "image centre)")
        self.degrees = degrees
        self.interpolation = name
        self.fill = fill
        _validate(self.spec())

    def spec(self):
        if self.interpolation == "bilinear":
            return "rotate " + _range(self.degrees, "degrees") + _fill_mode(self.fill,
                                                                            "constant")
        # Nearest: affine, whose angle turns the other way (F.rotate passes
        # -angle to the same inverse matrix F.affine builds).
        if isinstance(self.degrees, numbers.Real) and not isinstance(self.degrees, bool):
            degrees = _range(self.degrees, "degrees")  # -D:D is its own negation
        else:
            seq = _seq(self.degrees, "degrees", "a number or a (min, max) pair")
            degrees = ":".join(_num(-v, "degrees") for v in seq[::-1])
        return "affine " + degrees + _fill_mode(self.fill, "constant")


def _nearest_only(interpolation, what):
    """The policies run torchvision's default, nearest interpolation."""
    name = getattr(interpolation, "value", interpolation)
    if not isinstance(name, str) or name.lower() != "nearest":
        raise ValueError("%s(interpolation=%r) is not supported (nearest only, torchvision's "
                         "default)" % (what, interpolation))


class AutoAugment(Transform):
    """torchvision's ``AutoAugment`` (policy ``AutoAugmentPolicy.IMAGENET``, the
    default, ``CIFAR10`` or ``SVHN``, or their names): per sample one of the
    policy's 25 sub-policies, each of whose two ops applies with its
    probability, on the uint8 image after the crops, resize and flips;
    nearest interpolation; ``fill`` is one pixel value 0-255 for the area
    the geometric ops bring in (torchvision's ``fill=None`` is 0).
    Spec: ``auto_augment POLICY [fill=V]``. RandAugment and
    TrivialAugmentWide are generated from the op table."""

    op = "auto_augment"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, policy="imagenet", interpolation="nearest", fill=None):
        name = getattr(policy, "value", policy)
        if not isinstance(name, str) or name.lower() not in ("imagenet", "cifar10", "svhn"):
            raise ValueError("AutoAugment(policy=%r) is not supported (IMAGENET, CIFAR10 or "
                             "SVHN)" % (policy,))
        _nearest_only(interpolation, "AutoAugment")
        self.policy = name.lower()
        self.fill = fill
        _validate(self.spec())

    def spec(self):
        s = "auto_augment " + self.policy
        if self.fill is not None:
            s += " fill=" + _num(self.fill, "fill")
        return s


class RandomAffine(Transform):
    """torchvision's ``RandomAffine`` (angle, translation, scale, shear drawn
    per sample as its get_params does) on the float image, computed as
    ``F.affine`` on a tensor; nearest (torchvision's default) or bilinear
    interpolation; ``fill`` is a pixel value 0-255 (or one per channel);
    rotation about the image centre. Spec: ``affine D [translate=TX,TY]
    [scale=LO:HI] [shear=...] [interpolation=...] [fill=F]``."""

    op = "affine"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, degrees, translate=None, scale=None, shear=None,
                 interpolation="nearest", fill=0, center=None):
        name = getattr(interpolation, "value", interpolation)
        if not isinstance(name, str) or name.lower() not in ("nearest", "bilinear"):
            raise ValueError("RandomAffine(interpolation=%r) is not supported (nearest or "
                             "bilinear)" % (interpolation,))
        if center is not None:
            raise ValueError("RandomAffine(center=...) is not supported (about the image "
                             "centre)")
        self.degrees = degrees
        self.translate = translate
        self.scale = scale
        self.shear = shear
        self.interpolation = name.lower()
        self.fill = fill
        _validate(self.spec())

    def spec(self):
        s = "affine " + _range(self.degrees, "degrees")
        if self.translate is not None:
            s += " translate=" + ",".join(_num(v, "translate")
                                         for v in _seq(self.translate, "translate", "a pair"))
        if self.scale is not None:
            s += " scale=" + ":".join(_num(v, "scale")
                                      for v in _seq(self.scale, "scale", "a pair"))
        if self.shear is not None:
            if isinstance(self.shear, numbers.Real):
                s += " shear=" + _num(self.shear, "shear")
            else:
                s += " shear=" + ",".join(_num(v, "shear")
                                          for v in _seq(self.shear, "shear", "a sequence"))
        if self.interpolation != "nearest":
            s += " interpolation=" + self.interpolation
        return s + _fill_mode(self.fill, "constant")


class RandomIoUCrop(Transform):
    """torchvision.transforms.v2's ``RandomIoUCrop`` (SSD's detection crop;
    DALI's ``RandomBBoxCrop``) on the sample's boxes: a crop with some box
    whose centre lies inside it and an IoU with it of at least a drawn
    threshold; boxes whose centre is outside are dropped, the others
    cropped. The first geometric transform; a resize to a fixed size must
    follow (``Loader(fields=[..., "boxes", ...])`` gives it the boxes).
    Spec: ``random_bbox_crop [thresholds=T,...] [scale=LO:HI]
    [ratio=LO:HI] [trials=N]``."""

    op = "random_bbox_crop"

    def __init__(self, min_scale=0.3, max_scale=1.0, min_aspect_ratio=0.5,
                 max_aspect_ratio=2.0, sampler_options=None, trials=40):
        self.scale = (min_scale, max_scale)
        self.ratio = (min_aspect_ratio, max_aspect_ratio)
        self.sampler_options = (list(sampler_options) if sampler_options is not None
                                else [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
        self.trials = trials
        _validate(self.spec())

    def spec(self):
        return ("random_bbox_crop thresholds=" +
                ",".join(_num(v, "sampler_options") for v in self.sampler_options) +
                " scale=%s:%s" % (_num(self.scale[0], "min_scale"), _num(self.scale[1], "max_scale")) +
                " ratio=%s:%s" % (_num(self.ratio[0], "min_aspect_ratio"),
                                  _num(self.ratio[1], "max_aspect_ratio")) +
                " trials=%d" % operator.index(self.trials))


class ColorJitter(Transform):
    """Random brightness, contrast, saturation and hue in a random order,
    like torchvision's ``ColorJitter`` on float tensors. Each argument is a
    number x (drawn from [max(0, 1-x), 1+x], hue from [-x, x]) or a
    (min, max) pair. Spec: ``color_jitter brightness=B contrast=C ...``.
    """

    op = "color_jitter"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.hue = hue
        _validate(self.spec())

    def spec(self):
        return "color_jitter " + " ".join(
            "%s=%s" % (name, _range(getattr(self, name), name))
            for name in ("brightness", "contrast", "saturation", "hue"))


class Normalize(Transform):
    """``(v / 255 - mean[c]) / std[c]``: ToTensor then torchvision's Normalize.

    ``mean`` and ``std`` are sequences of one value or one per channel
    (every std > 0), in 0-1 units; ``scale=255`` takes them in 0-255 units
    (DALI's ``mean=[123.675, ...]``). A mean or std above 1 without
    ``scale=255`` is refused (SpecError: "these look like 0-255 values"),
    never silently applied. ``inplace`` is accepted and has no effect (the
    output is written once). Spec: ``normalize mean=M std=S [scale=255]``.
    """

    op = "normalize"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, mean, std, inplace=False, scale=None):
        self.mean = tuple(mean) if not isinstance(mean, numbers.Real) else (mean,)
        self.std = tuple(std) if not isinstance(std, numbers.Real) else (std,)
        self.scale = scale
        _validate(self.spec())

    def spec(self):
        text = "normalize mean=%s std=%s" % (",".join(_num(m, "mean") for m in self.mean),
                                             ",".join(_num(s, "std") for s in self.std))
        return text if self.scale is None else text + " scale=" + _num(self.scale, "scale")


class GaussianBlur(Transform):
    """Blur with a Gaussian kernel whose sigma is drawn per sample, like
    torchvision's ``GaussianBlur`` on a float tensor. ``kernel_size`` is an
    odd int or (kx, ky) — width, then height, torchvision's order; ``sigma``
    a number or a (min, max) range. Spec: ``gaussian_blur KX,KY sigma=LO:HI``.
    """

    op = "gaussian_blur"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        self.kernel_size = kernel_size
        self.sigma = sigma
        _validate(self.spec())

    def spec(self):
        if isinstance(self.kernel_size, numbers.Integral) and not isinstance(self.kernel_size,
                                                                              bool):
            ks = _int(self.kernel_size, "kernel_size")
        else:
            ks = ",".join(_int(v, "kernel_size") for v in _seq(self.kernel_size, "kernel_size"))
        return "gaussian_blur %s sigma=%s" % (ks, _range(self.sigma, "sigma"))


class RandomErasing(Transform):
    """Erase a random rectangle of the finished tensor, like torchvision's
    ``RandomErasing`` placed after Normalize (same get_params procedure).
    ``value`` is a number or one per channel, in the tensor's units, or
    ``'random'`` (standard normal noise per element, drawn from the sample's
    stream: torch's distribution, not its numbers). ``inplace`` has no
    effect. It must
    be the last transform. Spec: ``random_erasing p=P scale=LO:HI
    ratio=LO:HI value=V``.
    """

    op = "random_erasing"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        if isinstance(value, str) and value != "random":
            raise ValueError("RandomErasing(value=%r): give a number, one per channel or "
                             "'random'" % (value,))
        self.p = p
        self.scale = tuple(_seq(scale, "scale", "a (min, max) pair"))
        self.ratio = tuple(_seq(ratio, "ratio", "a (min, max) pair"))
        self.value = tuple(value) if isinstance(value, (list, tuple)) else value
        _validate(self.spec())

    def spec(self):
        vals = self.value if isinstance(self.value, tuple) else (self.value,)
        return "random_erasing p=%s scale=%s ratio=%s value=%s" % (
            _num(self.p, "p"), _range(self.scale, "scale"), _range(self.ratio, "ratio"),
            "random" if self.value == "random" else ",".join(_num(v, "value") for v in vals))


class RandomApply(Transform):
    """Apply a list of transforms together with probability ``p``, like
    torchvision's ``RandomApply`` (one draw per sample; the transforms draw
    only when applied). They may be the float-tensor transforms after the
    crops and resize: ColorJitter, RandomRotation, RandomGrayscale,
    GaussianBlur, flips, the point ops. Spec: ``random_apply p=P n=N``
    followed by the N stages.
    """

    op = "random_apply"  # its op in the op table (src/ops/op_table.c)

    def __init__(self, transforms, p=0.5):
        if isinstance(transforms, (str, Transform)):
            raise TypeError("RandomApply takes a list of transforms, got %r" % (transforms,))
        self.transforms = list(transforms)
        self.p = p
        _validate(self.spec())

    def spec(self):
        stages = [s for s in (to_spec([t]) for t in self.transforms) if s]
        if not stages:  # torchvision's RandomApply([]) changes nothing
            return ""
        return " | ".join(["random_apply p=%s n=%d" % (_num(self.p, "p"), len(stages))] + stages)

    def __hash__(self):
        return hash((type(self).__name__, self.spec()))


def _text(x, what):
    """A number as spec text. Only the type is checked here (so no text can
    be slipped into the spec); the C parser checks the value."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError("%s must be a number, got %r" % (what, x))
    if isinstance(x, numbers.Integral):
        return str(int(x))
    return repr(float(x))


class _TableOp(Transform):
    """A transform generated from a row of the C op table that has an
    argument schema (see ``_generate`` below): ``spec()`` writes ``op
    name=value ...`` for the names in ``_args``, and the constructor has the
    C parser check the values (stoker.SpecError names the argument and the
    accepted range). Python checks nothing but that each value is a number."""

    _args = ()

    def spec(self):
        return " ".join([self.op] + ["%s=%s" % (a, _text(getattr(self, a), a)) for a in self._args])

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % (a, getattr(self, a)) for a in self._args))


def _generate(op, aliases, usage, torchvision, params):
    """The class of a schema op of the C op table: named as torchvision's
    (``torchvision``), taking the params in order, positional or by name,
    with the table's defaults (``stk_op_describe``)."""
    P = inspect.Parameter
    sig = [P(name, P.POSITIONAL_OR_KEYWORD,
             default=P.empty if required else (int(dflt) if whole else dflt))
           for name, whole, required, lo, hi, dflt in params]
    signature = inspect.Signature(sig)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # TypeError as Python's own
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            setattr(self, name, value)
        _validate(self.spec())

    __init__.__signature__ = inspect.Signature(
        [P("self", P.POSITIONAL_OR_KEYWORD)] + sig)
    __init__.__qualname__ = torchvision + ".__init__"
    ranges = "; ".join(
        "%s: %s from %s to %s%s" % (name, "a whole number" if whole else "a number",
                                   _num(lo, name), _num(hi, name),
                                   "" if required else ", default %s" % _num(dflt, name))
        for name, whole, required, lo, hi, dflt in params)
    doc = ("Like ``torchvision.transforms.%s``: the op ``%s %s`` of the pipeline spec "
           "(docs/pipeline.md). Generated from the C op table; the C parser checks the "
           "values (%s)." % (torchvision, op, usage, ranges))
    return type(torchvision, (_TableOp,), {
        "__init__": __init__, "__doc__": doc, "__module__": __name__,
        "__qualname__": torchvision, "op": op,
        "_args": tuple(p[0] for p in params)})


# One class per op of the table that has an argument schema and names the
# torchvision class it mirrors (RandomPosterize, RandomSolarize, ...): a new
# such op needs no edit here.
for _row in _stoker.op_table():
    if _row[3] and _row[4] is not None:
        if _row[3] in globals():
            raise ImportError("stoker.transforms: op %r's class %s is also written by hand"
                              % (_row[0], _row[3]))
        globals()[_row[3]] = _generate(*_row)
del _row


class ToTensor(Transform):
    """A marker, like ``torchvision.transforms.ToTensor``: float output scaled to [0, 1].

    stoker always scales float output by 1/255 (Normalize includes it), so
    this stage adds nothing to the spec; it only forbids ``dtype='uint8'``.
    """

    def __init__(self):
        pass

    def spec(self):
        return ""


def to_spec(transforms):
    """Join transforms (Transform objects, torchvision transforms or a
    torchvision Compose, translated by stoker._torchvision, or raw stage
    strings) with ' | '."""
    from ._torchvision import translate  # torchvision objects -> stoker transforms
    stages = []
    for t in translate(transforms):
        if isinstance(t, str):
            s = t.strip()
        elif isinstance(t, Transform):
            s = t.spec()
        else:
            raise TypeError("transforms must be stoker transforms, torchvision transforms or "
                            "spec strings, got %r" % (t,))
        if s:
            stages.append(s)
    return " | ".join(stages)


# Every class that writes an op of the table, then the helpers.
__all__ = [_n for _n, _c in list(globals().items())
           if isinstance(_c, type) and issubclass(_c, Transform) and _c.op] + [
    "Transform", "ToTensor", "to_spec"]

for _cls in (RandomCrop, CenterCrop, Pad, RandomHorizontalFlip, RandomVerticalFlip, Normalize,
             ToTensor):
    if not _cls.spec.__doc__:
        _cls.spec.__doc__ = Transform.spec.__doc__
del _cls
