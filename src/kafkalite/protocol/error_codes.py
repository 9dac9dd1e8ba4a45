"""The protocol layer's name for Kafka's error-code table, which lives in `kafkalite.error_codes` (below every
layer, so that `kafkalite.errors` can name its codes from the same table)."""

from kafkalite.error_codes import ErrorCode

__all__ = ["ErrorCode"]
