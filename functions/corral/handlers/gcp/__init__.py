"""Cloud Functions (2nd gen) entry points, on functions-framework. ``main`` holds the five
functions; ``composition`` builds the Context once per instance, never at import time."""
