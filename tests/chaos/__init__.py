"""The chaos soak: Corral's real Lambda handlers against moto, with faults injected.

``python -m tests.chaos --trials 200 --seed 1`` (or ``make chaos``) runs it; see
docs/reliability.md for what it does, the fault rates and the figures of the last run.
"""
