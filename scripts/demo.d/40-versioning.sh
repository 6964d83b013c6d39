# Demo step for versioned writes and the ratchet's history mode (sourced by the demo script,
# which provides `say`, `invoke`, `show`, `ops`, `free_port`, `PIDS`, `ROOT` and the DynamoDB
# Local environment; the tables come from template.yaml).

say "versioning: latest + history written by one transaction per change (examples/versioning.rs)"
echo "Expect: create = version 1; alice's update from 1 = version 2, bob's update from 1 a Conflict"
echo "(current 2, nothing written); version 3; the delete = version 4 (a tombstone); the restore of"
echo "version 2 = version 5 with version 2's content, and the same restore again still version 5;"
echo "the history 5..1 newest first, two per page; 4 write units per written version."
cargo build --quiet -p dynamodb-exactly-once --example versioning
"$TARGET/debug/examples/versioning" VersionedTable VersionedHistoryTable
show VersionedTable
show VersionedHistoryTable

say "ratchet-writer in history mode: every record in RatchetHistoryTable, the latest still coalesced"
echo "A second cargo lambda watch with RATCHET_HISTORY_TABLE=RatchetHistoryTable runs"
echo "events/ratchet-history-sqs.json: six records of User#4/Movie#H (a late put, a duplicate, two"
echo "puts with one ts, a delete, a put older than the delete). Expect no batchItemFailures; five"
echo "history rows (the duplicate shares its row), sorted by ts#tie-break; the latest item a"
echo "tombstone. The same batch again: nothing applied, the history unchanged."
HISTORY_PORT=$(free_port)
RATCHET_HISTORY_TABLE=RatchetHistoryTable cargo lambda watch -A 127.0.0.1 -P "$HISTORY_PORT" \
  >.demo/watch-history.log 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
  if (echo >"/dev/tcp/127.0.0.1/$HISTORY_PORT") 2>/dev/null; then break; fi
  sleep 0.3
done
(
  LAMBDA_PORT=$HISTORY_PORT
  LOG=.demo/watch-history.log
  invoke ratchet-writer events/ratchet-history-sqs.json
  invoke ratchet-writer events/ratchet-history-sqs.json
)
show RatchetHistoryTable
ops scan RatchetTable | grep 'Movie#H' | sed 's/^/   latest: /'
