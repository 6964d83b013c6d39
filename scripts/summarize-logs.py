#!/usr/bin/env python3
"""Print the functions' JSON summary lines (from `cargo lambda watch` output) readably."""
import json
import sys

SKIP = {"timestamp", "level", "message", "function", "outcomes", "fields", "target", "summary", "span"}

for line in sys.stdin:
    start = line.find("{")
    if start < 0:
        continue
    try:
        entry = json.loads(line[start:])
    except ValueError:
        continue
    message = entry.get("message") or entry.get("fields", {}).get("message", "")
    level = entry.get("level", "")
    if message in ("batch summary", "sweep summary") or message.endswith("summary"):
        counts = {k: v for k, v in entry.items() if k not in SKIP and v not in (0, "0")}
        outcomes = entry.get("outcomes")
        if outcomes:
            try:
                counts.update(json.loads(outcomes))
            except ValueError:
                pass
        print("   summary: " + ", ".join("%s=%s" % kv for kv in sorted(counts.items())))
    elif "AWS_LAMBDA_MAX_CONCURRENCY" in message:
        continue  # the runtime's note about cargo lambda watch's setting, not ours
    elif level in ("WARN", "ERROR"):
        detail = {k: v for k, v in entry.items() if k in ("record_id", "reason_code", "error")}
        print("   %s: %s %s" % (level.lower(), message, json.dumps(detail)))
