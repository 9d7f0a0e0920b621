#!/usr/bin/env python3
"""Renders a cusched Chrome-trace timeline (quickstart --trace out.json) as an SVG picture.

    python3 tools/timeline_svg.py out.json docs/timeline.svg [window_ms]

One row per track (lane host, lane GPU), spans coloured by op, the first `window_ms`
milliseconds after the first span (default 12).
"""
import json, sys, html

src, dst = sys.argv[1], sys.argv[2]
window_ms = float(sys.argv[3]) if len(sys.argv) > 3 else 12.0
ev = json.load(open(src))["traceEvents"]
groups = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
spans = [e for e in ev if e["ph"] == "X" and groups.get(e["pid"], "").startswith("lane")]
t0 = min(e["ts"] for e in spans)
t1 = t0 + window_ms * 1000
order = sorted({(groups[e["pid"]], e["pid"], e["tid"]) for e in spans}, key=lambda g: (["lane upload", "lane compute", "lane download"].index(g[0]) if g[0] in ["lane upload", "lane compute", "lane download"] else 9, g[2]))
colors = {"copy_from_host": "#4e79a7", "poly": "#f28e2b", "copy_to_host": "#59a14f"}
W, left, row, top = 1000, 190, 26, 30
H = top + row * len(order) + 30
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{left}" y="18">cusched quickstart on an H100: three lanes, first {window_ms:g} ms (host enqueue and GPU execution per lane)</text>']
scale = (W - left - 10) / (t1 - t0)
for i, (g, pid, tid) in enumerate(order):
    y = top + i * row
    out.append(f'<text x="5" y="{y + 16}">{html.escape(g)} · {html.escape(tracks[(pid, tid)])}</text>')
    out.append(f'<line x1="{left}" y1="{y + row - 2}" x2="{W - 10}" y2="{y + row - 2}" stroke="#ddd"/>')
    for e in spans:
        if (e["pid"], e["tid"]) != (pid, tid) or e["ts"] > t1:
            continue
        x = left + (e["ts"] - t0) * scale
        w = max(1.0, min(e["dur"], t1 - e["ts"]) * scale)
        c = colors.get(e["name"], "#bab0ac")
        out.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{c}"><title>{html.escape(e["name"])} {e["dur"]:.1f} µs</title></rect>')
for ms in range(0, int(window_ms) + 1, 2):
    x = left + ms * 1000 * scale
    out.append(f'<text x="{x:.0f}" y="{H - 8}" text-anchor="middle">{ms} ms</text>')
lx = left
for name, c in colors.items():
    out.append(f'<rect x="{lx + 250}" y="{H - 20}" width="10" height="10" fill="{c}"/><text x="{lx + 264}" y="{H - 11}">{name}</text>')
    lx += 130
out.append("</svg>")
open(dst, "w").write("\n".join(out))
print(f"wrote {dst}: {len(order)} tracks")
