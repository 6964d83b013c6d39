# Demo step for DynamoDB Streams (sourced by the demo script, which provides `invoke` and `show`).
# A batch of OrdersTable's stream (INSERT, MODIFY, REMOVE) replicated by ratchet-writer (ordered
# by sequence number) and totalled per customer by counter-writer (once per eventID; journal
# mode: the totals move when counter-rollup runs).

echo
echo "== ratchet-writer: a DynamoDB stream batch (RATCHET_CHANGES=replicate)"
echo "   expect no batchItemFailures; alice/o1 Amount 45 Tags {gift, rush}; alice/o2 a tombstone;"
echo "   bob/o1 without the source's _txLock; Timestamp = the sequence number as a 64-digit string"
invoke ratchet-writer events/orders-dynamodb-stream.json

echo
echo "== counter-writer: the same batch (COUNTER_CHANGE_GROUP_BY=PK, COUNT=orders, SUM=amount:Amount)"
echo "   then counter-rollup; expect alice/orders-total: orders 1, amount 45; bob/orders-total: orders 1, amount 7"
invoke counter-writer events/orders-dynamodb-stream.json
rollup

echo
echo "== both again with the same records in another order (a retried batch, parallel shards)"
echo "   expect every record a duplicate (or superseded in its batch): the replica and the totals do not change"
invoke ratchet-writer events/orders-dynamodb-stream-redelivered.json
invoke counter-writer events/orders-dynamodb-stream-redelivered.json
rollup

echo
echo "== RatchetTable (the replica's rows are alice/o1, alice/o2, bob/o1) and CounterTable (orders-total rows)"
show RatchetTable
show CounterTable
