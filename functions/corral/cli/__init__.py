"""The ``corral`` command line. ``main.py`` is the root; each sub-app lives in its own module."""
