# Demo step for counter-writer and counter-rollup (sourced by the demo script, which provides
# `invoke` and `show`). Idempotent counters in journal mode (COUNTER_MODE=journal, the counter
# stack's default): the writer puts one journal item per idempotency key into
# CounterJournalTable (a key put again changes nothing that counts); counter-rollup reads the
# journal's stream and adds each key seen for the first time to its counter item in
# CounterTable, once. Counters move when the roll-up runs (deployed: the handler of the
# journal's stream, invoked by Lambda's event source mapping with each shard's new INSERTs).

# rollup: counter-rollup invoked as the mapping invokes it, one tumbling window's event per
# shard of CounterJournalTable's stream (`ops counter stream-events`). Each event holds the
# whole stream, as a mapping retrying from its start would: the watermarks turn away every key
# applied before (`duplicates` in the summary), so only the new keys count.
rollup() {
  local n=0
  ops counter stream-events --table CounterJournalTable >"$ROOT/.demo/rollup-events.jsonl"
  while IFS= read -r line; do
    n=$((n + 1))
    printf '%s\n' "$line" >"$ROOT/.demo/rollup-$n.json"
    invoke counter-rollup "$ROOT/.demo/rollup-$n.json"
  done <"$ROOT/.demo/rollup-events.jsonl"
}

echo
echo "== counter-writer: a batch with a producer duplicate (acct#42's key 15.dfc31777 sent twice)"
echo "   expect no batchItemFailures; every key journaled, the second copy in the batch a duplicate"
invoke counter-writer events/counter-sqs-batch.json
echo
echo "== counter-rollup: the journal's new keys into CounterTable"
echo "   expect acct#42 2024-11-22: logins 4, authz 14; acct#7: logins 2, authz 5"
rollup
show CounterTable

echo
echo "== counter-writer: the SAME batch delivered again (a Lambda retry), then the roll-up"
echo "   expect no batchItemFailures; every record a duplicate (this warm writer remembers its keys;"
echo "   a cold one would put the same journal items again, which adds no new key); the roll-up"
echo "   applies nothing (applied=0: every key of the stream a duplicate) and no counter changes"
invoke counter-writer events/counter-sqs-batch.json
rollup

echo
echo "== counter-writer: the same records from Kinesis, plus a batch repeating one key across batches"
echo "   expect acct#7 logins 3 and a new item acct#42 2024-11-23 (logins 1, authz 1); nothing doubles"
invoke counter-writer events/counter-kinesis-batch.json
invoke counter-writer events/counter-kinesis-more.json
invoke counter-writer events/counter-sqs-more.json
rollup

echo
echo "== counter-writer: malformed records are dead-lettered (reason kept), the valid one counts"
echo "   expect no batchItemFailures; acct#9 logins 1 after the roll-up; five dead letters of counter-writer"
invoke counter-writer events/counter-sqs-malformed.json
rollup
echo "   the kept records (replay with: ops dead-letters replay --table DeadLetterTable --function counter-writer):"
ops dead-letters list --table DeadLetterTable --function counter-writer 2>&1 | sed 's/^/   /'

echo
echo "== CounterTable: counters plus the roll-up's watermarks"
echo "   (ctr_w_<shard> = per journal stream shard, the last sequence number applied and when, in"
echo "   base64: a batch delivered again, or two at once, skips what is applied already)"
show CounterTable
echo "   CounterJournalTable: $(ops scan CounterJournalTable 2>/dev/null | wc -l) items (one per key, expiring after the window by TTL; Lambda's mapping keeps the stream's position)"
