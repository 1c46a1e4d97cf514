"""Datasets in S3, end to end, against a real S3 API (moto's server, tests/net/servers.py)
with moto checking every signature (require_signatures):

- `stoker pack SRC s3://bucket/prefix/` uploads the shards (read back with botocore: the
  same bytes as a local pack of the same input);
- `stoker bench stk:s3://bucket/prefix/` (a ListObjectsV2 listing) prints the same
  --digest as over the local shards, cold cache and warm cache; warm fetches nothing;
  cold fetches the shards' bytes once (≤ 1.05 × their size);
- `stoker.open("stk:s3://...")` gives the local dataset's samples; `s3://.../shard.stk`
  without a prefix is detected as .stk; a brace pattern over s3:// works;
- a wrong secret is stoker.AccessDenied naming the URL (never the secret); a missing
  prefix is stoker.NotFound.
"""
import hashlib
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import BUILD

servers = pytest.importorskip("servers", reason="tests/net/servers.py is missing")
botocore = pytest.importorskip("botocore", reason="python3-botocore is not installed")
import botocore.config  # noqa: E402
import botocore.session  # noqa: E402
from PIL import Image  # noqa: E402

STOKER = os.path.join(BUILD, "stoker")
SECRET = "s3cr3t-VALUE-never-printed"


def make_images(root, n=60):
    rng = np.random.default_rng(5)
    lines = []
    for i in range(n):
        h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
        px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        path = os.path.join(root, "img%03d.jpg" % i)
        Image.fromarray(px).save(path, quality=90)
        lines.append("%s\t%d" % (path, i % 7))
    lst = os.path.join(root, "list.txt")
    with open(lst, "w") as f:
        f.write("\n".join(lines) + "\n")
    return lst


def run(args, env, check=True):
    p = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=300, env=env)
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr, p.stderr
    if check:
        assert p.returncode == 0, p.stderr
    return p


def bench(uri, env):
    p = run(["bench", uri, "--pipeline", "random_resized_crop 32 | flip 0.5 | to f32 chw", "--batch", "8", "--epochs",
             "1", "--threads", "2", "--json", "--digest"], env)
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("s3data")
    lst = make_images(str(tmp))
    local = str(tmp / "local")
    with servers.moto_server() as s3:
        key, secret = s3.require_signatures()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STOKER_"))}
        env.update(s3.env)
        env.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
                   STOKER_CHUNK_SIZE="16K", STOKER_HTTP_MAX_ATTEMPTS="2")
        run(["pack", "list:" + lst, local, "--shard-size", "64K", "-q"], env)
        s3.create_bucket("data")
        run(["pack", "list:" + lst, "s3://data/train/", "--shard-size", "64K", "-q"], env)
        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id=key,
            aws_secret_access_key=secret, config=botocore.config.Config(s3={"addressing_style": "path"}))
        yield dict(tmp=tmp, local=local, env=env, s3=s3, client=client)


def test_pack_uploads_the_shards(world):
    names = sorted(os.listdir(world["local"]))
    assert len(names) >= 4
    got = world["client"].list_objects_v2(Bucket="data", Prefix="train/")
    keys = sorted(o["Key"] for o in got["Contents"])
    assert keys == ["train/" + n for n in names]
    for n in names:
        body = world["client"].get_object(Bucket="data", Key="train/" + n)["Body"].read()
        with open(os.path.join(world["local"], n), "rb") as f:
            local = f.read()
        # The same input packs to the same bytes (pack is deterministic).
        assert hashlib.sha256(body).digest() == hashlib.sha256(local).digest(), n


def test_digest_cold_and_warm(world, tmp_path):
    env = dict(world["env"], STOKER_CACHE_DIR=str(tmp_path / "cache"))
    local = bench(world["local"], world["env"])
    cold = bench("stk:s3://data/train/", env)
    warm = bench("stk:s3://data/train/", env)
    assert cold["digest"] == local["digest"] == warm["digest"]
    size = sum(os.path.getsize(os.path.join(world["local"], n)) for n in os.listdir(world["local"]))
    assert 0 < cold["remote"]["bytes_fetched"] <= 1.05 * size
    assert warm["remote"]["bytes_fetched"] == 0
    assert warm["remote"]["reads_waited"] == 0


def test_cache_fetch_from_a_listing(world, tmp_path):
    """`stoker cache fetch stk:s3://data/train/` (a signed ListObjectsV2, then the
    objects' ranges) leaves a cache from which training fetches nothing and gives the
    local digest; a second fetch downloads nothing."""
    cache = tmp_path / "cache"
    env = dict(world["env"], STOKER_CACHE_DIR=str(cache))
    size = sum(os.path.getsize(os.path.join(world["local"], n)) for n in os.listdir(world["local"]))
    p = run(["cache", "fetch", "stk:s3://data/train/", "-q"], env)
    assert p.stdout.startswith("fetched %.1f MB of %d objects" % (size / 1e6, len(os.listdir(world["local"])))), p.stdout
    p = run(["cache", "info"], env)
    assert "objects:  %d" % len(os.listdir(world["local"])) in p.stdout, p.stdout
    warm = bench("stk:s3://data/train/", env)
    assert warm["digest"] == bench(world["local"], world["env"])["digest"]
    assert warm["remote"]["bytes_fetched"] == 0 and warm["remote"]["reads_waited"] == 0
    again = run(["cache", "fetch", "stk:s3://data/train/"], env)
    assert again.stdout.startswith("fetched 0.0 MB"), again.stdout
    assert again.stderr.count("fetch: ") == len(os.listdir(world["local"]))   # progress lines
    assert env["AWS_SECRET_ACCESS_KEY"] not in again.stdout + again.stderr


