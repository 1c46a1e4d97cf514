"""stoker.Mixup: batch-level Mixup and CutMix with soft labels, as timm's
``timm.data.Mixup`` defines them, applied by the Python layer to each
delivered batch (``Loader(..., batch_transform=stoker.Mixup(...))``).

Why here and not in the C pipeline: Mixup and CutMix combine two samples
of one batch (row i with row B-1-i, timm's ``x.flip(0)``), so they are not
a per-sample op of the spec; the batch exists only when the consumer takes
it. The pixel work is vectorised (torch ops on torch output, NumPy ops on
NumPy output, in place in the delivered batch buffer); the only Python loop
is over the samples of one batch when drawing 'elem'/'pair' boxes.

Draws. Every random number of a batch comes from one
``numpy.random.Generator(numpy.random.Philox(key=K, counter=C))`` with
``K = [aug_seed mod 2**64, 0x6d69787570]`` ("mixup") and
``C = [0, position, epoch, rank]``: a pure function of (aug_seed, epoch,
batch position, rank), never of thread count, prefetch or history, so a
resumed Loader draws the same parameters. The draws follow timm's order
(docs/python.md, "Mixup and CutMix"): 'batch' mode: u = random() < prob;
then (both alphas > 0) random() < switch_prob picks CutMix; lam =
beta(alpha, alpha) of the chosen kind; a CutMix box then takes cy =
integers(0, H), cx = integers(0, W) (timm's rand_bbox) or, with
cutmix_minmax, cut_h, cut_w, yl, xl (timm's rand_bbox_minmax). 'elem' and
'pair' draw the same per sample as timm's _params_per_elem (vectors), then
the boxes sample by sample.

Arithmetic. Mixup is ``x * f32(lam) + flip(x) * f32(1 - lam)`` evaluated
in float32 (float16/bfloat16 batches are widened, mixed, and rounded once
to nearest-even); CutMix copies the box from the flipped batch. Soft labels
are float32 ``y1 * f32(lam) + y2 * f32(1 - lam)`` with timm's smoothed
one-hot (off = smoothing / num_classes, on = 1 - smoothing + off).
"""
import math
import operator

__all__ = ["Mixup"]

_DOMAIN = 0x6D69787570  # "mixup": the Philox key's second word
_MODES = ("batch", "pair", "elem")


def _float(name, v, lo=None, hi=None, lo_open=False):
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise TypeError("Mixup: %s must be a number, got %r" % (name, v)) from None
    if math.isnan(f) or math.isinf(f):
        raise ValueError("Mixup: %s must be finite, got %r" % (name, v))
    if lo is not None and (f < lo or (lo_open and f == lo)):
        raise ValueError("Mixup: %s must be %s %g, got %r" % (name, ">" if lo_open else ">=", lo, v))
    if hi is not None and f > hi:
        raise ValueError("Mixup: %s must be <= %g, got %r" % (name, hi, v))
    return f


class MixParams:
    """The drawn parameters of one batch (``Mixup.params``, ``Mixup.last_params``).

    ``lam``: float64 array of the batch's rows (its label weight after the
    CutMix area correction; 1.0 = row unchanged); ``cutmix``: bool array,
    rows mixed by a box; ``boxes``: int array (rows, 4) of (yl, yh, xl, xh),
    the half-open box copied from row B-1-i (zeros where not CutMix);
    ``mode``, ``batch_size``, ``height``, ``width``, ``seed``, ``epoch``,
    ``position``, ``rank``."""

    __slots__ = ("mode", "batch_size", "height", "width", "seed", "epoch", "position", "rank",
                 "lam", "cutmix", "boxes")

    def __repr__(self):
        return ("<MixParams %s B=%d %dx%d epoch=%d position=%d lam=%s cutmix=%s>"
                % (self.mode, self.batch_size, self.height, self.width, self.epoch,
                   self.position, self.lam.tolist(), self.cutmix.tolist()))


