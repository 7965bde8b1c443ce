"""The API's public models (``public.py``). The agent protocol is ``corral.protocol``."""
