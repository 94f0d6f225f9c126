"""neardup.ray on a real Ray cluster on 127.0.0.1: a head and two worker nodes of one CPU each,
each started in a session of its own (setsid) and stopped by killing exactly the processes of
those sessions, in a network namespace with only loopback (pytest itself runs in it: see
conftest.py and local_ray.py)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE
from local_ray import LocalCluster, in_private_network, kill_session, session_pids

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'neardup[ray]')")

DRIVER = """
import json, sys, neardup.ray
args = json.loads(sys.argv[1])
report = neardup.ray.dedup(**args)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(workers=2)
    try:
        c.start()
    except RuntimeError as e:
        c.stop()
        pytest.fail(str(e))
    try:
        yield c
    finally:
        c.stop()


def test_a_decisions_file_neardup_did_not_write_is_refused_before_ray_starts(tmp_path):
    import neardup.ray

    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"precious\n")
    with pytest.raises(ValueError, match="notes.txt is a file neardup did not write.*remove it first"):
        neardup.ray.dedup([str(SAMPLE)], None, notes, tmp_path / "work")
    assert notes.read_bytes() == b"precious\n"
    assert not (tmp_path / "work").exists() and not ray.is_initialized()


def test_the_cluster_and_its_drivers_are_on_loopback_only(cluster):
    """This process (which starts the drivers) and every node see no network but loopback, and
    the nodes registered 127.0.0.1 as their address."""
    assert in_private_network()
    for pid in cluster.pids():
        with open(f"/proc/{pid}/net/dev", encoding="ascii") as f:
            interfaces = [line.split(":")[0].strip() for line in f.readlines()[2:]]
        assert interfaces == ["lo"], (pid, interfaces)
    out = subprocess.run(
        [sys.executable, "-c", NODE_ADDRESSES, cluster.address],
        capture_output=True,
        text=True,
        timeout=120,
        env=cluster.env(),
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["127.0.0.1"] * 3


NODE_ADDRESSES = """
import json, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(json.dumps(sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])))
"""


def drive(cluster, cwd: Path, **args) -> subprocess.Popen:
    """Starts a driver process running neardup.ray.dedup(**args) from `cwd`."""
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps({"address": cluster.address, **args})],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=cluster.env(),
    )


def finish(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def data_files(directory: Path) -> dict:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.startswith(("_SUCCESS", "."))
    }


def test_ray_runs_are_the_clis_and_resume(tmp_path, cluster, cli, monkeypatch):
    # Relative inputs from the driver's working directory: decisions name them as given.
    monkeypatch.chdir(REPO)
    shards = [[f"tests/data/sample/{p.name}"] for p in sorted(SAMPLE.iterdir())]
    inputs = [s[0] for s in shards]
    cli(
        "dedup", *inputs, "-o", tmp_path / "one", "--decisions", tmp_path / "one.jsonl",
        "--report", tmp_path / "one.json", "--threshold", "0.7",
    )
    args = dict(
        inputs=inputs,
        output=str(tmp_path / "out"),
        decisions=str(tmp_path / "d.jsonl"),
        work_dir=str(tmp_path / "work"),
        groups=2,
        threshold=0.7,
    )
    report = finish(drive(cluster, REPO, **args))
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert data_files(tmp_path / "out") == data_files(tmp_path / "one")
    # The whole output's manifest is there, listing what the one process's lists.
    whole = json.loads((tmp_path / "out" / "_SUCCESS").read_text())
    assert whole["files"] == json.loads((tmp_path / "one" / "_SUCCESS").read_text())["files"]
    assert whole["distributed"]["shards"] == 3
    assert json.loads((tmp_path / "d.jsonl").read_text().splitlines()[0])["file"] == inputs[0]
    assert report["shards"] == 3 and report["groups"] == 2
    assert report["tasks"] == 3 + 1 + 3 + 2 + 3 and report["tasks_reused"] == 0
    assert {k: (v["tasks"], v["reused"]) for k, v in report["steps"].items()} == {
        "keys": (3, 0), "hot": (1, 0), "sign": (3, 0), "decide": (2, 0), "write": (3, 0)
    }
    assert all(v["seconds"] >= v["longest_seconds"] > 0 for v in report["steps"].values())
    assert len(report["nodes"]) >= 2, report["nodes"]
    one_report = json.loads((tmp_path / "one.json").read_text())
    assert report["clusters"] == one_report["stage2"]["clusters"]
    assert report["clusters"]["largest"], "the sample corpus has duplicate clusters"

    # Everything found complete: nothing runs again, the result is the same.
    (tmp_path / "d.jsonl").unlink()
    again = finish(drive(cluster, REPO, **args))
    assert again["tasks_reused"] == again["tasks"]
    assert all(v["seconds"] == 0 for v in again["steps"].values())
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()

    # Lost intermediate outputs (a sign and a decide step's) are made again; the rest is reused.
    shutil.rmtree(tmp_path / "work" / "sign" / "sig-00001")
    shutil.rmtree(tmp_path / "work" / "decide" / "decided-00000")
    partial = finish(drive(cluster, REPO, **args))
    assert partial["tasks_reused"] == partial["tasks"] - 2
    assert partial["steps"]["sign"]["reused"] == 2 and partial["steps"]["decide"]["reused"] == 1
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert data_files(tmp_path / "out") == data_files(tmp_path / "one")

    # Keeping the longest copy: the CLI's decisions too.
    cli(
        "dedup", *inputs, "--decisions", tmp_path / "longest.jsonl", "--threshold", "0.7",
        "--prefer", "longest",
    )
    longest = {
        **args,
        "output": str(tmp_path / "out-longest"),
        "decisions": str(tmp_path / "d-longest.jsonl"),
        "work_dir": str(tmp_path / "work-longest"),
        "prefer": "longest",
    }
    finish(drive(cluster, REPO, **longest))
    assert (tmp_path / "d-longest.jsonl").read_bytes() == (tmp_path / "longest.jsonl").read_bytes()
    assert (tmp_path / "d-longest.jsonl").read_bytes() != (tmp_path / "one.jsonl").read_bytes()

    # Against the saved index of the first file: the rest get their part of the joint run.
    cli("dedup", inputs[0], "--index-out", tmp_path / "idx-a", "--threshold", "0.7")
    joint_rest = [
        line for line in (tmp_path / "one.jsonl").read_text().splitlines(keepends=True)
        if json.loads(line)["file"] != inputs[0]
    ]
    against = {
        **args,
        "inputs": inputs[1:],
        "output": str(tmp_path / "out-against"),
        "decisions": str(tmp_path / "d-against.jsonl"),
        "work_dir": str(tmp_path / "work-against"),
        "against": [str(tmp_path / "idx-a")],
    }
    finish(drive(cluster, REPO, **against))
    assert (tmp_path / "d-against.jsonl").read_text().splitlines(keepends=True) == joint_rest
    assert any(json.loads(line).get("dup_of_file") == inputs[0] for line in joint_rest)

    # The work directory belongs to its run: other settings are refused.
    other = drive(cluster, REPO, **{**args, "threshold": 0.8})
    out, err = other.communicate(timeout=120)
    kill_session(other.pid)
    assert other.returncode != 0 and "holds the intermediate files of another run" in err


