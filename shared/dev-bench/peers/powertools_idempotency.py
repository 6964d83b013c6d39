"""Powertools for AWS Lambda (Python): the batch processor and the idempotency utility on one
SQS batch, against the DynamoDB endpoint in AWS_ENDPOINT_URL_DYNAMODB. The peer of
`bench idempotency`: the same batch, first delivered (every key new), then delivered again.

Prints one JSON line per delivery: records/s, DynamoDB calls per record by operation. Write
units are not reported by DynamoDB Local for failed conditions; every item here is under 1 KB,
so each write (failed condition included) bills 1 WCU as AWS counts it.

Usage: python powertools_idempotency.py <records>
"""
import json
import os
import sys
import time
import uuid
from collections import Counter

import boto3
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function)
from aws_lambda_powertools.utilities.typing import LambdaContext

RECORDS = int(sys.argv[1]) if len(sys.argv) > 1 else 100
ENDPOINT = os.environ["AWS_ENDPOINT_URL_DYNAMODB"]
TABLE = f"PowertoolsIdem{uuid.uuid4().hex[:8]}"

calls = Counter()
client = boto3.client("dynamodb", endpoint_url=ENDPOINT)
client.create_table(
    TableName=TABLE, BillingMode="PAY_PER_REQUEST",
    AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
    KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])

counted = boto3.client("dynamodb", endpoint_url=ENDPOINT)
counted.meta.events.register("before-call.dynamodb.*",
                             lambda model, **_: calls.update([model.name]))
persistence = DynamoDBPersistenceLayer(table_name=TABLE, boto3_client=counted)
config = IdempotencyConfig(event_key_jmespath="orderId", use_local_cache=False)


@idempotent_function(data_keyword_argument="order", persistence_store=persistence, config=config)
def charge(order: dict) -> dict:
    return {"chargeId": f"ch_{order['orderId']}"}


processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record):
    charge(order=json.loads(record.body))


class Context(LambdaContext):
    def __init__(self):
        self._aws_request_id = "bench"
        self._function_name = "payments"

    def get_remaining_time_in_millis(self):
        return 300_000


config.register_lambda_context(Context())
event = {"Records": [{
    "messageId": f"m{i}", "receiptHandle": "h", "body": json.dumps({"orderId": f"o-{i}", "amountCents": 250}),
    "attributes": {"SentTimestamp": "0"}, "messageAttributes": {}, "md5OfBody": "",
    "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:1:q", "awsRegion": "us-east-1",
} for i in range(RECORDS)]}

for delivery in ["new", "redelivered"]:
    calls.clear()
    started = time.perf_counter()
    response = process_partial_response(event=event, record_handler=record_handler,
                                        processor=processor, context=Context())
    seconds = time.perf_counter() - started
    writes = calls["PutItem"] + calls["UpdateItem"] + calls["DeleteItem"]
    print(json.dumps({
        "peer": "powertools", "delivery": delivery, "records": RECORDS,
        "failures": len(response["batchItemFailures"]),
        "records_per_s": RECORDS / seconds,
        "calls_per_record": sum(calls.values()) / RECORDS,
        "wcu_per_record": writes / RECORDS,
        "calls": dict(calls),
    }))


def stored_units(table, completed_only=False):
    """Write units of the stored records, as AWS bills a write of one: ceil(size / 1 KB) (the
    size approximated by names plus values as JSON, within a few bytes per attribute)."""
    units = 0
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            if completed_only and item.get("status", {}).get("S") != "COMPLETED":
                continue
            size = sum(len(k) + len(json.dumps(v).encode()) for k, v in item.items())
            units += max(1, -(-size // 1024))
    return units


# Large results: 200 KB (fits an item) and 500 KB (over DynamoDB's 400 KB item limit), one
# table each so that the stored records can be billed by size.
LARGE = 10
for kb in [200, 500]:
    large_table = f"{TABLE}L{kb}"
    client.create_table(
        TableName=large_table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    large_store = DynamoDBPersistenceLayer(table_name=large_table, boto3_client=counted)

    @idempotent_function(data_keyword_argument="order", persistence_store=large_store,
                         config=config)
    def charge_large(order: dict) -> dict:
        return {"chargeId": f"ch_{order['orderId']}", "receipt": "r" * (kb * 1024)}

    def large_handler(record):
        charge_large(order=json.loads(record.body))

    large_event = {"Records": [dict(event["Records"][i], messageId=f"l{i}",
                                    body=json.dumps({"orderId": f"large{kb}-{i}", "amountCents": 250}))
                               for i in range(LARGE)]}
    for delivery in ["new", "redelivered"]:
        calls.clear()
        started = time.perf_counter()
        try:
            response = process_partial_response(event=large_event, record_handler=large_handler,
                                                processor=processor, context=Context())
        except BatchProcessingError:  # every record failed
            response = {"batchItemFailures": large_event["Records"]}
        seconds = time.perf_counter() - started
        # new: the claim (1) and a completion billed by the stored size (a refused one bills
        # nothing); redelivered: the failed claim, billed by the stored record's size.
        completed = stored_units(large_table, completed_only=True) / LARGE
        stored = stored_units(large_table) / LARGE
        print(json.dumps({
            "peer": "powertools", "delivery": f"{delivery} {kb}K", "records": LARGE,
            "failures": len(response["batchItemFailures"]),
            "records_per_s": LARGE / seconds,
            "calls_per_record": sum(calls.values()) / LARGE,
            "wcu_per_record": (1 + completed) if delivery == "new" else stored,
            "calls": dict(calls),
        }))
