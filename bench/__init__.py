"""python -m bench: mpsrt benchmarks, one table per area (see __main__.py)."""
