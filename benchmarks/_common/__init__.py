"""Modules shared by the benchmarks of several folders; a benchmark puts ``benchmarks/`` on ``sys.path`` first."""
