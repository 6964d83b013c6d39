"""Powertools for AWS Lambda (Python): `BatchProcessor` + `process_partial_response` alone on
one SQS event, a record handler that does nothing (or only `json.loads` the body: the work of
our typed records). The peer of `bench processor`: the same event (the same records and
bodies), every record succeeding, then 10 % failing (a partial batch response).

Prints one JSON line per case: records/s in the median timed round (one untimed round
first), and the number of records reported in `batchItemFailures`.

Usage: python powertools_processor.py <records> <rounds>
"""
import json
import statistics
import sys
import time

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.typing import LambdaContext

RECORDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 100


class Context(LambdaContext):
    def __init__(self):
        self._aws_request_id = "bench"
        self._function_name = "bench"

    def get_remaining_time_in_millis(self):
        return 300_000


event = {"Records": [{
    "messageId": f"m{i}", "receiptHandle": "h",
    "body": json.dumps({"orderId": f"o-{i}", "amountCents": 250}, separators=(",", ":")),
    "attributes": {"SentTimestamp": "0"}, "messageAttributes": {}, "md5OfBody": "",
    "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:1:q", "awsRegion": "us-east-1",
} for i in range(RECORDS)]}


def ignore_body(record):
    return None


def read_body(record):
    return json.loads(record.body)


def failing(handler):
    def fail_one_in_ten(record):
        if int(record.message_id[1:]) % 10 == 0:
            raise ValueError("failing on purpose")
        return handler(record)
    return fail_one_in_ten


CASES = [
    ("body not read", 0, ignore_body),
    ("body not read", 10, failing(ignore_body)),
    ("json.loads(body)", 0, read_body),
    ("json.loads(body)", 10, failing(read_body)),
]

for setting, failing_percent, handler in CASES:
    processor = BatchProcessor(event_type=EventType.SQS)
    times = []
    reported = 0
    for round_ in range(ROUNDS + 1):
        started = time.perf_counter()
        response = process_partial_response(event=event, record_handler=handler,
                                            processor=processor, context=Context())
        if round_ > 0:
            times.append(time.perf_counter() - started)
        reported = len(response["batchItemFailures"])
    print(json.dumps({
        "peer": "powertools", "setting": setting, "failing_percent": failing_percent,
        "records_per_s": RECORDS / statistics.median(times), "reported": reported,
    }))