class Mixup:
    """Batch-level Mixup / CutMix with label smoothing, as ``timm.data.Mixup``.

    ``stoker.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=1000)``
    given as ``Loader(..., batch_transform=...)``: each batch is yielded as
    ``(mixed images, soft labels)``, soft labels float32 ``(B, num_classes)``.
    Arguments as timm's: ``mixup_alpha``, ``cutmix_alpha`` (Beta parameters;
    0 disables that kind), ``cutmix_minmax`` (min/max box side ratio; forces
    cutmix_alpha 1.0 as timm), ``prob`` (of mixing a batch/sample),
    ``switch_prob`` (CutMix instead of Mixup when both are on), ``mode``
    ('batch': one lam per batch; 'pair': per pair i, B-1-i; 'elem': per
    sample), ``correct_lam`` (lam from the clipped box area),
    ``label_smoothing``, ``num_classes``. ``mixup_enabled`` (attribute) =
    False turns mixing off (smoothed one-hot labels only), as in timm.
    """

    def __init__(self, mixup_alpha=1.0, cutmix_alpha=0.0, cutmix_minmax=None, prob=1.0,
                 switch_prob=0.5, mode="batch", correct_lam=True, label_smoothing=0.1,
                 num_classes=1000):
        self.mixup_alpha = _float("mixup_alpha", mixup_alpha, 0.0)
        self.cutmix_alpha = _float("cutmix_alpha", cutmix_alpha, 0.0)
        if cutmix_minmax is not None:
            try:
                lo, hi = cutmix_minmax
            except (TypeError, ValueError):
                raise ValueError("Mixup: cutmix_minmax must be a pair (min, max), got %r"
                                 % (cutmix_minmax,)) from None
            lo = _float("cutmix_minmax[0]", lo, 0.0, 1.0, lo_open=True)
            hi = _float("cutmix_minmax[1]", hi, 0.0, 1.0, lo_open=True)
            if lo >= hi:
                raise ValueError("Mixup: cutmix_minmax must have min < max, got %r"
                                 % (cutmix_minmax,))
            cutmix_minmax = (lo, hi)
            self.cutmix_alpha = 1.0  # as timm: minmax forces cutmix_alpha 1.0
        self.cutmix_minmax = cutmix_minmax
        if self.mixup_alpha == 0.0 and self.cutmix_alpha == 0.0:
            raise ValueError("Mixup: mixup_alpha or cutmix_alpha must be > 0 "
                             "(or cutmix_minmax given), got both 0")
        self.mix_prob = _float("prob", prob, 0.0, 1.0)
        self.switch_prob = _float("switch_prob", switch_prob, 0.0, 1.0)
        if mode not in _MODES:
            raise ValueError("Mixup: mode must be 'batch', 'pair' or 'elem', got %r" % (mode,))
        self.mode = mode
        self.correct_lam = bool(correct_lam)
        self.label_smoothing = _float("label_smoothing", label_smoothing, 0.0, 1.0)
        try:
            self.num_classes = operator.index(num_classes)
        except TypeError:
            raise TypeError("Mixup: num_classes must be an int, got %r" % (num_classes,)) from None
        if self.num_classes < 1:
            raise ValueError("Mixup: num_classes must be >= 1, got %d" % self.num_classes)
        self.mixup_enabled = True
        self.last_params = None

    def __repr__(self):
        return ("Mixup(mixup_alpha=%r, cutmix_alpha=%r, cutmix_minmax=%r, prob=%r, "
                "switch_prob=%r, mode=%r, correct_lam=%r, label_smoothing=%r, num_classes=%r)"
                % (self.mixup_alpha, self.cutmix_alpha, self.cutmix_minmax, self.mix_prob,
                   self.switch_prob, self.mode, self.correct_lam, self.label_smoothing,
                   self.num_classes))

    # -- draws ------------------------------------------------------------

    @staticmethod
    def generator(seed, epoch, position, rank=0):
        """The numpy Generator every draw of batch (epoch, position) comes from."""
        import numpy as np
        seed = operator.index(seed) & 0xFFFFFFFFFFFFFFFF
        bits = np.random.Philox(key=np.array([seed, _DOMAIN], dtype=np.uint64),
                                counter=np.array([0, operator.index(position),
                                                  operator.index(epoch),
                                                  operator.index(rank)], dtype=np.uint64))
        return np.random.Generator(bits)

    def _box(self, g, h, w, lam):
        """timm's cutmix_bbox_and_lam for one box: ((yl, yh, xl, xh), lam)."""
        if self.cutmix_minmax is not None:
            lo, hi = self.cutmix_minmax
            for side, n in (("height", h), ("width", w)):
                if int(n * lo) >= int(n * hi):
                    raise ValueError("Mixup: cutmix_minmax %r leaves no box size for an image "
                                     "%s of %d" % (self.cutmix_minmax, side, n))
            cut_h = int(g.integers(int(h * lo), int(h * hi)))
            cut_w = int(g.integers(int(w * lo), int(w * hi)))
            yl = int(g.integers(0, h - cut_h))
            xl = int(g.integers(0, w - cut_w))
            yh, xh = yl + cut_h, xl + cut_w
        else:
            ratio = math.sqrt(1.0 - lam)
            cut_h, cut_w = int(h * ratio), int(w * ratio)
            cy = int(g.integers(0, h))
            cx = int(g.integers(0, w))
            yl = min(max(cy - cut_h // 2, 0), h)
            yh = min(max(cy + cut_h // 2, 0), h)
            xl = min(max(cx - cut_w // 2, 0), w)
            xh = min(max(cx + cut_w // 2, 0), w)
        if self.correct_lam or self.cutmix_minmax is not None:
            lam = 1.0 - (yh - yl) * (xh - xl) / float(h * w)
        return (yl, yh, xl, xh), lam

    def params(self, batch_size, height, width, seed=0, epoch=0, position=0, rank=0):
        """The parameters drawn for batch ``position`` of ``epoch`` (a
        :class:`MixParams`): a pure function of the arguments and the
        Mixup's settings (and ``mixup_enabled``)."""
        import numpy as np
        b = operator.index(batch_size)
        h, w = operator.index(height), operator.index(width)
        g = self.generator(seed, epoch, position, rank)
        lam = np.ones(b, dtype=np.float64)
        cut = np.zeros(b, dtype=bool)
        boxes = np.zeros((b, 4), dtype=np.int64)
        both = self.mixup_alpha > 0.0 and self.cutmix_alpha > 0.0
        if self.mode == "batch":
            if self.mixup_enabled and g.random() < self.mix_prob:
                if both:
                    use_cut = bool(g.random() < self.switch_prob)
                else:
                    use_cut = self.mixup_alpha == 0.0
                a = self.cutmix_alpha if use_cut else self.mixup_alpha
                lam_b = float(g.beta(a, a))
                if use_cut and lam_b != 1.0:
                    box, lam_b = self._box(g, h, w, lam_b)
                    cut[:] = True
                    boxes[:] = box
                lam[:] = lam_b
        else:
            n = b // 2 if self.mode == "pair" else b
            lam_n = np.ones(n, dtype=np.float32)
            cut_n = np.zeros(n, dtype=bool)
            if self.mixup_enabled:
                if both:
                    cut_n = g.random(n) < self.switch_prob
                    lam_mix = np.where(cut_n, g.beta(self.cutmix_alpha, self.cutmix_alpha, n),
                                       g.beta(self.mixup_alpha, self.mixup_alpha, n))
                elif self.mixup_alpha > 0.0:
                    lam_mix = g.beta(self.mixup_alpha, self.mixup_alpha, n)
                else:
                    cut_n = np.ones(n, dtype=bool)
                    lam_mix = g.beta(self.cutmix_alpha, self.cutmix_alpha, n)
                lam_n = np.where(g.random(n) < self.mix_prob, lam_mix.astype(np.float32), lam_n)
            lam_n = lam_n.astype(np.float64)  # timm's float32 lam, exactly
            cut_n = cut_n & (lam_n != 1.0)
            box_n = np.zeros((n, 4), dtype=np.int64)
            for i in np.flatnonzero(cut_n):  # per-sample parameters only
                box_n[i], lam_n[i] = self._box(g, h, w, float(lam_n[i]))
            if self.mode == "elem":
                lam, cut, boxes = lam_n, cut_n, box_n
            else:  # pair i, B-1-i share lam and box; an odd middle row is not mixed
                mid = b - 2 * n
                lam = np.concatenate([lam_n, np.ones(mid), lam_n[::-1]])
                cut = np.concatenate([cut_n, np.zeros(mid, dtype=bool), cut_n[::-1]])
                boxes = np.concatenate([box_n, np.zeros((mid, 4), dtype=np.int64),
                                        box_n[::-1]])
        p = MixParams()
        p.mode, p.batch_size, p.height, p.width = self.mode, b, h, w
        p.seed, p.epoch, p.position, p.rank = seed, epoch, position, rank
        p.lam, p.cutmix, p.boxes = lam, cut, boxes
        return p

    # -- application ------------------------------------------------------

    def soft_labels(self, labels, lam, mode=None):
        """float32 (B, num_classes): timm's mixup_target for int labels and
        per-row lam (a float or an array of B)."""
        import numpy as np
        y = np.asarray(labels).reshape(-1).astype(np.int64)
        nc = self.num_classes
        bad = np.flatnonzero((y < 0) | (y >= nc))
        if bad.size:
            raise ValueError("Mixup: label %d (row %d) is outside [0, num_classes=%d)"
                             % (y[bad[0]], bad[0], nc))
        off = self.label_smoothing / nc
        on = 1.0 - self.label_smoothing + off
        b = y.shape[0]
        y1 = np.full((b, nc), off, dtype=np.float32)
        y1[np.arange(b), y] = on
        y2 = y1[::-1]
        lam = np.broadcast_to(np.asarray(lam, dtype=np.float64).reshape(-1), (b,))
        if (mode or self.mode) == "batch":
            # timm's lam is a Python float: torch casts it, and 1 - lam
            # computed in double, to float32
            l1 = lam.astype(np.float32)[:, None]
            l2 = (1.0 - lam).astype(np.float32)[:, None]
            return y1 * l1 + y2 * l2
        # pair/elem: timm keeps lam in a float32 array (the CutMix-corrected
        # value rounded on store) and computes 1 - lam in float32
        lam32 = lam.astype(np.float32)
        return y1 * lam32[:, None] + y2 * (np.float32(1.0) - lam32)[:, None]

    def __call__(self, images, labels, *, seed=0, epoch=0, position=0, rank=0, layout="NCHW"):
        """Mix ``images`` (a float torch tensor or NumPy array, N×C×H×W or
        N×H×W×C by ``layout``; NumPy uint16 = bfloat16 bit patterns) in place
        and return ``(images, soft_labels)`` for the draws of (seed, epoch,
        position, rank); ``last_params`` holds them."""
        import numpy as np
        is_torch = type(images).__module__.startswith("torch")
        if is_torch:
            name = str(images.dtype).replace("torch.", "")
        else:
            images = np.asarray(images)
            name = images.dtype.name
        if name not in ("float32", "float16", "bfloat16", "uint16"):
            raise TypeError("Mixup needs float images (dtype float32, float16 or bfloat16), "
                            "got %s: create the Loader with dtype='float32' (or float16/"
                            "bfloat16); uint8 batches cannot hold mixed pixels" % name)
        if is_torch and name == "uint16":
            raise TypeError("Mixup: uint16 torch tensors are not images")
        if layout not in ("NCHW", "NHWC"):
            raise ValueError("Mixup: layout must be 'NCHW' or 'NHWC', got %r" % (layout,))
        if images.ndim != 4:
            raise ValueError("Mixup: images must have 4 dimensions, got shape %s"
                             % (tuple(images.shape),))
        b = images.shape[0]
        h, w = (images.shape[2], images.shape[3]) if layout == "NCHW" else \
            (images.shape[1], images.shape[2])
        if len(labels) != b:
            raise ValueError("Mixup: %d labels for %d images" % (len(labels), b))
        p = self.params(b, h, w, seed, epoch, position, rank)
        self.last_params = p
        if is_torch:
            import torch
            _mix_torch(torch, images, p, layout)
            soft = torch.from_numpy(self.soft_labels(labels.cpu().numpy(), p.lam, p.mode))
        else:
            _mix_numpy(np, images, p, layout)
            soft = self.soft_labels(labels, p.lam, p.mode)
        return images, soft


def _region_mask(np, p, layout):
    """(B, H, W) or broadcastable bool mask of each row's CutMix box."""
    ys = np.arange(p.height)[None, :, None]
    xs = np.arange(p.width)[None, None, :]
    bx = p.boxes
    m = ((ys >= bx[:, 0, None, None]) & (ys < bx[:, 1, None, None]) &
         (xs >= bx[:, 2, None, None]) & (xs < bx[:, 3, None, None]) & p.cutmix[:, None, None])
    return m[:, None, :, :] if layout == "NCHW" else m[:, :, :, None]


def _bf16_to_f32(np, u):
    return (u.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(np, f):
    u = f.view(np.uint32)
    r = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = np.isnan(f)
    if nan.any():
        r = np.where(nan, (u >> 16) | np.uint32(0x40), r)
    return r.astype(np.uint16)


def _mix_numpy(np, x, p, layout):
    if p.mode == "batch" and p.lam[0] == 1.0 and not p.cutmix.any():
        return
    if p.mode == "batch" and p.cutmix.any():  # an exact copy: any dtype
        yl, yh, xl, xh = (int(v) for v in p.boxes[0])
        if layout == "NCHW":
            x[:, :, yl:yh, xl:xh] = x[::-1, :, yl:yh, xl:xh].copy()
        else:
            x[:, yl:yh, xl:xh, :] = x[::-1, yl:yh, xl:xh, :].copy()
        return
    if x.dtype == np.float32:
        f = x
    elif x.dtype == np.uint16:
        f = _bf16_to_f32(np, x)
    else:
        f = x.astype(np.float32)
    lam = p.lam.astype(np.float32)[:, None, None, None]
    lam2 = (1.0 - p.lam).astype(np.float32)[:, None, None, None]
    mixed_rows = ~p.cutmix & (p.lam != 1.0)
    src = f[::-1].copy()
    if p.mode == "batch":
        out = f * lam[0] + src * lam2[0]
    else:
        out = np.where(mixed_rows[:, None, None, None], f * lam + src * lam2, f)
        out = np.where(_region_mask(np, p, layout), src, out)
    if x.dtype == np.uint16:
        x[...] = _f32_to_bf16(np, np.ascontiguousarray(out, dtype=np.float32))
    else:
        x[...] = out


def _mix_torch(torch, x, p, layout):
    if p.mode == "batch" and p.lam[0] == 1.0 and not p.cutmix.any():
        return
    if p.mode == "batch" and p.cutmix.any():
        yl, yh, xl, xh = (int(v) for v in p.boxes[0])
        if layout == "NCHW":
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            x[:, yl:yh, xl:xh, :] = x.flip(0)[:, yl:yh, xl:xh, :]
        return
    f = x if x.dtype == torch.float32 else x.float()
    src = f.flip(0)
    if p.mode == "batch":
        lam = float(p.lam[0])
        import numpy as np
        out = f.mul(float(np.float32(lam))).add_(src.mul(float(np.float32(1.0 - lam))))
    else:
        import numpy as np
        dev = f.device  # a batch on a GPU (Loader(device=)): the factors go there too
        lam = torch.from_numpy(p.lam.astype(np.float32)).view(-1, 1, 1, 1).to(dev)
        lam2 = torch.from_numpy((1.0 - p.lam).astype(np.float32)).view(-1, 1, 1, 1).to(dev)
        mixed_rows = torch.from_numpy(~p.cutmix & (p.lam != 1.0)).view(-1, 1, 1, 1).to(dev)
        out = torch.where(mixed_rows, f * lam + src * lam2, f)
        out = torch.where(torch.from_numpy(_region_mask(np, p, layout)).to(dev), src, out)
    x.copy_(out)
