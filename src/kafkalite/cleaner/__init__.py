"""Log compaction (Kafka LogCleaner): the offset map first; the cleaner itself is issue 4 work in progress."""
