"""stoker.doctor: where an input pipeline's time goes (docs/doctor.md)."""
import json
import os

from . import _stoker


def doctor(dataset, pipeline, *, step_ms=None, batch_size=256, samples=128, time_budget=5.0,
           readers=0, cores=0, seed=0):
    """Measure ``pipeline`` over ``dataset`` (a URI or path) on a random
    sample, like ``stoker doctor --json``, and return the report as a dict:
    the stage rates (``stages``: storage, decode, augment, consumer), the
    ``bottleneck`` (``"storage"``, ``"read"``, ``"decode"``, ``"augment"``
    or ``"consumer"``), a one-line ``summary``, ``predictions`` (images/s
    for 1..N cores) and ``recommendations`` (best first, each with
    ``kind``, ``images_per_s``, ``gain``, ``measured``, ``text``).

    ``step_ms``: the training step's time per batch of ``batch_size`` in
    milliseconds (None: the consumer is not a limit). ``samples``: records
    sampled (at most 4096); ``time_budget``: about how many seconds to
    measure; ``readers``: concurrent readers for the storage rate (0: 8 or
    twice the cores); ``cores``: predict for 1..cores (0: the CPUs this
    process may use). The GIL is released while measuring.
    """
    if step_ms is not None and not step_ms > 0:
        raise ValueError("doctor: step_ms must be a positive number of milliseconds (or None)")
    for name, v in (("batch_size", batch_size), ("samples", samples)):
        if int(v) < 1:
            raise ValueError("doctor: %s must be at least 1" % name)
    if not time_budget > 0:
        raise ValueError("doctor: time_budget must be a positive number of seconds")
    text = _stoker.doctor(os.fspath(dataset), pipeline, float(step_ms or 0), int(batch_size),
                          int(samples), float(time_budget), int(readers), int(cores), int(seed))
    return json.loads(text)
