"""Use cases, one per module. They talk to ports only: handlers call them, tests drive them
with in-memory adapters, the simulator replays traces through them."""
