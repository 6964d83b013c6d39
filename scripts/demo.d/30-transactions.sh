# Demo step for tx-coordinator and tx-sweeper (sourced by the demo script, which provides
# `invoke`, `show` and `ops`). Settings: TX_* in scripts/demo.env.

echo
echo "== transactions: three accounts (plain items)"
ops tx seed AccountsTable alice=100 bob=20 carol=0

echo
echo "== tx-coordinator: transfer-0001 moves 30 from alice to bob (debit conditional on balance >= 30)"
echo "   expect no batchItemFailures, outcome committed, 1 write request (the fast path: one"
echo "   TransactWriteItems with both updates and the completed TX record); alice 70, bob 50"
invoke tx-coordinator events/tx-transfer.json
show AccountsTable

echo
echo "== tx-coordinator: the same message again (an SQS redelivery): txId makes it idempotent"
echo "   expect outcome duplicate; balances unchanged"
invoke tx-coordinator events/tx-transfer.json

echo
echo "== tx-coordinator: transfer-0002 tries to move 500 from alice (she has 70)"
echo "   expect outcome rolled_back (request 0's condition failed); alice 70, bob 50 unchanged"
invoke tx-coordinator events/tx-overdraft.json
show AccountsTable
ops tx status transfer-0002

echo
echo "== tx-coordinator: a malformed message is dead-lettered, not retried"
echo "   expect no batchItemFailures and one dead letter of tx-coordinator (bad_json)"
invoke tx-coordinator events/tx-malformed.json
ops dead-letters list --table DeadLetterTable --function tx-coordinator 2>&1 | sed 's/^/   /'

echo
echo "== a coordinator dies halfway: transfer-0004 (20 from bob to carol) on the lock path"
echo "   (what transactions over 99 requests take; TX_FAST_PATH=false forces it here) after 5"
echo "   DynamoDB calls (describe, create the TX record, read both items, one TransactWriteItems"
echo "   locking and applying bob and carol), i.e. just before its commit. Expect bob and carol"
echo "   locked (_txLock) with their saved images (_txImage), and the TX record pending"
TX_FAST_PATH=false "$TARGET/debug/bench" crash-tx --fail-after 5 events/tx-abandon.json
show AccountsTable
ops tx status transfer-0004

echo
echo "== tx-sweeper: two seconds later the transaction is stale (TX_STALE_AFTER_SECONDS=2)"
echo "   expect rolled_back 1 in its summary; bob 50 and carol 0 restored from their images,"
echo "   no lock left, the TX record completed (decision rolled_back, reason abandoned)"
sleep 3
echo "   what an operator sees first: the open transactions, oldest sign of life first"
ops tx open
invoke tx-sweeper events/tx-sweeper-schedule.json
show AccountsTable
ops tx status transfer-0004

echo
echo "== tx-coordinator: SQS delivers transfer-0004 again: the abandoned attempt applied nothing,"
echo "   so it restarts as attempt 2 and commits. Expect bob 30, carol 20"
invoke tx-coordinator events/tx-abandon.json
show AccountsTable
ops tx status transfer-0004
