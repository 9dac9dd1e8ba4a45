"""What the broker refuses by name because kafkalite does not have it yet: one wording per missing feature,
used by every API that meets it (a client sees the same sentence whichever request ran into it)."""

TRANSACTIONS_UNSUPPORTED = ("transactions are not supported by kafkalite (no transaction coordinator); "
                            "use an idempotent producer without transactional.id")
KIP848_UNSUPPORTED = ("the consumer group protocol of KIP-848 (group.protocol=consumer) is not supported by "
                      "kafkalite; use group.protocol=classic")
