"""The CLI's one error: a one-line message and the exit code it ends the command with.

Its own module so every CLI module can raise it without importing another's internals (the
client and the signer used to import each other for it)."""

from __future__ import annotations

EXIT_ERROR = 1
EXIT_USAGE = 2  # the request was refused as invalid (4xx)


class CliError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


__all__ = ["EXIT_ERROR", "EXIT_USAGE", "CliError"]
