"""The directory the agent puts on a trial's ``PYTHONPATH``: it holds ``corral_trial``, the
metrics helper trials import (docs/metrics.md). Nothing else belongs here."""
