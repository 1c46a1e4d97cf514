"""Exactly-once across ranks in a real torchrun run (4 processes, gloo)."""
import json
import os
import subprocess
import sys

import pytest

from module_util import PY_PATH

HERE = os.path.dirname(os.path.abspath(__file__))


def test_torchrun_ranks_see_each_sample_once(cifar_dir, tmp_path):
    pytest.importorskip("torch.distributed.run")
    result = tmp_path / "result.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = PY_PATH + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    # Debian's torch 1.13 on Python 3.11: torchrun's defaults --redirects 0 /
    # --tee 0 crash (Std.from_str("0") is None: 3.11's Flag iteration skips
    # the zero member). Non-zero values work: workers' stdout goes to log
    # files, their stderr to the log files and the console.
    logs = tmp_path / "logs"
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", "4", "--redirects", "1", "--tee", "2",
                        "--log_dir", str(logs), os.path.join(HERE, "dist_worker.py"),
                        str(result), cifar_dir[0]],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(result.read_text())
    assert report["world_size"] == 4
    assert report["errors"] == []
    assert report["drop_last=False"] == {"per_rank": 47, "batches": 6}
    assert report["drop_last=True"] == {"per_rank": 40, "batches": 5}
