"""Ray overhead: ``neardup.ray.dedup`` on a local 3-node cluster against one ``neardup dedup``.

    .venv/bin/python benches/ray_overhead.py --bin target/release/neardup \\
        --corpus ../shared/corpora/rustdocs/jsonl [--groups 3] [--rounds 3]

Starts a head and two worker nodes on 127.0.0.1 (one CPU each, stopped by pid at the end; see
crates/python/tests/local_ray.py), in a network namespace with only loopback that it runs itself
in first (root, or where user namespaces are allowed), then alternates, round after round: the CLI over every file of
the corpus (all cores), and a driver process running ``neardup.ray.dedup`` over the same files,
one shard per file, with a fresh ``work_dir``. Prints each run's wall seconds, the median ratio
Ray / CLI, and checks that the decisions and data files are identical. While the Ray runs go,
it samples the resident memory of the cluster's task workers (Ray names a worker process
``ray::TASK`` while it runs TASK), so it prints each step's peak RSS per task (workers are reused:
a figure includes what earlier tasks on that worker left allocated), and, first, the RSS of a
worker that has imported neardup and run nothing (what Ray itself costs per worker process).

The neardup package (with its Ray extra) must be installed in the Python that runs this.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crates" / "python" / "tests"))
from local_ray import LocalCluster, kill_session, run_in_private_network  # noqa: E402

BASELINE = """
import json, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=1)
def idle_worker_rss():
    import neardup
    with open("/proc/self/status", encoding="utf-8") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

print(json.dumps(ray.get(idle_worker_rss.remote())))
"""

DRIVER = """
import json, sys, neardup.ray
args = json.loads(sys.argv[1])
print(json.dumps(neardup.ray.dedup(**args)))
"""


def data_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.name.startswith(("_SUCCESS", ".")):
            h.update(str(p.relative_to(directory)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


class RssSampler:
    """Samples, every 20 ms, the RSS of the given processes by their title (``ray::…``)."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.peak: Dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in self.cluster.pids():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        title = f.read().split(b"\0")[0].decode(errors="replace")
                    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
                        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
                except (OSError, StopIteration, ValueError):
                    continue
                if title.startswith("ray::"):
                    name = title.split()[0][len("ray::") :]
                    self.peak[name] = max(self.peak.get(name, 0), rss)
            time.sleep(0.02)

    def __enter__(self) -> "RssSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def main() -> None:
    run_in_private_network([sys.executable, *sys.argv])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the neardup CLI (release build)")
    ap.add_argument("--corpus", required=True, help="a directory of input files, one shard each")
    ap.add_argument("--groups", type=int, default=3, help="decide tasks [default: 3]")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    binary = str(Path(args.bin).resolve())
    inputs = [str(p) for p in sorted(Path(args.corpus).resolve().iterdir()) if p.is_file()]
    work = Path(tempfile.mkdtemp(prefix="nd-ray-bench-"))
    cli_times: List[float] = []
    ray_times: List[float] = []
    try:
        with LocalCluster(workers=2) as cluster:
            env = cluster.env()
            print(f"cluster: 3 nodes of 1 CPU on 127.0.0.1:{cluster.port}; {len(inputs)} shards, "
                  f"{args.groups} groups; machine: {os.cpu_count()} cores", flush=True)
            baseline = subprocess.run([sys.executable, "-c", BASELINE, cluster.address], check=True,
                                      capture_output=True, text=True, env=env, timeout=300)
            print(f"a Ray worker with neardup imported, before any task: "
                  f"{int(baseline.stdout.strip().splitlines()[-1]) / 1024:.0f} MB RSS", flush=True)
            reference = None
            for r in range(args.rounds):
                out, dec = work / "cli", work / "cli.jsonl"
                shutil.rmtree(out, ignore_errors=True)
                dec.unlink(missing_ok=True)
                t = time.perf_counter()
                subprocess.run([binary, "dedup", *inputs, "-o", str(out), "--decisions", str(dec), "-q"],
                               check=True)
                cli_times.append(time.perf_counter() - t)
                reference = (dec.read_bytes(), data_digest(out))

                rout, rdec, rwork = work / "ray", work / "ray.jsonl", work / "work"
                for p in (rout, rwork):
                    shutil.rmtree(p, ignore_errors=True)
                rdec.unlink(missing_ok=True)
                driver_args = dict(inputs=inputs, output=str(rout), decisions=str(rdec), work_dir=str(rwork),
                                   groups=args.groups, address=cluster.address)
                with RssSampler(cluster) as sampler:
                    t = time.perf_counter()
                    proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(driver_args)],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                            start_new_session=True, env=env)
                    try:
                        stdout, stderr = proc.communicate(timeout=3600)
                    finally:
                        kill_session(proc.pid)
                    ray_times.append(time.perf_counter() - t)
                if proc.returncode != 0:
                    sys.exit(f"the Ray run failed:\n{stderr[-4000:]}")
                report = json.loads(stdout.strip().splitlines()[-1])
                same = (rdec.read_bytes(), data_digest(rout)) == reference
                print(f"round {r + 1}: cli {cli_times[-1]:6.2f} s   ray {ray_times[-1]:6.2f} s   "
                      f"ratio {ray_times[-1] / cli_times[-1]:5.2f}   tasks {report['tasks']} on "
                      f"{len(report['nodes'])} nodes   identical: {same}", flush=True)
                if not same:
                    sys.exit("the Ray run's decisions or data files differ from the CLI's")
                print("    task seconds (sum / longest): " + ", ".join(
                    f"{k} {v['seconds']:.2f} / {v['longest_seconds']:.2f}" for k, v in report["steps"].items()))
                if r == 0:
                    print("peak RSS per task (MB, includes the worker's own):",
                          ", ".join(f"{k} {v / 1024:.0f}" for k, v in sorted(sampler.peak.items())))
        cli_m, ray_m = statistics.median(cli_times), statistics.median(ray_times)
        print(f"median: cli {cli_m:.2f} s, ray {ray_m:.2f} s, ray / cli {ray_m / cli_m:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
