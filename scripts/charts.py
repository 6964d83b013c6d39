#!/usr/bin/env python3
"""Charts of the benchmarks page, drawn from the JSON the benches write (`make bench` runs
this after them): target/bench/<name>.json -> docs/charts/<name>[-<panel>].svg.

    python3 scripts/charts.py [JSON_DIR] [OUT_DIR]

Each chart is an SVG line chart (standard library only), captioned with the date and commit
its figures were measured at. A bench whose JSON is missing keeps its committed chart.
"""

import html
import json
import math
import os
import sys

WIDTH, HEIGHT = 760, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 210, 50, 60
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def axis(value, ticks=5):
    """A round upper bound for an axis and its tick step: the step is 1, 2 or 5 times a power
    of ten, at most `ticks` steps reach `value`."""
    if value <= 0:
        return 1, 0.25
    raw = value / ticks
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return step * math.ceil(value / step - 1e-9), step


def line_chart(path, title, caption, x_label, y_label, x_values, series):
    """`series`: [(name, {x: y})]; x values are categories, evenly spaced in their order."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    y_max, y_step = axis(max((y for _, points in series for y in points.values()), default=1))

    def px(i):
        return LEFT + (plot_w * i / max(1, len(x_values) - 1) if len(x_values) > 1 else plot_w / 2)

    def py(y):
        return TOP + plot_h - plot_h * y / y_max

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{html.escape(title)}</text>',
           f'<text x="{LEFT}" y="38" fill="#555">{html.escape(caption)}</text>']
    for k in range(round(y_max / y_step) + 1):
        y = round(k * y_step, 10)
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for i, x in enumerate(x_values):
        out.append(f'<text x="{px(i):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">'
                   f'{html.escape(str(x))}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" '
               f'stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 14}" text-anchor="middle">'
               f'{html.escape(x_label)}</text>')
    out.append(f'<text x="16" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + plot_h / 2})">{html.escape(y_label)}</text>')
    for n, (name, points) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        xy = [(px(i), py(points[x])) for i, x in enumerate(x_values) if x in points]
        if len(xy) > 1:
            d = " ".join(f"{'M' if j == 0 else 'L'}{a:.1f},{b:.1f}" for j, (a, b) in enumerate(xy))
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
        for a, b in xy:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{color}"/>')
        ly = TOP + 14 + 18 * n
        out.append(f'<rect x="{LEFT + plot_w + 16}" y="{ly - 9}" width="12" height="12" '
                   f'fill="{color}"/>')
        out.append(f'<text x="{LEFT + plot_w + 34}" y="{ly + 1}">{html.escape(name)}</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
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
