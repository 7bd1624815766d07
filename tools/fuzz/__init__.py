"""Hypothesis-driven fuzzing of the overlay's fusion code.

program.py   programs as data (input specs, op specs) and their Python source
strategy.py  hypothesis strategies that draw fusion-heavy programs
check.py     eager vs compiled with the overlay flags on vs off
repro.py     standalone pytest repros of failures (test/regressions/)
runner.py    profiles, worker processes, progress and summary (make fuzz)
overlay_coverage.py  line coverage of the overlay modules and patched hunks
"""