def synthetic_corpus(root: Path, shards: int, docs: int) -> list:
    """Shards of JSONL with near duplicates within and across shards."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(4000)]
    bases = [[rng.choice(words) for _ in range(150)] for _ in range(docs // 3)]
    paths = []
    for s in range(shards):
        path = root / f"shard-{s:02d}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for i in range(docs):
                if rng.random() < 0.3:
                    text = list(rng.choice(bases))
                    text[rng.randrange(len(text))] = rng.choice(words)
                else:
                    text = [rng.choice(words) for _ in range(150)]
                f.write(json.dumps({"id": f"{s}-{i}", "text": " ".join(text)}) + "\n")
        paths.append(path)
    return paths


def running_task(cluster, node: str):
    """The neardup task a node's worker is running now (by its process title), or None."""
    for pid in session_pids(cluster.sessions[node]):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith("ray::_") and title.split()[0].endswith("_task"):
            return title.split()[0]
    return None


def test_a_worker_node_killed_mid_run_changes_nothing(tmp_path, cluster, cli):
    corpus = tmp_path / "in"
    corpus.mkdir()
    paths = synthetic_corpus(corpus, shards=8, docs=4000)
    cli("dedup", *paths, "-o", tmp_path / "one", "--decisions", tmp_path / "one.jsonl")
    work = tmp_path / "work"
    proc = drive(
        cluster,
        tmp_path,
        inputs=[str(p) for p in paths],
        output=str(tmp_path / "out"),
        decisions=str(tmp_path / "d.jsonl"),
        work_dir=str(work),
        groups=3,
        max_retries=5,
    )
    # Kill a worker node while it runs one of the run's tasks (Ray titles a worker process
    # `ray::TASK` while it runs TASK), so that a task is interrupted in the middle.
    deadline = time.monotonic() + 180
    interrupted = None
    while interrupted is None:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "worker-1 never ran a task"
        time.sleep(0.005)
        interrupted = running_task(cluster, "worker-1")
    cluster.kill("worker-1")
    report = finish(proc)
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert data_files(tmp_path / "out") == data_files(tmp_path / "one")
    assert report["tasks_reused"] == 0, interrupted


DATA_DRIVER = """
import json, sys
import pyarrow as pa
import ray, ray.data
import neardup, neardup.ray
args = json.loads(sys.argv[1])
rows = json.load(open(args["rows"], encoding="utf-8"))
table = pa.Table.from_pylist(rows)
ray.init(address=args["address"], log_to_driver=False)
# Blocks of uneven sizes, as a dataset read from several files would have.
cuts = [0, 17, 160, 161, 300, len(rows)]
ds = ray.data.from_arrow([table.slice(a, b - a) for a, b in zip(cuts, cuts[1:])])
kept, decisions = neardup.ray.drop_duplicates(ds, column="text", id_field="id",
                                              with_decisions=True, threads=1)
kept = kept.to_arrow_refs()
out = {
    "kept": pa.concat_tables(ray.get(kept)).column("id").to_pylist(),
    "blocks": len(kept),
    "decisions": pa.concat_tables(ray.get(decisions.to_arrow_refs())).to_pylist(),
    "one_process": neardup.dedup_table(table, id_field="id").to_pylist(),
}
print(json.dumps(out))
"""


def test_a_ray_dataset_is_decided_as_one_process_decides_its_rows(tmp_path, cluster):
    from test_tables import ROWS

    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(ROWS), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-c", DATA_DRIVER,
         json.dumps({"address": cluster.address, "rows": str(rows)})],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=cluster.env(),
    )
    got = finish(proc)
    want = got["one_process"]
    assert len(want) == len(ROWS)
    assert {d["reason"] for d in want} >= {"unique", "near", "exact"}
    for row, (g, w) in enumerate(zip(got["decisions"], want)):
        for key in ("keep", "reason", "dup_of", "cluster", "id", "dup_of_id"):
            assert g[key] == w[key], (row, key)
        if w["similarity"] is None:
            assert g["similarity"] is None
        else:
            assert abs(g["similarity"] - w["similarity"]) < 1e-9
    assert got["kept"] == [r["id"] for r, d in zip(ROWS, want) if d["keep"]]
    assert got["blocks"] == 5
