# Demo step for counter-writer and counter-rollup (sourced by the demo script, which provides
# `invoke` and `show`). Idempotent counters in journal mode (COUNTER_MODE=journal, the counter
# stack's default): the writer puts one journal item per idempotency key into
# CounterJournalTable (a key put again changes nothing that counts); counter-rollup reads the
# journal's stream and adds each key seen for the first time to its counter item in
# CounterTable, once. Counters move when the roll-up runs (deployed: every minute).

# rollup: one scheduled run of counter-rollup (the schedule's payload is not used).
rollup() { invoke counter-rollup events/counter-rollup-schedule.json; }

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
echo "   applies nothing (keys=0) and no counter changes"
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
echo "   base64: a roll-up run again, or two at once, skips what is applied already; it leaves the"
echo "   item 20 minutes after its shard is read to its end)"
show CounterTable
echo "   CounterJournalTable: $(ops scan CounterJournalTable 2>/dev/null | wc -l) items (one per key, expiring after the window by TTL, and the roll-up's checkpoint per stream shard under pk ~rollup)"
