"""The S3 client (src/io/s3.c, driven through the test program
build/stk_s3_tool) against a real S3 API: moto's server (tests/net/servers.py),
with Debian's botocore as the independent client that creates the fixtures
and reads the results back.

- ListObjectsV2 over more than 1000 keys (continuation tokens; pages of
  1000 and of 250), keys with XML-special, space and non-ASCII characters,
  a delimiter's CommonPrefixes, the key limit: the same keys, sizes and
  ETags as botocore's paginator.
- HEAD, PUT and uploads: a small file (one PUT) and a multipart one (three
  parts, several in flight), read back byte for byte with botocore; the
  multipart ETag is S3's "-3" form and no upload is left pending.
- Errors: a missing key or bucket is STK_ENOENT naming the s3:// URL.
- Credentials checked for real: moto with IAM authentication on
  (require_signatures) verifies every signature with its own SigV4
  implementation, so the successful calls prove the signing; a wrong
  secret is STK_EACCESS "SignatureDoesNotMatch" and an unknown key
  "InvalidAccessKeyId", both naming the URL and never printing the secret;
  temporary credentials (a session token from STS) work.
- Anonymous requests (no AWS_* credentials) read a public object."""
import concurrent.futures
import hashlib
import json
import os
import subprocess

import pytest

from conftest import BUILD

servers = pytest.importorskip("servers", reason="tests/net/servers.py (the netinfra helpers) is missing")
botocore = pytest.importorskip("botocore", reason="python3-botocore is not installed")
import botocore.config  # noqa: E402
import botocore.session  # noqa: E402

TOOL = os.path.join(BUILD, "stk_s3_tool")
SPECIAL = ["a&b <c> \"d\" 'e'.bin", "sp ace/x y", "unicode/café-日本語-ሴ", "plus+eq=semi;colon:",
           "pct%20lit%2F", "tilde~star*bang!paren()", "q?hash#"]


def tool(env, *args, check=True):
    if not os.path.exists(TOOL):
        pytest.skip("%s is not built (cmake --build build --target stk_s3_tool)" % TOOL)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STOKER_S3"))}
    e.update(env)
    e["STOKER_HTTP_QUIET"] = "1"
    e.setdefault("STOKER_HTTP_MAX_ATTEMPTS", "2")
    p = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=300, env=e)
    assert p.stdout, p.stderr
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr, p.stderr  # ASan builds
    out = json.loads(p.stdout)
    if check:
        assert out["rc"] == 0, out
    return out


def client(endpoint, access="testing", secret="testing", token=None, service="s3"):
    s = botocore.session.get_session()
    return s.create_client(service, endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id=access, aws_secret_access_key=secret,
                           aws_session_token=token,
                           config=botocore.config.Config(s3={"addressing_style": "path"}))


@pytest.fixture(scope="module")
def moto():
    with servers.moto_server() as m:
        yield m


@pytest.fixture(scope="module")
def listed(moto):
    """A bucket with 1205 keys under many/ (plus SPECIAL names) and two under other/."""
    s3 = client(moto.endpoint)
    s3.create_bucket(Bucket="listing")
    keys = ["many/%05d" % i for i in range(1200)] + ["many/" + k for k in SPECIAL[:5]]
    keys += ["other/a/1", "other/b"]

    def put(k):
        s3.put_object(Bucket="listing", Key=k, Body=hashlib.sha256(k.encode()).digest()[: len(k) % 29])
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(put, keys))
    return s3


