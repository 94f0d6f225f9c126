#!/usr/bin/env bash
# Distributed stage 2 (keys / hot --groups / sign / decide / write) against one-process dedup.
#
#   benches/distributed.sh BIN CORPUS_DIR SHARDS "GROUPS..." [WORK_DIR]
#   e.g. benches/distributed.sh target/release/neardup ../shared/corpora/rustdocs/jsonl 4 "1 4 16"
#
# Runs every step as its own process (one after another, each with all cores, as a scheduler
# with one machine per step would), and prints per step: wall seconds, CPU seconds (user + sys)
# and peak RSS; per G: bytes between the steps per hot sample, the largest group's share of hot
# rows, and whether the decisions and outputs equal the one-process run's. Needs GNU time.
set -euo pipefail
BIN=$(realpath "$1")
CORPUS=$(realpath "$2")
SHARDS=$3
GROUPS_LIST=$4
WORK=${5:-$(mktemp -d)}
mkdir -p "$WORK"
cd "$WORK"

mapfile -t FILES < <(ls "$CORPUS" | sort)
PER=$(((${#FILES[@]} + SHARDS - 1) / SHARDS))

# step NAME CMD...: runs CMD, appends "NAME wall cpu rss_mb" to steps.txt
step() {
  local name=$1
  shift
  /usr/bin/time -f "%e %U %S %M" -o time.txt "$@" -q
  read -r wall user sys rss <time.txt
  printf "%-14s %8.2f %8.2f %8.0f\n" "$name" "$wall" "$(echo "$user + $sys" | bc)" \
    "$(echo "$rss / 1024" | bc)" | tee -a steps.txt
}

inputs=()
for f in "${FILES[@]}"; do inputs+=("$CORPUS/$f"); done

: >steps.txt
echo "step            wall_s    cpu_s   rss_mb"
rm -rf one one.jsonl
step dedup "$BIN" dedup "${inputs[@]}" -o one --decisions one.jsonl
tables=()
for ((i = 0; i < SHARDS; i++)); do
  part=("${inputs[@]:$((i * PER)):$PER}")
  [ ${#part[@]} -eq 0 ] && continue
  step "keys-$i" "$BIN" keys "${part[@]}" --shard "$i" -o "keys-$i.ndk"
  tables+=("keys-$i.ndk")
done
S=${#tables[@]}

for G in $GROUPS_LIST; do
  echo "== G=$G ($S shards)"
  rm -rf sig-* decided-* OUT d-*.jsonl hot.ndh hot.json
  step "hot" "$BIN" hot "${tables[@]}" --groups "$G" -o hot.ndh --report hot.json
  sigs=()
  for ((i = 0; i < S; i++)); do
    step "sign-$i" "$BIN" sign "keys-$i.ndk" --hot hot.ndh -o "sig-$i"
    sigs+=("sig-$i")
  done
  decided=()
  for ((g = 0; g < G; g++)); do
    step "decide-$g" "$BIN" decide "${sigs[@]}" --hot hot.ndh --group "$g" -o "decided-$g"
    decided+=("decided-$g")
  done
  for ((i = 0; i < S; i++)); do
    step "write-$i" "$BIN" write "keys-$i.ndk" --hot hot.ndh --decided "${decided[@]}" -o OUT \
      --decisions "d-$i.jsonl"
  done
  python3 - "$G" "$S" <<'EOF'
import json, os, sys, glob
G, S = int(sys.argv[1]), int(sys.argv[2])
hot = json.load(open("hot.json"))
plan = hot.get("plan") or {"group_rows": [hot["hot_samples"]], "largest_component": None}
hot_samples = hot["hot_samples"]
sig_bytes = sum(os.path.getsize(p) for p in glob.glob("sig-*/group-*.bin"))
dec_bytes = sum(os.path.getsize(p) for p in glob.glob("decided-*/shard-*.bin"))
signed = sum(sum(json.load(open(f"sig-{i}/manifest.json"))["signed"]["samples"]) for i in range(S))
print(f"hot samples {hot_samples}, signed {signed}; sign output {sig_bytes / max(signed, 1):.0f} B "
      f"per hot sample ({sig_bytes / 1e6:.1f} MB), decide output {dec_bytes / max(signed, 1):.1f} B "
      f"per hot sample; largest group {max(plan['group_rows']) / max(sum(plan['group_rows']), 1):.1%} "
      f"of hot rows (largest component {plan['largest_component']})")
EOF
  cat d-*.jsonl >dist.jsonl
  if cmp -s one.jsonl dist.jsonl; then echo "decisions identical"; else echo "DECISIONS DIFFER"; fi
  for f in "${FILES[@]}"; do cmp -s "one/$f" "OUT/$f" || echo "OUTPUT $f DIFFERS"; done
  awk -v g="$G" '
    $1 == "dedup" { d = $3 }
    $1 ~ /^keys-/ { k += $3 }
    $1 == "hot" || $1 ~ /^(sign|decide|write)-/ { c += $3; if ($1 ~ /^decide-/ && $4 > r) r = $4 }
    END { printf "CPU: distributed %.1f s (keys %.1f + hot/sign/decide/write %.1f) vs dedup %.1f s: %.2fx; largest decide RSS %d MB\n", k + c, k, c, d, (k + c) / d, r }
  ' steps.txt
  # steps.txt keeps dedup and keys; this G's steps go before the next G.
  sed -i "/^hot/,\$d" steps.txt
done
echo "work dir: $WORK"
