"""The demo report page, built from a small run of the demo's own storage steps (no Spark) and rendered in
headless Chromium: the screenshot is not blank and no element overflows the page at a wide and a narrow width."""

from __future__ import annotations

import html
import json
import random
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from kafkalite.cli import demo
from kafkalite.cli.demo_report import DemoReport, micro_batches, render, write_report
from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)")

# Marks every element that sticks out of the viewport or whose content is wider than its box; the report itself
# has no script, this is added to a copy for the check only.
OVERFLOW_PROBE = """<script>
const vw = document.documentElement.clientWidth, bad = [];
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  const what = el.tagName + ' "' + (el.textContent || '').trim().slice(0, 30) + '"';
  if (r.right > vw + 0.5 || r.left < -0.5) bad.push(what + ' spans ' + r.left + '..' + r.right + ' of ' + vw);
  if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) bad.push(what + ' scrollWidth ' + el.scrollWidth
      + ' > clientWidth ' + el.clientWidth);
}
document.body.setAttribute('data-overflow', JSON.stringify(bad));
document.body.setAttribute('data-page-width', document.documentElement.scrollWidth + '/' + vw);
</script>"""


def small_run(data_dir: Path) -> DemoReport:
    """The demo's storage steps on a few hundred events: events topic, repeated aggregates, compaction."""
    rnd = random.Random(3)
    demo.write_events(data_dir, demo.page_views(1200, 1_700_000_000_000, 40, rnd))
    with LogManager([data_dir], topic_configs={demo.STATS: demo.STATS_CONFIG}) as manager:
        for p in range(2):
            log = manager.get_or_create_log(demo.STATS, p)
            for wave in range(3):  # three micro-batches, each rewriting the aggregate of every user
                log.append_as_leader(build_batch([
                    SimpleRecord(f"user-{u:03d}".encode(), json.dumps({"views": wave * 10 + u}).encode() * 8,
                                 1_700_000_000_000 + wave) for u in range(p, 40, 2)]))
            log.update_high_watermark(log.log_end_offset)
    before, after = demo.compact_stats(data_dir)
    progress = [{"batchId": 0, "numInputRows": 900, "durationMs": {"triggerExecution": 17140}},
                {"batchId": 1, "numInputRows": 300, "durationMs": {"triggerExecution": 1490}}]
    top = [{"user": f"user-{u:03d}" + ("-with-a-very-long-key-that-must-wrap" * 3 if u == 5 else ""),
            "views": 400 // (u + 1), "total_ms": 45_000 // (u + 1), "last_url": "/product/42"} for u in range(15)]
    return DemoReport([("events written (2 waves)", "900 + 300 = 1,200"), ("total time", "1.0 s")],
                      demo.snapshot_topic(data_dir, demo.EVENTS), before, after,
                      micro_batches(1, progress[:1]) + micro_batches(2, progress[1:]), top)


def test_report_shows_segments_cleaner_and_batches(tmp_path):
    report = small_run(tmp_path / "data")
    assert [p.name for p in report.events] == ["events-0", "events-1", "events-2"]
    assert sum(p.records for p in report.events) == 1200
    assert [p.records for p in report.stats_before] == [60, 60] and [p.records for p in report.stats_after] == [20, 20]
    assert all(a.size < b.size for b, a in zip(report.stats_before, report.stats_after, strict=True))
    page = render(report)
    for part in report.stats_before:
        for seg in part.segments:
            assert seg.file in page
    assert "40" in page and "120" in page  # records removed in total, records before
    assert "17,140 ms" in page and "1,490 ms" in page and "900 rows" in page
    assert "avg time on page" in page and "milliseconds" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained


def _png_pixels(path: Path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into an array (rows, width, channels)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prev) & 0xFF
        elif kind == 1:  # Sub: a running sum per channel
            cur = (np.cumsum(line.reshape(width, channels), axis=0) & 0xFF).reshape(stride)
        else:  # Average and Paeth depend on the pixel just decoded: one pixel at a time
            cur = line.copy()
            for x in range(stride):
                a = int(cur[x - channels]) if x >= channels else 0
                b = int(prev[x])
                if kind == 3:
                    cur[x] = (cur[x] + (a + b) // 2) & 0xFF
                else:
                    c = int(prev[x - channels]) if x >= channels else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows[y] = cur
        prev = cur
    return rows.reshape(height, width, channels)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-extensions", *args], capture_output=True, text=True,
                          timeout=120)


@needs_chromium
def test_report_renders_in_chromium_without_overflow(tmp_path):
    report = small_run(tmp_path / "data")
    page = tmp_path / "demo-report.html"
    write_report(page, report)
    shot = tmp_path / "shot.png"
    done = _chromium(f"--screenshot={shot}", "--window-size=900,1400", page.as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    pixels = _png_pixels(shot)[..., :3].astype(np.float64)
    assert pixels.shape[:2] == (1400, 900)
    assert pixels.std() > 20, f"screenshot looks blank (pixel std {pixels.std():.1f})"
    # blue bars drawn: a good number of pixels close to the bar colour #3b7dd8
    blue = (np.abs(pixels - np.array([0x3B, 0x7D, 0xD8])).sum(axis=2) < 30).sum()
    assert blue > 500, f"only {blue} bar-coloured pixels"

    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", OVERFLOW_PROBE + "</body>"))
    for width in (1280, 900, 480):
        dom = _chromium(f"--window-size={width},1000", "--dump-dom", probed.as_uri()).stdout
        found = re.search(r'data-overflow="([^"]*)"', dom)
        assert found is not None, f"the probe did not run at width {width}: {dom[:500]}"
        problems = json.loads(html.unescape(found.group(1)))
        assert problems == [], f"at {width} px: {problems}"
        page_width = re.search(r'data-page-width="(\d+)/(\d+)"', dom)
        assert page_width is not None and page_width.group(1) == page_width.group(2), page_width
