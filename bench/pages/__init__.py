"""The dashboard's heaviest pages at a million runs: the runs list (filters, free-text search,
deep pages) and the Spend page (rollups, slices, charts). Each seeds its own database once
(seed.py), then times the queries and the whole page; run each from the repository's root as
`.venv/bin/python -m bench pages <name>` (`python -m bench pages --help` lists them)."""
