#!/usr/bin/env bash
# Throughput of `neardup dedup` over local files against the same files through a local S3
# server (moto's, on 127.0.0.1), runs alternated. Writes the decisions only (no dataset), so the
# comparison is of reading.
#   benches/object_storage.sh CORPUS_DIR [RUNS]
# Needs NEARDUP_MOTO_SERVER (a moto_server binary) and target/release/neardup; also compares
# NEARDUP_BASELINE (a neardup built from main, optional) on the local files.
set -euo pipefail
corpus=${1:?usage: benches/object_storage.sh CORPUS_DIR [RUNS]}
runs=${2:-3}
bin=${NEARDUP:-$(dirname "$0")/../target/release/neardup}
server=${NEARDUP_MOTO_SERVER:?set NEARDUP_MOTO_SERVER to a moto_server binary}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$server" -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
server_pid=$!
trap 'kill $server_pid; rm -rf "$work"' EXIT
export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench \
  AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port" && break
  sleep 0.1
done
auth='Authorization: AWS4-HMAC-SHA256 Credential=bench/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0'
curl -s -X PUT -H "$auth" "http://127.0.0.1:$port/bench" >/dev/null
(cd "$corpus" && find . -type f | sort) | while read -r f; do
  curl -s -X PUT -H "$auth" -H 'Content-Type: application/octet-stream' \
    --data-binary "@$corpus/$f" "http://127.0.0.1:$port/bench/${f#./}" >/dev/null
done

# One timed run: prints the wall seconds.
timed() {
  local start end bin=$1
  shift
  start=$(date +%s.%N)
  "$bin" --quiet "$@" --decisions "$work/d.jsonl" >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
for sub in $(cd "$corpus" && ls); do
  for r in $(seq "$runs"); do
    l=$(timed "$bin" dedup "$corpus/$sub")
    cp "$work/d.jsonl" "$work/local.jsonl"
    s=$(timed "$bin" dedup "s3://bench/$sub/")
    sed "s#s3://bench/$sub/#$corpus/$sub/#g" "$work/d.jsonl" | cmp -s - "$work/local.jsonl" \
      || { echo "decisions differ for $sub" >&2; exit 1; }
    line="$sub run $r: local ${l}s, s3 ${s}s"
    if [ -n "${NEARDUP_BASELINE:-}" ]; then
      b=$(timed "$NEARDUP_BASELINE" dedup "$corpus/$sub")
      line="$line, baseline local ${b}s"
    fi
    echo "$line"
  done
done
