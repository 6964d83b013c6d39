#!/usr/bin/env python3
"""Charts of the benchmarks page, drawn from the JSON the benches write (`make bench` runs
this after them): target/bench/<name>.json -> docs/charts/<name>[-<panel>].svg.

    python3 scripts/charts.py [JSON_DIR] [OUT_DIR]

Each chart is a matplotlib line chart (x values are categories, evenly spaced), captioned with
the date and commit its figures were measured at. A bench whose JSON is missing keeps its
committed chart. Needs matplotlib (`make bench` runs this in its venv, which has it).
"""

import json
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)

# The same SVG bytes for the same figures: no date, fixed element ids.
plt.rcParams.update({"svg.hashsalt": "charts", "figure.figsize": (7.6, 3.6)})


def line_chart(path, title, caption, x_label, y_label, x_values, series):
    """`series`: [(name, {x: y})]."""
    fig, ax = plt.subplots()
    for name, points in series:
        xy = [(i, points[x]) for i, x in enumerate(x_values) if x in points]
        ax.plot([i for i, _ in xy], [y for _, y in xy], marker="o", label=name)
    ax.set_xticks(range(len(x_values)), [str(x) for x in x_values])
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", color="#ddd")
    ax.set(xlabel=x_label, ylabel=y_label)
    fig.suptitle(title, x=0.02, ha="left", fontweight="bold")
    ax.set_title(caption, loc="left", fontsize="small", color="#555")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    print(f"charts: {path}")


def caption(doc, shape):
    when = " ".join(p for p in (doc.get("date"), doc.get("commit") and f"at {doc['commit']}") if p)
    return f"{shape}; measured {when}" if when else shape


def txn_transfers(doc, out_dir):
    names = {"fast": "TX fast path", "native": "TransactWriteItems",
             "native-record": "TWI + idempotency put", "lock": "TX lock path"}
    for mode in ("spread", "contended"):
        rows = [r for r in doc["rows"] if r["mode"] == mode]
        x_values = sorted({r["round_trip_ms"] for r in rows})
        series = []
        for kind, name in names.items():
            points = {r["round_trip_ms"]: r["per_second"] for r in rows if r["kind"] == kind}
            if points:
                series.append((name, points))
        line_chart(os.path.join(out_dir, f"txn-transfers-{mode}.svg"),
                   f"2-item transfers/s against the round trip ({mode})",
                   caption(doc, "8 coordinators, DynamoDB Local behind a delaying proxy"),
                   "simulated round trip (ms)", "transfers/s", x_values, series)


def counter_shapes(doc, out_dir):
    # The unspread rows (one journal partition per item); a row without `spread` is one.
    rows = [r for r in doc["rows"] if r.get("spread", 1) == 1]
    x_values = sorted({r["shards"] for r in rows})
    series = []
    for rate in dict.fromkeys(r["rate"] for r in rows):
        series.append((f"{rate} per item", {r["shards"]: r["wcu_per_event"] for r in rows
                                            if r["rate"] == rate}))
    line_chart(os.path.join(out_dir, "counter-journal-cost.svg"),
               "Counter journal: billed write units per event",
               caption(doc, "journal put + roll-up, items < 1 KB, stream rollover every 4 h"),
               "stream shards", "billed WCU per event", x_values, series)


CHARTS = {"txn-transfers": txn_transfers, "counter-shapes": counter_shapes}


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    json_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "target", "bench")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "docs", "charts")
    os.makedirs(out_dir, exist_ok=True)
    for name, draw in CHARTS.items():
        path = os.path.join(json_dir, f"{name}.json")
        if not os.path.exists(path):
            print(f"charts: {name}: no {path}; its chart is left as it is")
            continue
        with open(path, encoding="utf-8") as f:
            draw(json.load(f), out_dir)


if __name__ == "__main__":
    main()
