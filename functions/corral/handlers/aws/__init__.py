"""AWS Lambda entry points (Powertools). Each module is one function's handler; clients and
the Context are built once per container by ``composition``, never at import time.

Importing this package defers garbage collection until a handler has handled its first
event (``cold_start``): it runs before any handler module imports Powertools, pydantic or
boto3.
"""

from corral.handlers.aws.cold_start import defer_collection

defer_collection()
