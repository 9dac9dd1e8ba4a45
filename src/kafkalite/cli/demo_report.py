"""The demo's report page (`kafkalite-data/demo-report.html`): what the storage and the streaming query did.

One self-contained HTML file: no scripts, no external assets, plain HTML tables and CSS bars whose widths
are percentages, so it renders the same offline, in any browser, and fits whatever width the window has.
It shows, per topic and partition, the segment files (name, bytes, offset range, records) before and after
the log cleaner ran, what the cleaner removed, the streaming query's micro-batches (rows and time of each,
from `query.recentProgress`), and the most active users.

The data is gathered as plain dataclasses (`snapshot_log`, `micro_batches`) so the page can be rendered from
a small synthetic run in tests, without Spark.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SegmentInfo:
    """One segment file as it is on disk: its `.log` name, bytes, offsets and record count."""

    file: str
    size: int
    first_offset: int | None  # None: an empty segment (e.g. the active one right after a roll)
    last_offset: int | None
    records: int
    batches: int


@dataclass(frozen=True)
class PartitionSnapshot:
    topic: str
    partition: int
    segments: list[SegmentInfo]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of the streaming query: which run of the query, Spark's batch id, rows read, time."""

    run: int
    batch_id: int
    rows: int
    duration_ms: int


@dataclass
class DemoReport:
    summary: list[tuple[str, str]]
    events: list[PartitionSnapshot]
    stats_before: list[PartitionSnapshot]
    stats_after: list[PartitionSnapshot]
    batches: list[MicroBatch]
    top_users: list[dict[str, Any]]  # {"user", "views", "total_ms", "last_url"}, most views first
    notes: list[str] = field(default_factory=list)


def snapshot_log(log: Any) -> PartitionSnapshot:
    """The segments of a `Log` now, read from their batch headers (no record is decoded)."""
    segments = []
    for seg in log.log_segments():
        headers = list(seg.log.batch_headers())
        segments.append(SegmentInfo(
            file=seg.log.path.name, size=seg.size,
            first_offset=headers[0].base_offset if headers else None,
            last_offset=headers[-1].last_offset if headers else None,
            records=sum(h.records_count for h in headers), batches=len(headers)))
    return PartitionSnapshot(log.topic, log.partition, segments)


def micro_batches(run: int, progress: Iterable[Any]) -> list[MicroBatch]:
    """Rows and time per micro-batch from `StreamingQuery.recentProgress` (pyspark's progress objects, or the
    dicts older pyspark versions return)."""

    def get(p: Any, key: str) -> Any:
        value = getattr(p, key, None)
        if value is None and isinstance(p, Mapping):
            value = p.get(key)
        return value

    out = []
    for p in progress:
        duration = get(p, "durationMs") or {}
        out.append(MicroBatch(run, int(get(p, "batchId") or 0), int(get(p, "numInputRows") or 0),
                              int(duration.get("triggerExecution", 0))))
    return out


