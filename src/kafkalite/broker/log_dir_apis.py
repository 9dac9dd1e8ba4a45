"""DescribeLogDirs: each log dir with the partitions it holds (all, or those asked for) and their sizes."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping

from kafkalite.broker.handlers import Body, Handler
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.apis")


class LogDirApis:
    def __init__(self, logs: LogManager) -> None:
        self.logs = logs

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs}

    async def describe_log_dirs(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        """An offline dir answers KAFKA_STORAGE_ERROR with no partitions, as Kafka does; the volume's total and
        usable bytes (v4) come from statvfs. Every replica is current (no AlterReplicaLogDirs futures), so each
        offset lag is 0."""
        requested = body.get("topics")
        wanted: dict[str, set[int]] | None = None
        if requested is not None:
            wanted = {}
            for t in requested:
                wanted.setdefault(t["topic"], set()).update(t.get("partitions", []))
        by_dir: dict[str, dict[str, list[Body]]] = {}
        for lg in self.logs.all_logs():
            if wanted is not None and lg.partition not in wanted.get(lg.topic, ()):
                continue
            by_dir.setdefault(str(lg.dir.parent), {}).setdefault(lg.topic, []).append(
                {"partition_index": lg.partition, "partition_size": lg.size, "offset_lag": 0, "is_future_key": False})
        results = []
        for d in self.logs.dirs:
            path = str(d.path)
            res: Body = {"error_code": ErrorCode.NONE, "log_dir": path, "topics": [], "total_bytes": -1,
                         "usable_bytes": -1}
            if d.offline:
                res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                try:
                    usage = shutil.disk_usage(path)
                    res.update(total_bytes=usage.total, usable_bytes=usage.free)
                except OSError as exc:
                    log.warning("DescribeLogDirs: cannot stat %s: %s", path, exc)
                res["topics"] = [{"name": t, "partitions": sorted(ps, key=lambda p: p["partition_index"])}
                                 for t, ps in sorted(by_dir.get(path, {}).items())]
            results.append(res)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
