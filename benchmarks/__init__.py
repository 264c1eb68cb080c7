"""Side-by-side benchmarks of streamsaver against the other LangGraph checkpointers.

Run ``python -m benchmarks --help``. Every figure is measured in one process run, against the raw
Redis floor and ``InMemorySaver`` measured in that same run, and written as a Markdown report with
PNG plots under ``benchmarks/results/`` (or ``--out``).
"""
