"""The driver: rows in, results out, in the order data flows.

``rows`` (stream and validate task rows, route them) -> ``admission`` (a fixed pool of workers
pulling from one shared source) -> ``retry`` (attempts, backoff) -> ``dispatch`` (the one
dispatch site) -> ``output`` (append-only records, resume ledger) -> ``summary`` (accounting,
pass@k). ``api.Collector`` is that chain for embedders; ``job.run_job`` is the Collector plus
server launch, output directory and summary.
"""
