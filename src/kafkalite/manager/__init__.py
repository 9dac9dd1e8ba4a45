"""Many logs across data directories, and background tasks (LogManager; later the LogCleaner)."""
