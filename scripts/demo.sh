#!/usr/bin/env bash
# The main job, locally: DynamoDB Local + the Lambda functions (under `cargo lambda watch`) on
# the sample events in events/, with a readable result. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# Where cargo builds (CARGO_TARGET_DIR when set): the demo runs the ops, bench and example
# binaries from there.
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

bash scripts/tools.sh
mkdir -p .demo
LOG=.demo/watch.log

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "building the functions, the ops tool and the bench tool (for the crash demo)"
cargo build --quiet --workspace --bins
cargo build --quiet -p dynamodb-exactly-once --example plain

LAMBDA_PORT=$(free_port)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

say "starting DynamoDB Local"
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
. scripts/lib/dynamodb-local.sh
start_dynamodb_local .demo/dynamodb.log
PIDS+=("$DYNAMODB_LOCAL_PID")
echo "on $AWS_ENDPOINT_URL_DYNAMODB"
export RUST_LOG=info
# shellcheck source=demo.env
source scripts/demo.env

ops() { "$TARGET/debug/ops" "$@"; }

say "creating the tables declared in template.yaml"
ops create-tables --template template.yaml

say "starting cargo lambda watch on port $LAMBDA_PORT"
cargo lambda watch -A 127.0.0.1 -P "$LAMBDA_PORT" >"$LOG" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
  if (echo >"/dev/tcp/127.0.0.1/$LAMBDA_PORT") 2>/dev/null; then break; fi
  sleep 0.3
done

# invoke FUNCTION EVENT_FILE: run one event, print the response and the function's summary.
invoke() {
  local fn=$1 file=$2 before
  before=$(wc -l <"$LOG")
  printf '\n-- %s <- %s\n' "$fn" "$file"
  local response
  # Delivered as new: the samples carry fixed arrival times (see scripts/arriving-now.py).
  python3 "$ROOT/scripts/arriving-now.py" "$file" "$ROOT/.demo/event.json"
  response=$(cargo lambda invoke "$fn" --data-file "$ROOT/.demo/event.json" -A 127.0.0.1 -P "$LAMBDA_PORT" 2>&1) || {
    echo "invoke failed: $response"; return 1; }
  echo "   response: $response"
  sleep 0.3
  tail -n +"$((before + 1))" "$LOG" | python3 "$ROOT/scripts/summarize-logs.py"
}

# show TABLE: the table's items, readably.
show() { ops show "$1"; }

say "ratchet-writer: in-order, out-of-order, duplicated and redelivered records, deletes"
echo "Expect: every record is applied, stale, superseded or a duplicate; the table ends with the"
echo "newest version of each item, and User#2/Movie#Z stays deleted (an older put cannot revive it)."
invoke ratchet-writer events/ratchet-sqs-in-order.json
invoke ratchet-writer events/ratchet-kinesis-out-of-order.json
invoke ratchet-writer events/ratchet-sqs-duplicates.json
invoke ratchet-writer events/ratchet-kinesis-duplicates.json
echo "Redelivering the first batch (as Lambda does after a failure) changes nothing:"
invoke ratchet-writer events/ratchet-kinesis-in-order.json
show RatchetTable

say "ratchet-writer: malformed records are kept, never retried forever"
echo "Expect: no batchItemFailures; six dead letters with their reason; the valid record applied."
invoke ratchet-writer events/ratchet-sqs-malformed.json
ops dead-letters list --table DeadLetterTable --function ratchet-writer 2>&1 |
  python3 -c 'import sys, json
for line in sys.stdin:
    try: d = json.loads(line)
    except ValueError: print("   " + line.rstrip()); continue
    print("   %-40s %-20s %s" % (d["position"]["id"], d["reason"]["code"], d["reason"]["message"][:70]))'

for step in scripts/demo.d/*.sh; do
  [ -e "$step" ] || continue
  # shellcheck disable=SC1090
  source "$step"
done

say "done"
