"""AWS Lambda entry points (Powertools). Each module is one function's handler; clients and
the Context are built once per container by ``composition``, never at import time."""
