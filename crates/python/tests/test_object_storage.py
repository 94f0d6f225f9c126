"""neardup.dedup and the Ray runner over object storage: s3:// inputs and outputs against a real
S3 API server on 127.0.0.1 (moto's, started here and stopped by its pid; tests/run installs it
and sets NEARDUP_MOTO_SERVER), compared with runs over the same files on disk."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SAMPLE, read_jsonl

import neardup

BUCKET = "corpus"
FILES = ["part-0.jsonl", "part-1.jsonl", "part-2.parquet"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server holding the sample corpus under s3://corpus/in/; this process's
    environment points neardup's client at it for the module's tests."""
    binary = os.environ.get("NEARDUP_MOTO_SERVER")
    if not binary:
        pytest.fail(
            "NEARDUP_MOTO_SERVER is not set: these tests run against a local S3 server. Install "
            "it with `pip install 'moto[server]' boto3` and set NEARDUP_MOTO_SERVER to its "
            "moto_server, or run tests/run, which does both"
        )
    import boto3

    port = _free_port()
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
    }
    saved = {k: os.environ.get(k) for k in env}
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    pytest.fail(f"the S3 server {binary} did not start")
                time.sleep(0.1)
        os.environ.update(env)
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing-secret",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=BUCKET)
        for name in FILES:
            client.put_object(Bucket=BUCKET, Key=f"in/{name}", Body=(SAMPLE / name).read_bytes())
        yield client
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.kill()
        proc.wait()


def _get(client, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _keys(client, prefix: str) -> list:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_dedup_reads_and_writes_object_storage_as_files(s3, tmp_path):
    local = neardup.dedup(
        str(SAMPLE), output=tmp_path / "out", decisions=tmp_path / "d.jsonl", progress=False
    )
    remote = neardup.dedup(
        "s3://corpus/in/",
        output="s3://corpus/out/",
        decisions="s3://corpus/decisions.jsonl",
        report="s3://corpus/report.json",
        progress=False,
    )
    assert remote["totals"] == local["totals"]
    assert _keys(s3, "out/") == sorted([f"out/{n}" for n in FILES] + ["out/_SUCCESS"])
    for name in FILES:
        assert _get(s3, f"out/{name}") == (tmp_path / "out" / name).read_bytes(), name
    want = (tmp_path / "d.jsonl").read_text().replace(f"{SAMPLE}/", "s3://corpus/in/")
    assert _get(s3, "decisions.jsonl").decode() == want
    assert '"file":"s3://corpus/in/part-2.parquet"' in want
    manifest = json.loads(_get(s3, "out/_SUCCESS"))
    assert [f["path"] for f in manifest["files"]] == FILES


def test_the_ray_runner_keeps_everything_on_object_storage_and_resumes(s3, tmp_path, cli):
    """Inputs, output, decisions and the work directory all on the S3 server: no node shares a
    disk with another; the decisions and outputs are the CLI's; a second run reuses every task."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'neardup[ray]')")
    from local_ray import LocalCluster, kill_session

    inputs = [f"s3://corpus/in/{n}" for n in FILES]
    cli("dedup", *inputs, "--output", tmp_path / "cli-out", "--decisions", tmp_path / "cli.jsonl")

    # Started after the fixture set the environment: every node reaches the server.
    cluster = LocalCluster(workers=2)
    driver = (
        "import json, sys, neardup.ray\n"
        "print(json.dumps(neardup.ray.dedup(**json.loads(sys.argv[1]))))\n"
    )
    args = {
        "inputs": inputs,
        "output": "s3://corpus/ray-out/",
        "decisions": "s3://corpus/ray.jsonl",
        "work_dir": "s3://corpus/ray-work/",
        "groups": 2,
    }

    def drive() -> dict:
        proc = subprocess.Popen(
            [sys.executable, "-c", driver, json.dumps({"address": cluster.address, **args})],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=cluster.env(),
        )
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            kill_session(proc.pid)
        assert proc.returncode == 0, err[-4000:]
        return json.loads(out.strip().splitlines()[-1])

    try:
        cluster.start()
        first = drive()
        decisions = _get(s3, "ray.jsonl")
        s3.delete_object(Bucket=BUCKET, Key="ray.jsonl")
        again = drive()
    finally:
        cluster.stop()
    assert first["tasks_reused"] == 0
    assert len(first["nodes"]) >= 2, first["nodes"]
    assert again["tasks_reused"] == again["tasks"], again["steps"]
    assert again["totals"] == first["totals"]

    assert decisions.decode() == (tmp_path / "cli.jsonl").read_text()
    assert _get(s3, "ray.jsonl") == decisions
    assert read_jsonl(tmp_path / "cli.jsonl")[0]["file"] == "s3://corpus/in/part-0.jsonl"
    for name in FILES:
        assert _get(s3, f"ray-out/{name}") == (tmp_path / "cli-out" / name).read_bytes(), name
    shard_manifests = [k for k in _keys(s3, "ray-out/") if "_SUCCESS." in k]
    assert len(shard_manifests) == len(FILES)
    # The whole output's manifest lists what the CLI's lists.
    whole = json.loads(_get(s3, "ray-out/_SUCCESS"))
    assert [(f["path"], f["bytes"]) for f in whole["files"]] == [
        (n, (tmp_path / "cli-out" / n).stat().st_size) for n in FILES
    ]
    assert whole["distributed"]["shards"] == len(FILES)
    work = _keys(s3, "ray-work/")
    assert "ray-work/run.json" in work and "ray-work/hot.ndh" in work
    assert [k for k in work if k.startswith("ray-work/keys/")] == [
        f"ray-work/keys/keys-{i:05d}.ndk" for i in range(len(FILES))
    ]
    assert "ray-work/decide/decided-00001/manifest.json" in work
    assert f"ray-work/write/report-{len(FILES) - 1:05d}.json" in work
    # Nothing was written on the driver's disk.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli-out", "cli.jsonl"]
    uploads = s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert uploads == []
