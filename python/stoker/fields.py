"""Variable-length fields of a batch (docs/fields.md).

A field whose length varies from sample to sample — detection boxes, their
class ids, token ids — arrives as one ``Ragged``: the values of every row
back to back (``values``, shape ``(K, ...)``) and ``offsets`` (``N + 1``
int64): row ``i`` owns ``values[offsets[i]:offsets[i + 1]]``. Both come
from the batch's memory without copying (``values`` keeps the batch alive),
in the loader's output type (torch tensors, NumPy arrays or stoker arrays).
``padded()`` gives the dense form most losses want.
"""

__all__ = ["Ragged"]


class Ragged:
    """A variable-length field of a batch: ``values`` and ``offsets``."""

    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        self.values = values
        self.offsets = offsets

    def __len__(self):
        return len(self.offsets) - 1

    def _bounds(self, i):
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row %d of %d" % (i, n))
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def __getitem__(self, i):
        """The values of row ``i`` (a view)."""
        a, b = self._bounds(i)
        return self.values[a:b]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def lengths(self):
        """Value rows per batch row, a list of ints."""
        off = [int(v) for v in self.offsets]
        return [off[i + 1] - off[i] for i in range(len(off) - 1)]

    def tolist(self):
        """Each row's values as a (nested) list."""
        return [v.tolist() for v in self]

    def padded(self, fill=0, length=None):
        """``(padded, mask)``: ``padded`` of shape ``(N, L, ...)`` holds row
        ``i``'s values in ``[:len_i]`` and ``fill`` after them, ``mask``
        (bool, ``(N, L)``) is True where a value is. ``L`` is ``length`` or
        the longest row. A copy, in the values' type (torch or NumPy)."""
        lens = self.lengths()
        L = max(lens, default=0) if length is None else int(length)
        if L < max(lens, default=0):
            raise ValueError("length=%d is shorter than the longest row (%d)"
                             % (L, max(lens, default=0)))
        v = self.values
        shape = (len(lens), L) + tuple(v.shape[1:])
        try:
            import torch
            is_torch = isinstance(v, torch.Tensor)
        except ImportError:
            is_torch = False
        if is_torch:
            out = torch.full(shape, fill, dtype=v.dtype)
            mask = torch.zeros((len(lens), L), dtype=torch.bool)
        else:
            import numpy
            v = numpy.asarray(v)
            out = numpy.full(shape, fill, dtype=v.dtype)
            mask = numpy.zeros((len(lens), L), dtype=bool)
        a = 0
        for i, n in enumerate(lens):
            if n:
                out[i, :n] = v[a:a + n]
                mask[i, :n] = True
            a += n
        return out, mask

    def __repr__(self):
        return "<stoker.Ragged rows=%d values=%s>" % (len(self), tuple(self.values.shape))
