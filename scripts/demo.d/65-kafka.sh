# Demo step for Kafka (sourced by the demo script, which provides `invoke` and `ops`): an
# Amazon MSK batch over two partitions and a self-managed cluster's batch with poison values.
# An Avro-valued batch under a second watch with the Avro settings. Fixtures:
# events/.

echo
echo "== ratchet-writer: an Amazon MSK batch, topic ratings, partitions 0 (User#21: 3 ratings)"
echo "   and 1 (User#22: 2 ratings). Each partition in offset order; expect no batchItemFailures"
echo "   (a failure would be answered as {\"itemIdentifier\": {\"partition\": \"ratings-0\","
echo "   \"offset\": 101}}), User#21/Movie#A Rating 5 and User#22/Movie#B Rating 1"
invoke ratchet-writer events/ratchet-kafka-batch.json
ops show RatchetTable | grep -E 'PK=User#2[12] ' || true

echo
echo "== ratchet-writer: a self-managed Kafka batch, one partition: a put, a value that is not"
echo "   JSON, an unknown op, a newer put. Expect no batchItemFailures: the two bad records are"
echo "   dead letters (bad_json, unknown_op, ids ratings-0:201 and ratings-0:202) and the partition"
echo "   goes on: User#24/Movie#D Rating 5"
invoke ratchet-writer events/ratchet-kafka-malformed.json
ops show RatchetTable | grep -E 'PK=User#24 ' || true
ops dead-letters list --table DeadLetterTable --function ratchet-writer 2>/dev/null \
  | grep -F '"kafka"' \
  | python3 -c 'import json,sys
for line in sys.stdin:
    l = json.loads(line)
    print("   %s  %s: %s" % (l["position"]["id"], l["reason"]["code"], l["reason"]["message"][:70]))'

echo
echo "== ratchet-writer reading Avro values (RATCHET_KAFKA_VALUE_FORMAT=avro, the schema"
echo "   events/schemas/rating.avsc): Confluent- and Glue-framed values, one zlib-compressed, and"
echo "   a JSON value where Avro is expected. Functions under one watch share its environment,"
echo "   so this step runs a second watch with the Avro settings. Expect no batchItemFailures,"
echo "   User#31/Movie#A Rating 5 and User#32/Movie#B Rating 4, and one dead letter"
echo "   (ratings-avro-0:301 undecodable_value)"
AVRO_PORT=$(free_port)
RATCHET_KAFKA_VALUE_FORMAT=avro RATCHET_KAFKA_VALUE_SCHEMA="$ROOT/events/schemas/rating.avsc" \
  cargo lambda watch -A 127.0.0.1 -P "$AVRO_PORT" >"$ROOT/.demo/watch-avro.log" 2>&1 &
AVRO_PID=$!
PIDS+=("$AVRO_PID")
for _ in $(seq 1 100); do
  if (echo >"/dev/tcp/127.0.0.1/$AVRO_PORT") 2>/dev/null; then break; fi
  sleep 0.3
done
# The demo's `invoke`, pointed at the second watch and its log.
LAMBDA_PORT=$AVRO_PORT LOG="$ROOT/.demo/watch-avro.log" invoke ratchet-writer events/ratchet-kafka-avro.json
ops show RatchetTable | grep -E 'PK=User#3[12] ' || true
ops dead-letters list --table DeadLetterTable --function ratchet-writer 2>/dev/null \
  | grep -F 'ratings-avro' \
  | python3 -c 'import json,sys
for line in sys.stdin:
    l = json.loads(line)
    print("   %s  %s: %s" % (l["position"]["id"], l["reason"]["code"], l["reason"]["message"][:70]))'
kill -INT "$AVRO_PID" 2>/dev/null || true