def _bytes(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"


def _offsets(seg: SegmentInfo) -> str:
    return "empty" if seg.first_offset is None else f"{seg.first_offset:,} – {seg.last_offset:,}"


def _bar(fraction: float, label: str, color: str = "#3b7dd8") -> str:
    """A horizontal bar (CSS width in percent of its cell), its label beside it, wrapping rather than overflowing."""
    pct = max(0.0, min(1.0, fraction)) * 65  # the longest bar leaves a third of the cell to its label
    return (f'<div class="bar"><span class="fill" style="width:{pct:.1f}%;background:{color}"></span>'
            f'<span class="val">{html.escape(label)}</span></div>')


STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:960px;margin:1.5em auto;padding:0 1em;
color:#1d2430;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}
h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #d7dce3;padding-bottom:.2em}
h3{font-size:1em;margin:1em 0 .3em}
p.note{color:#4a5567;font-size:.9em;margin:.3em 0 .6em}
table{border-collapse:collapse;width:100%;table-layout:fixed;font-size:.88em;margin:.3em 0}
th,td{border-bottom:1px solid #e6e9ee;padding:.25em .4em;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f3f5f8;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:flex;align-items:center;gap:.4em;min-width:0}
.bar .fill{display:block;height:.95em;border-radius:2px;flex:none;min-width:1px}
.bar .val{flex:1 1 auto;min-width:0;overflow-wrap:anywhere;font-size:.9em;white-space:normal}
.summary td:first-child{width:45%}
.kv{max-width:640px}
.removed{color:#a4361d;font-weight:600}
tr.total td{font-weight:600;border-top:2px solid #c9ced6}
"""


def _summary(report: DemoReport) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in report.summary)
    return f'<table class="summary kv">{rows}</table>'


def _segments_table(parts: Sequence[PartitionSnapshot], largest: int) -> str:
    """One row per segment; the bar is the segment's bytes relative to the largest partition on the page."""
    rows = []
    for part in parts:
        for i, seg in enumerate(part.segments):
            first = f'<td rowspan="{len(part.segments)}">{html.escape(part.name)}</td>' if i == 0 else ""
            rows.append(f"<tr>{first}<td>{html.escape(seg.file)}</td><td class=num>{_offsets(seg)}</td>"
                        f"<td class=num>{seg.records:,}</td><td class=num>{seg.batches:,}</td>"
                        f"<td>{_bar(seg.size / max(1, largest), _bytes(seg.size))}</td></tr>")
    head = ('<tr><th style="width:13%">partition</th><th style="width:27%">segment file (.log)</th>'
            '<th class=num style="width:16%">offsets</th><th class=num style="width:10%">records</th>'
            '<th class=num style="width:9%">batches</th><th style="width:25%">bytes</th></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _cleaner_table(before: Sequence[PartitionSnapshot], after: Sequence[PartitionSnapshot]) -> str:
    after_by = {p.name: p for p in after}
    rows = []
    total = [0, 0, 0, 0]
    for b in before:
        a = after_by.get(b.name, PartitionSnapshot(b.topic, b.partition, []))
        vals = (b.records, a.records, b.size, a.size)
        total = [t + v for t, v in zip(total, vals, strict=True)]
        rows.append(_cleaner_row(b.name, *vals))
    rec_b, rec_a, size_b, size_a = total
    rows.append(_cleaner_row("all partitions", rec_b, rec_a, size_b, size_a, total=True))
    head = ('<tr><th style="width:19%">partition</th><th class=num>records before</th><th class=num>after</th>'
            '<th class=num>removed</th><th class=num>bytes before</th><th class=num>after</th>'
            '<th class=num>removed</th></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _cleaner_row(name: str, rec_b: int, rec_a: int, size_b: int, size_a: int, total: bool = False) -> str:
    pct = f" ({(size_b - size_a) / size_b:.0%})" if size_b else ""
    return (f"<tr{' class=total' if total else ''}><td>{html.escape(name)}</td><td class=num>{rec_b:,}</td>"
            f"<td class=num>{rec_a:,}</td>"
            f"<td class='num removed'>{rec_b - rec_a:,}</td><td class=num>{_bytes(size_b)}</td>"
            f"<td class=num>{_bytes(size_a)}</td><td class='num removed'>{_bytes(size_b - size_a)}{pct}</td></tr>")


def _batches_table(batches: Sequence[MicroBatch]) -> str:
    if not batches:
        return "<p class=note>The query reported no micro-batch.</p>"
    most_rows = max(b.rows for b in batches) or 1
    slowest = max(b.duration_ms for b in batches) or 1
    rows = "".join(
        f"<tr><td class=num>{b.run}</td><td class=num>{b.batch_id}</td>"
        f"<td>{_bar(b.rows / most_rows, f'{b.rows:,} rows')}</td>"
        f"<td>{_bar(b.duration_ms / slowest, f'{b.duration_ms:,} ms', '#d8873b')}</td>"
        f"<td class=num>{b.rows / max(b.duration_ms, 1) * 1000:,.0f}</td></tr>" for b in batches)
    head = ('<tr><th class=num style="width:8%">run</th><th class=num style="width:9%">batch id</th>'
            '<th style="width:32%">input rows</th><th style="width:32%">time</th>'
            '<th class=num style="width:19%">rows/s</th></tr>')
    return f"<table>{head}{rows}</table>"


def _users_table(top: Sequence[dict[str, Any]]) -> str:
    if not top:
        return "<p class=note>No aggregates were read back.</p>"
    peak = max(s["views"] for s in top) or 1
    rows = []
    for s in top:
        views = int(s["views"])
        rows.append(f"<tr><td>{html.escape(str(s['user']))}</td><td>{_bar(views / peak, f'{views:,} views')}</td>"
                    f"<td class=num>{s['total_ms'] / max(1, views):,.0f} ms</td>"
                    f"<td>{html.escape(str(s.get('last_url', '')))}</td></tr>")
    head = ('<tr><th style="width:16%">user (key)</th><th style="width:44%">views</th>'
            '<th class=num style="width:18%">avg time on page</th><th style="width:22%">last url</th></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def render(report: DemoReport) -> str:
    """The whole page as one HTML string."""
    largest_events = max((s.size for p in report.events for s in p.segments), default=1)
    largest_stats = max((s.size for p in report.stats_before + report.stats_after for s in p.segments), default=1)
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in report.notes)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>kafkalite demo report</title><style>{STYLE}</style></head>
<body>
<h1>kafkalite demo pipeline</h1>
<p class=note>Page views were written to topic <b>events</b> in Kafka's on-disk format, a Spark Structured
Streaming query kept per-user aggregates in the compacted topic <b>user-stats</b>, and the log cleaner then
compacted it.</p>
{notes}{_summary(report)}
<h2>Streaming query: micro-batches</h2>
<p class=note>From the query's <code>recentProgress</code>: run 1 read the first wave of events, run 2 (restarted
from the checkpoint) only the second. Time is Spark's trigger execution time of the batch, in milliseconds;
rows/s is input rows divided by that time. The first batch also pays for starting Spark's Python workers
and compiling kafkalite's decoder.</p>
{_batches_table(report.batches)}
<h2>Log cleaner: what compaction removed from user-stats</h2>
<p class=note>Each micro-batch appended the updated aggregate of every user it saw; compaction keeps only the
latest record per key (user). Bytes are the sizes of the segment files (.log), 1 KiB = 1024 bytes.</p>
{_cleaner_table(report.stats_before, report.stats_after)}
<h3>user-stats segments before compaction</h3>
<p class=note>Bar length: segment bytes, relative to the largest user-stats segment on this page.</p>
{_segments_table(report.stats_before, largest_stats)}
<h3>user-stats segments after compaction</h3>
<p class=note>Kafka never cleans the active segment, so the demo rolls it first: the empty segment at the end
of a partition is the new active one.</p>
{_segments_table(report.stats_after, largest_stats)}
<h2>Topic events: segments</h2>
<p class=note>Batches rotate through the five codecs (none, gzip, snappy, lz4, zstd). Offsets are first – last
offset in the segment; bar length: segment bytes, relative to the largest events segment.</p>
{_segments_table(report.events, largest_events)}
<h2>Most active users (read back from the compacted user-stats)</h2>
<p class=note>views: page-view events of the user over both waves; avg time on page: the mean of the events'
<code>ms</code> field (milliseconds the user spent on the page); last url: the page of the user's latest
event.</p>
{_users_table(report.top_users)}
</body></html>
"""


def write_report(path: Path, report: DemoReport) -> None:
    path.write_text(render(report), encoding="utf-8")
