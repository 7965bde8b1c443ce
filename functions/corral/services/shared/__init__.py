"""Helpers several use cases share: the service context (ports, pools, settings), taking
instances away, releasing a trial's GPUs, spend bookkeeping, and what an agent needs to run a
trial. Nothing here is an entry point; the modules one level up are."""
