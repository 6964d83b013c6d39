#!/usr/bin/env python3
"""Copy a sample event as if its records reached the source now.

The writers keep records older than their protocol applies safely (ratchet: the tombstone
lifetime; counter: the duplicate window) as `too_old` dead letters, judged by Kinesis
`approximateArrivalTimestamp`, SQS `SentTimestamp`, DynamoDB `ApproximateCreationDateTime` and
Kafka `timestamp`. The samples in events/ carry fixed
times; the demo delivers them as new. Usage: arriving-now.py EVENT.json OUT.json
"""
import json
import sys
import time

src, out = sys.argv[1], sys.argv[2]
with open(src) as f:
    event = json.load(f)
now = time.time()
for record in event.get("Records", []):
    if "kinesis" in record:
        record["kinesis"]["approximateArrivalTimestamp"] = round(now, 3)
    if isinstance(record.get("dynamodb"), dict):
        record["dynamodb"]["ApproximateCreationDateTime"] = float(int(now))
    if isinstance(record.get("attributes"), dict):
        record["attributes"]["SentTimestamp"] = str(int(now * 1000))
for partition in (event.get("records") or {}).values():
    for record in partition:
        record["timestamp"] = int(now * 1000)
with open(out, "w") as f:
    json.dump(event, f, indent=2)
