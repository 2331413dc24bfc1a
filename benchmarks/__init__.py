"""Benchmarks and demo helpers for hwquant (offline assets, reference models, metrics, peer runners).

Not part of the installed package: run the scripts from the repository root, after
`bash scripts/setup.sh && bash scripts/fetch_assets.sh`.
"""