def test_tfrecord_with_dali_indexes_in_the_bucket(world, tmp_path):
    """TFRecord files with DALI's NAME.idx beside them under an s3:// prefix: the
    listing names the indexes, so the open uses them (no scan, no HEAD per
    candidate) and gives the local files' digest; a brace pattern names no index
    and scans instead, to the same samples."""
    import shutil
    classes = tmp_path / "classes"
    for line in open(os.path.join(world["tmp"], "list.txt")).read().split("\n"):
        if line:
            path, label = line.split("\t")
            (classes / ("c%s" % label)).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, classes / ("c%s" % label) / os.path.basename(path))
    out = tmp_path / "fmt"
    write = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                         "write_formats.py")
    p = subprocess.run(["/usr/bin/python3", write, "--images", str(classes), "--out", str(out),
                        "--shards", "3", "--formats", "tfrecord"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    names = sorted(n for n in os.listdir(out / "tfrecord") if n.endswith((".tfrecord", ".idx")))
    assert len(names) == 6, names
    for n in names:
        with open(out / "tfrecord" / n, "rb") as f:
            world["client"].put_object(Bucket="data", Key="tf/" + n, Body=f.read())
    env = dict(world["env"], STOKER_CACHE_DIR=str(tmp_path / "cache"))
    want = bench("tfrecord:%s" % (out / "tfrecord"), world["env"])["digest"]
    note = run(["inspect", "tfrecord:s3://data/tf/"], env).stdout
    assert note.count("records from the DALI index s3://data/tf/photos-") == 3, note
    assert bench("tfrecord:s3://data/tf/", env)["digest"] == want
    env2 = dict(world["env"], STOKER_CACHE_DIR=str(tmp_path / "cache2"))
    pattern = "tfrecord:s3://data/tf/photos-{00000..00002}.tfrecord"
    assert run(["inspect", pattern], env2).stdout.count("records, scanned") == 3
    assert bench(pattern, env2)["digest"] == want


def test_open_samples_equal(world, tmp_path):
    code = ("import stoker, sys, numpy as np\n"
            "stoker.set_cache(sys.argv[3])\n"
            "r = stoker.open(sys.argv[1]); l = stoker.open(sys.argv[2])\n"
            "assert len(r) == len(l), (len(r), len(l))\n"
            "for i in (0, 7, len(l) - 1):\n"
            "    a, b = r[i], l[i]\n"
            "    assert np.array_equal(a[0], b[0]) and a[1] == b[1], i\n"
            "print('ok', len(r))\n")
    env = dict(world["env"], PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    last = len(os.listdir(world["local"])) - 1
    for uri in ("stk:s3://data/train/", "s3://data/train/",
                "stk:s3://data/train/shard-{00000..%05d}.stk" % last):
        p = subprocess.run(["/usr/bin/python3", "-c", code, uri, world["local"], str(tmp_path / "c")],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0 and p.stdout.startswith("ok"), (uri, p.stderr)
    # One shard of a set is refused, remote as local (every shard knows its set).
    for uri in ("s3://data/train/shard-00000.stk", os.path.join(world["local"], "shard-00000.stk")):
        p = run(["inspect", uri], dict(env, STOKER_CACHE_DIR=str(tmp_path / "c")), check=False)
        assert p.returncode != 0 and "missing shards 1-%d" % last in p.stderr, p.stderr


def test_wrong_secret_is_access_denied(world, tmp_path):
    env = dict(world["env"], AWS_SECRET_ACCESS_KEY=SECRET, STOKER_CACHE_DIR=str(tmp_path / "c"))
    p = run(["bench", "stk:s3://data/train/", "--pipeline", "resize 32,32", "--epochs", "1"], env,
            check=False)
    assert p.returncode != 0
    assert "s3://data/train/" in p.stderr
    assert "SignatureDoesNotMatch" in p.stderr or "403" in p.stderr, p.stderr
    assert SECRET not in p.stderr + p.stdout


def test_missing_prefix_is_not_found(world, tmp_path):
    env = dict(world["env"], STOKER_CACHE_DIR=str(tmp_path / "c"))
    p = run(["bench", "stk:s3://data/nothing-here/", "--pipeline", "resize 32,32", "--epochs", "1"],
            env, check=False)
    assert p.returncode != 0
    assert "s3://data/nothing-here/" in p.stderr and "no object" in p.stderr, p.stderr
