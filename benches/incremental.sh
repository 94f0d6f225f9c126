#!/usr/bin/env bash
# Deduplicating a new dump against a saved index: what it costs next to the joint run, and how
# large the index is. A = the first SPLIT parts of rustdocs, B = the rest.
#
#   bash benches/incremental.sh [WORK_DIR]
#
# Env: BIN (default target/release/neardup), CORPUS (rustdocs JSONL directory, default
# ../corpus/rustdocs/jsonl; ../shared/bench/build_rustdocs.py builds it), SPLIT (parts in A,
# default 6 of 8), ROUNDS (default 3), VERIFY (exact or estimate, default exact). Each round
# runs, alternated: the joint run over A then B; A alone; A saving its index; B alone; B against
# A's index. Prints wall seconds, CPU seconds and peak RSS (GNU time) per run, the index's bytes
# per kept sample, what B's run read back, and checks that B's decisions against the index equal
# B's part of the joint run's. Used for docs/benchmarks.md, "Deduplicating against a saved index".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
corpus=${CORPUS:-$root/../corpus/rustdocs/jsonl}
work=${1:-$(mktemp -d)}
rounds=${ROUNDS:-3}
split=${SPLIT:-6}
verify=${VERIFY:-exact}
bin=$(realpath "${BIN:-$root/target/release/neardup}")
mkdir -p "$work"
mapfile -t parts < <(ls "$corpus"/*.jsonl | sort)
a=("${parts[@]:0:$split}")
b=("${parts[@]:$split}")

timed() { # timed NAME CMD...: one run, its wall/CPU/RSS appended to $work/times
  local name=$1
  shift
  /usr/bin/time -f "$name %e %U %S %M" -a -o "$work/times" "$@" -q --verify "$verify"
}

rm -f "$work/times"
for round in $(seq "$rounds"); do
  rm -rf "$work"/out-* "$work"/*.jsonl "$work"/idx-a "$work"/*.json
  timed joint "$bin" dedup "${a[@]}" "${b[@]}" --decisions "$work/joint.jsonl"
  timed a "$bin" dedup "${a[@]}" --decisions "$work/a.jsonl"
  timed a+index "$bin" dedup "${a[@]}" --decisions "$work/a2.jsonl" --index-out "$work/idx-a" \
    --report "$work/report-a.json"
  timed b "$bin" dedup "${b[@]}" --decisions "$work/b.jsonl"
  timed b-against "$bin" dedup "${b[@]}" --decisions "$work/b-against.jsonl" \
    --against "$work/idx-a" --report "$work/report-b.json"
done

python3 - "$work" "${#a[@]}" <<'EOF'
import json, statistics, sys
from collections import defaultdict

work, n_a = sys.argv[1], int(sys.argv[2])
runs = defaultdict(list)
for line in open(f"{work}/times"):
    name, wall, user, sys_, rss = line.split()
    runs[name].append((float(wall), float(user) + float(sys_), int(rss) / 1024))
for name, xs in runs.items():
    walls = sorted(x[0] for x in xs)
    print(f"{name:10} wall {walls[0]:.2f}-{walls[-1]:.2f} s (median {statistics.median(walls):.2f}), "
          f"CPU median {statistics.median(x[1] for x in xs):.2f} s, "
          f"peak RSS median {statistics.median(x[2] for x in xs):.0f} MB")
ra = json.load(open(f"{work}/report-a.json"))
rb = json.load(open(f"{work}/report-b.json"))
idx = ra["index"]
print(f"index: {idx['bytes']} bytes, {idx['entries']} entries, {idx['kept']} kept of "
      f"{idx['samples']} samples: {idx['bytes'] / idx['kept']:.0f} bytes per kept sample "
      f"(self-contained: {idx['self_contained']}, read back to store sketches: {idx['records_read']})")
t = ra["stage1"]
print(f"A's key table would hold {t['samples'] * t['columns'] * 8} bytes "
      f"({t['columns'] * 8} per sample)")
print("B against the index:", json.dumps(rb["against"]))
joint = [json.loads(l) for l in open(f"{work}/joint.jsonl")]
mine = [json.loads(l) for l in open(f"{work}/b-against.jsonl")]
b_files = set(rb["files"])
joint_b = [r for r in joint if r["file"] in b_files]
assert mine == joint_b, "B against the index differs from B's part of the joint run"
print(f"B's {len(mine)} decisions equal its part of the joint run; "
      f"{sum(1 for r in mine if r.get('dup_of_file') and r['dup_of_file'] not in b_files)} "
      f"drops name a record of A")
EOF