def botocore_listing(s3, bucket, prefix, delimiter=None):
    objs, prefixes = [], []
    kw = {"Bucket": bucket, "Prefix": prefix}
    if delimiter:
        kw["Delimiter"] = delimiter
    for page in s3.get_paginator("list_objects_v2").paginate(**kw):
        objs += [[o["Key"], o["Size"], o["ETag"]] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    return objs, prefixes


def test_list_follows_continuation_tokens(moto, listed):
    want, _ = botocore_listing(listed, "listing", "many/")
    assert len(want) == 1205
    got = tool(moto.env, "list", "s3://listing/many/")
    assert got["objects"] == want
    assert got["pages"] == 2
    got = tool(moto.env, "list", "s3://listing/many/", "", "0", "250")
    assert got["objects"] == want
    assert got["pages"] == 5
    # the whole bucket, and a prefix that matches nothing
    allk, _ = botocore_listing(listed, "listing", "")
    assert tool(moto.env, "list", "s3://listing")["objects"] == allk
    assert tool(moto.env, "list", "s3://listing/nothing-here/")["objects"] == []


def test_list_delimiter_and_limit(moto, listed):
    objs, prefixes = botocore_listing(listed, "listing", "other/", "/")
    got = tool(moto.env, "list", "s3://listing/other/", "/")
    assert got["objects"] == objs == [["other/b", len("other/b") % 29, objs[0][2]]]
    assert got["prefixes"] == prefixes == ["other/a/"]
    out = tool(moto.env, "list", "s3://listing/many/", "", "1000", check=False)
    assert out["rc"] == -9 and "s3://listing/many/" in out["error"] and "more than 1000 keys" in out["error"]


def test_missing_bucket_and_key(moto, listed):
    out = tool(moto.env, "list", "s3://no-such-bucket/x", check=False)
    assert out["rc"] == -4 and out["error"].startswith("s3://no-such-bucket/x: HTTP 404 NoSuchBucket")
    out = tool(moto.env, "head", "s3://listing/many/missing", check=False)
    assert out["rc"] == -4 and out["error"].startswith("s3://listing/many/missing: HTTP 404")
    out = tool(moto.env, "list", "gs://x/y", check=False)
    assert out["rc"] == -1 and "not an s3://BUCKET/KEY URL" in out["error"]


def test_head(moto, listed):
    k = "many/" + SPECIAL[0]
    h = listed.head_object(Bucket="listing", Key=k)
    got = tool(moto.env, "head", "s3://listing/" + k)
    assert got["size"] == h["ContentLength"] and got["etag"] == h["ETag"]


def test_uploads_read_back(moto, tmp_path):
    s3 = client(moto.endpoint)
    s3.create_bucket(Bucket="uploads")
    small = os.urandom(1000)
    big = os.urandom(12 * 1024 * 1024 + 12345)          # 3 parts of 5 MiB (the last short)
    (tmp_path / "small").write_bytes(small)
    (tmp_path / "big").write_bytes(big)
    (tmp_path / "empty").write_bytes(b"")
    for name, data in (("small", small), ("empty", b"")):
        key = "dir/%s %s" % (name, SPECIAL[2])
        got = tool(moto.env, "upload", str(tmp_path / name), "s3://uploads/" + key)
        assert got["parts"] == 0 and got["size"] == len(data)
        o = s3.get_object(Bucket="uploads", Key=key)
        assert o["Body"].read() == data
        assert got["etag"] == o["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
    for k in SPECIAL:
        key = "multi/" + k
        got = tool(moto.env, "upload", str(tmp_path / "big"), "s3://uploads/" + key, str(5 << 20), "0", "2")
        assert got["parts"] == 3 and got["size"] == len(big)
        o = s3.get_object(Bucket="uploads", Key=key)
        assert o["Body"].read() == big
        # S3's multipart ETag: md5 of the parts' md5s, "-" the part count
        parts = [big[i:i + (5 << 20)] for i in range(0, len(big), 5 << 20)]
        md5s = b"".join(hashlib.md5(p).digest() for p in parts)
        assert got["etag"] == o["ETag"] == '"%s-3"' % hashlib.md5(md5s).hexdigest()
    assert not s3.list_multipart_uploads(Bucket="uploads").get("Uploads")
    # the PUT of a file given by name, and a threshold that forces one PUT for the big one
    got = tool(moto.env, "upload", str(tmp_path / "big"), "s3://uploads/one-put", "0", str(64 << 20))
    assert got["parts"] == 0
    assert s3.get_object(Bucket="uploads", Key="one-put")["Body"].read() == big
    out = tool(moto.env, "upload", str(tmp_path / "big"), "s3://uploads/x", str(1 << 20), check=False)
    assert out["rc"] == -1 and "5 MiB" in out["error"]


@pytest.fixture(scope="module")
def moto_auth():
    """moto checking every request's key and SigV4 signature as AWS does
    (servers.MotoServer.require_signatures: an IAM user with an allow-all policy), and a
    role that user may assume (for temporary credentials)."""
    allow_all = json.dumps({"Version": "2012-10-17",
                            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    with servers.moto_server() as m:
        access, secret = m.require_signatures()
        iam = client(m.endpoint, access, secret, service="iam")
        m.role_arn = iam.create_role(RoleName="reader", AssumeRolePolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                     "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
        iam.put_role_policy(RoleName="reader", PolicyName="all", PolicyDocument=allow_all)
        s3 = client(m.endpoint, access, secret)
        s3.create_bucket(Bucket="auth")
        s3.put_object(Bucket="auth", Key="a b/c&d", Body=b"xyz")
        s3.put_object(Bucket="auth", Key="pub", Body=b"public!", ACL="public-read")
        yield m, dict(m.env), s3


def test_signatures_verified_by_the_server(moto_auth, tmp_path):
    m, env, s3 = moto_auth
    assert tool(env, "list", "s3://auth/")["objects"][0][0] == "a b/c&d"
    assert tool(env, "head", "s3://auth/a b/c&d")["size"] == 3
    data = os.urandom((11 << 20) + 7)
    (tmp_path / "f").write_bytes(data)
    got = tool(env, "upload", str(tmp_path / "f"), "s3://auth/up/" + SPECIAL[5], str(5 << 20))
    assert got["parts"] == 3
    assert s3.get_object(Bucket="auth", Key="up/" + SPECIAL[5])["Body"].read() == data
    # virtual-hosted addressing cannot reach a loopback endpoint by name; path style is the
    # default with an endpoint, and naming it explicitly changes nothing
    assert tool(dict(env, STOKER_S3_ADDRESSING="path"), "head", "s3://auth/pub")["size"] == 7


def test_wrong_credentials_are_access_errors(moto_auth):
    m, env, _ = moto_auth
    secret = "Wr0ngSecretWr0ngSecret"
    out = tool(dict(env, AWS_SECRET_ACCESS_KEY=secret), "list", "s3://auth/a", check=False)
    assert out["rc"] == -17 and out["code"].startswith("STK_EACCESS")
    assert out["error"].startswith("s3://auth/a: HTTP 403 SignatureDoesNotMatch")
    assert m.endpoint + "/auth" in out["error"]
    assert secret not in json.dumps(out)
    out = tool(dict(env, AWS_ACCESS_KEY_ID="AKIAUNKNOWNUNKNOWN00"), "head", "s3://auth/pub",
               check=False)
    assert out["rc"] == -17 and "s3://auth/pub: HTTP 403" in out["error"]
    out = tool(dict(env, AWS_ACCESS_KEY_ID="AKIAUNKNOWNUNKNOWN00"), "list", "s3://auth/", check=False)
    assert out["rc"] == -17 and "InvalidAccessKeyId" in out["error"]
    out = tool(dict(env, AWS_SECRET_ACCESS_KEY=secret), "put", "s3://auth/new", __file__, check=False)
    assert out["rc"] == -17 and secret not in json.dumps(out)


def test_session_token(moto_auth):
    m, env, _ = moto_auth
    sts = client(m.endpoint, env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], service="sts")
    c = sts.assume_role(RoleArn=m.role_arn, RoleSessionName="stoker")["Credentials"]
    tenv = dict(env, AWS_ACCESS_KEY_ID=c["AccessKeyId"], AWS_SECRET_ACCESS_KEY=c["SecretAccessKey"],
                AWS_SESSION_TOKEN=c["SessionToken"])
    assert tool(tenv, "head", "s3://auth/a b/c&d")["size"] == 3
    assert tool(tenv, "list", "s3://auth/a")["objects"][0][0] == "a b/c&d"
    # a token the server does not know: an access error, the token never printed
    out = tool(dict(tenv, AWS_SESSION_TOKEN="BogusToken123"), "list", "s3://auth/", check=False)
    assert out["rc"] == -17 and "InvalidToken" in out["error"]
    assert "BogusToken123" not in json.dumps(out) and c["SessionToken"] not in json.dumps(out)


def test_anonymous_reads_a_public_object(moto, tmp_path):
    s3 = client(moto.endpoint)
    s3.create_bucket(Bucket="public")
    s3.put_object(Bucket="public", Key="open data.bin", Body=b"0123456789", ACL="public-read")
    anon = {"AWS_ENDPOINT_URL": moto.endpoint}
    got = tool(anon, "head", "s3://public/open data.bin")
    assert got["size"] == 10
    out = tool({"AWS_ENDPOINT_URL": moto.endpoint, "AWS_ACCESS_KEY_ID": "x"}, "head",
               "s3://public/open data.bin", check=False)
    assert out["rc"] == -1 and "AWS_SECRET_ACCESS_KEY is not" in out["error"]
