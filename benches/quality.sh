#!/usr/bin/env bash
# Quality and cost of two neardup settings or binaries, side by side: precision and recall
# against exact 5-gram Jaccard truth on two slices of rustdocs, candidates and verifications per
# document, and wall time on the full corpus with the two alternated.
#
#   bash benches/quality.sh [WORK_DIR]
#
# Env: OLD, NEW (binaries; default both target/release/neardup), OLD_FLAGS, NEW_FLAGS (extra
# flags of each, e.g. OLD_FLAGS="--bands 16 --rows 8"), CORPUS (rustdocs JSONL directory,
# default ../corpus/rustdocs/jsonl; ../shared/bench/build_rustdocs.py builds it), SHARED
# (default ../shared), PYTHON (default python3), ROUNDS (full-corpus rounds, default 5),
# THRESHOLD (default 0.8). Slices: the first 1,000 documents of part-00000 and the first 3,000
# of part-00003; truth from ../shared/bench/exact_pairs.py (pure Python, about a minute for
# both, kept in WORK_DIR for the next run), scored by ../shared/bench/score.py (greedy
# first-seen ideal) and `neardup eval` (every sample drawn: "strict recall" counts samples with
# an earlier kept near copy). Wall and CPU time via GNU time. Used for docs/benchmarks.md,
# "Default bands and rows".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$root/../shared}
corpus=${CORPUS:-$root/../corpus/rustdocs/jsonl}
work=${1:-$(mktemp -d)}
rounds=${ROUNDS:-5}
t=${THRESHOLD:-0.8}
old=$(realpath "${OLD:-$root/target/release/neardup}")
new=$(realpath "${NEW:-$root/target/release/neardup}")
read -r -a old_flags <<< "${OLD_FLAGS:-}"
read -r -a new_flags <<< "${NEW_FLAGS:-}"
py=${PYTHON:-python3}
mkdir -p "$work"
[ -d "$shared/bench" ] || { echo "needs $shared (exact_pairs.py, score.py)" >&2; exit 1; }

variant_bin() { if [ "$1" = old ]; then echo "$old"; else echo "$new"; fi; }
variant_flags() { if [ "$1" = old ]; then echo "${old_flags[@]}"; else echo "${new_flags[@]}"; fi; }

# per_doc REPORT: comparisons and verifications per document of a run report.
per_doc() {
  "$py" - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["stage2"]; d = s["deduper"]
print(f'{d["comparisons"] / s["samples"]:.2f} {d["verifications"] / s["samples"]:.3f} '
      f'{s["records_dropped"]}')
EOF
}

echo "| run | slice | precision | recall (greedy truth) | strict recall (eval) | comparisons / doc | verifications / doc |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for slice in "part-00000.jsonl 1000" "part-00003.jsonl 3000"; do
  read -r file n <<< "$slice"
  name=${file%.jsonl}-$n
  head -n "$n" "$corpus/$file" > "$work/$name.jsonl"
  [ -f "$work/truth-$name/keep-$t.txt" ] ||
    "$py" "$shared/bench/exact_pairs.py" "$work/$name.jsonl" --out "$work/truth-$name" > /dev/null
  for v in old new; do
    bin=$(variant_bin $v)
    read -r -a flags <<< "$(variant_flags $v)"
    dec=$work/$v-$name.jsonl
    "$bin" dedup "$work/$name.jsonl" -q --threshold "$t" "${flags[@]}" --decisions "$dec" \
      --report "$work/$v-$name.report.json" --overwrite
    score=$("$py" "$shared/bench/score.py" "$dec" --truth "$work/truth-$name" --threshold "$t")
    "$new" eval "$work/$name.jsonl" --decisions "$dec" --samples "$n" --clusters 0 \
      --eval-report "$work/$v-$name.eval.json" > /dev/null 2>&1
    read -r cmp ver _ <<< "$(per_doc "$work/$v-$name.report.json")"
    "$py" - "$score" "$work/$v-$name.eval.json" "$v ${flags[*]}" "$name" "$cmp" "$ver" <<'EOF'
import json, sys
s = json.loads(sys.argv[1]); e = json.load(open(sys.argv[2]))
p = e["precision"]; r = e["recall"]
print(f'| {sys.argv[3].strip()} | {sys.argv[4]} | {s["precision"]:.4f} | {s["recall"]:.4f} '
      f'({s["dropped"]} of {s["ideal_dropped"]} ideal drops) | {r["strict_recall"]:.4f} '
      f'({r["dropped_with_earlier_kept_near_copy"]} of {r["with_earlier_kept_near_copy"]}) '
      f'| {sys.argv[5]} | {sys.argv[6]} |')
EOF
  done
done

echo
echo "Full corpus ($corpus), decisions only, $rounds rounds alternated:"
files=("$corpus"/*.jsonl)
rm -f "$work/full-times.txt"
for r in $(seq "$rounds"); do
  for v in old new; do
    bin=$(variant_bin $v)
    read -r -a flags <<< "$(variant_flags $v)"
    /usr/bin/time -f '%e %U %S' -o "$work/time.txt" "$bin" dedup "${files[@]}" -q --threshold "$t" \
      "${flags[@]}" --decisions "$work/$v-full.jsonl" --report "$work/$v-full.report.json" --overwrite
    echo "$v $(cat "$work/time.txt")" >> "$work/full-times.txt"
  done
done
echo "| run | wall s, median (min–max) | CPU s, median (min–max) | dropped | comparisons / doc | verifications / doc |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for v in old new; do
  read -r cmp ver dropped <<< "$(per_doc "$work/$v-full.report.json")"
  "$py" - "$v $(variant_flags $v)" "$dropped" "$cmp" "$ver" "$work/full-times.txt" <<'EOF'
import statistics, sys
name, dropped, cmp, ver, path = sys.argv[1:]
runs = [l.split() for l in open(path) if l.split()[0] == name.split()[0]]
wall = [float(r[1]) for r in runs]
cpu = [float(r[2]) + float(r[3]) for r in runs]
span = lambda x: f'{statistics.median(x):.2f} ({min(x):.2f}–{max(x):.2f})'
print(f'| {name.strip()} | {span(wall)} | {span(cpu)} | {dropped} | {cmp} | {ver} |')
EOF
done
rm -f "$work/full-times.txt"
