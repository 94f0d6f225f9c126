#!/usr/bin/env bash
# End-to-end benchmark of neardup against the Python peers (rensa, datasketch, lshcurator) on the
# rustdocs corpus, in one session on one machine, so the ratios are fair whatever the machine's load.
#
#   bash benches/peers.sh [WORK_DIR]          (default WORK_DIR: target/peers-bench)
#
# Needs ../shared (the corpus builder, the peers and the scorers). Creates the peers' venv and the
# corpus under WORK_DIR when they are missing. Env: SLICE (docs in the quality slice, default
# 1000), FULL_PEERS (peers timed on the full corpus, default "rensa").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$root/../shared}
work=${1:-$root/target/peers-bench}
slice=${SLICE:-1000}
full_peers=${FULL_PEERS:-rensa}
mkdir -p "$work"
[ -d "$shared/bench" ] || { echo "needs $shared (benchmark corpus builders and peers)" >&2; exit 1; }

venv=${PEERS_VENV:-$work/venv}
[ -x "$venv/bin/python" ] || bash "$shared/bench/peers/setup.sh" "$venv"
py=$venv/bin/python
corpus=${CORPUS:-$work/rustdocs}
[ -d "$corpus/jsonl" ] || "$py" "$shared/bench/build_rustdocs.py" "$corpus"
(cd "$root" && cargo build --release --quiet)
nd=$root/target/release/neardup
results=$work/results.jsonl
: > "$results"

# time_cmd NAME CMD...: wall seconds and peak RSS (MB) of the command (GNU time; the Python
# peers' multiprocess RSS is also in their own JSON line in $work/NAME.log).
time_cmd() {
  local name=$1; shift
  /usr/bin/time -f '%e %M' -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 || {
    echo "$name failed; see $work/$name.log" >&2; return 1; }
  read -r wall rss_kb < "$work/$name.time"
  echo "{\"run\": \"$name\", \"wall_s\": $wall, \"peak_rss_mb\": $((rss_kb / 1024))}" >> "$results"
}

full=("$corpus"/jsonl/*.jsonl)
echo "== full corpus: ${#full[@]} files, $(du -sh "$corpus/jsonl" | cut -f1)"
# Like the peers' scripts, the timed runs write the decisions only; writing the filtered dataset
# too (fsynced, into a fresh directory, so it includes the disk) is timed separately.
time_cmd neardup-full "$nd" dedup "${full[@]}" -q --decisions "$work/neardup-full.jsonl"
time_cmd neardup-full-1thread "$nd" dedup "${full[@]}" -q -j 1 --decisions "$work/neardup-full-1t.jsonl"
rm -rf "$work/neardup-full-out"
time_cmd neardup-full-dataset "$nd" dedup "${full[@]}" -q --decisions "$work/neardup-full-ds.jsonl" --output "$work/neardup-full-out"
for peer in $full_peers; do
  case $peer in
    rensa|datasketch) time_cmd "$peer-full" "$py" "$shared/bench/peers/run_datasketch.py" --lib "$peer" "${full[@]}" --out "$work/$peer-full.jsonl" ;;
    lshcurator) time_cmd lshcurator-full "$py" "$shared/bench/peers/run_lshcurator.py" "${full[@]}" --out "$work/lshcurator-full.jsonl" ;;
  esac
done

echo "== quality slice: first $slice documents of part-00000"
head -n "$slice" "$corpus/jsonl/part-00000.jsonl" > "$work/slice.jsonl"
[ -f "$work/truth-$slice/keep-0.8.txt" ] || "$py" "$shared/bench/exact_pairs.py" "$work/slice.jsonl" --out "$work/truth-$slice"
time_cmd neardup-slice "$nd" dedup "$work/slice.jsonl" -q --decisions "$work/neardup-slice.jsonl"
time_cmd neardup-slice-verify "$nd" dedup "$work/slice.jsonl" -q --verify exact --decisions "$work/neardup-slice-verify.jsonl"
time_cmd rensa-slice "$py" "$shared/bench/peers/run_datasketch.py" --lib rensa "$work/slice.jsonl" --out "$work/rensa-slice.jsonl"
time_cmd datasketch-slice "$py" "$shared/bench/peers/run_datasketch.py" --lib datasketch "$work/slice.jsonl" --out "$work/datasketch-slice.jsonl"
time_cmd lshcurator-slice "$py" "$shared/bench/peers/run_lshcurator.py" "$work/slice.jsonl" --out "$work/lshcurator-slice.jsonl"
for run in neardup-slice neardup-slice-verify rensa-slice datasketch-slice lshcurator-slice; do
  score=$("$py" "$shared/bench/score.py" "$work/$run.jsonl" --truth "$work/truth-$slice" --threshold 0.8)
  echo "{\"run\": \"$run\", \"score\": $score}" >> "$results"
done

"$py" - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = {r["run"]: r for r in rows if "wall_s" in r}
s = {r["run"]: r["score"] for r in rows if "score" in r}
print(f"{'run':<24}{'wall s':>9}{'peak MB':>9}{'vs neardup':>12}{'precision':>11}{'recall':>8}")
for name, r in t.items():
    base = t["neardup-full" if name.endswith("full") or "full-" in name else "neardup-slice"]["wall_s"]
    sc = s.get(name, {})
    print(f"{name:<24}{r['wall_s']:>9.2f}{r['peak_rss_mb']:>9.0f}{r['wall_s'] / base:>11.1f}x"
          f"{sc.get('precision', float('nan')):>11.3f}{sc.get('recall', float('nan')):>8.3f}")
EOF
