"""Log compaction (Kafka's LogCleaner): keeps the latest record of every key in compacted logs.

Modules, from the bottom up: `vector` (numpy record decoding and key hashing), `offset_map` (the
bounded key -> offset map), `chunk` (framing a segment chunk into batches), `transactions`
(aborted/committed transaction tracking), `filter` (what survives a chunk), `cleaner` (one cleaning:
map, groups, `.cleaned` segments, swap), `manager` (which log next, pause/abort, checkpoints),
`log_cleaner` (the threads and the callers' API), `config` and `throttler`.
"""
