# Demo step for counter-writer (sourced by the demo script, which provides `invoke` and `show`).
# Idempotent counters: each idempotency key is counted once, however often it is delivered.

echo
echo "== counter-writer: a batch with a producer duplicate (acct#42's key 15.dfc31777 sent twice)"
echo "   expect no batchItemFailures; acct#42 2024-11-22: logins 4, authz 14; acct#7: logins 2, authz 5"
invoke counter-writer events/counter-sqs-batch.json

echo
echo "== counter-writer: the SAME batch delivered again (a Lambda retry): every record is a duplicate"
echo "   expect no batchItemFailures and no change to any counter"
invoke counter-writer events/counter-sqs-batch.json

echo
echo "== counter-writer: the same records from Kinesis, plus a batch repeating one key across batches"
echo "   expect acct#7 logins 3 and a new item acct#42 2024-11-23 (logins 1, authz 1); nothing doubles"
invoke counter-writer events/counter-kinesis-batch.json
invoke counter-writer events/counter-kinesis-more.json
invoke counter-writer events/counter-sqs-more.json

echo
echo "== counter-writer: malformed records are dead-lettered (reason kept), the valid one counts"
echo "   expect no batchItemFailures; acct#9 logins 1; five dead letters of counter-writer"
invoke counter-writer events/counter-sqs-malformed.json
echo "   the kept records (replay with: ops dead-letters replay --table DeadLetterTable --function counter-writer):"
ops dead-letters list --table DeadLetterTable --function counter-writer 2>&1 | sed 's/^/   /'

echo
echo "== CounterTable: counters plus the protocol's own attributes"
echo "   (ctr_bucket = the item's bucket layout, ctr_keys_<start>_<until> = hashed idempotency keys per time bucket)"
show CounterTable
