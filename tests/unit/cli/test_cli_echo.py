"""A message the CLI prints is one line per line of the message, whatever its length: Rich
wrapped at 80 columns when stdout was not a terminal, so a script reading `experiment create`
found the pool's name on a line of its own."""

from __future__ import annotations

import pytest

from corral.cli import render


def test_a_long_message_is_not_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    message = (
        "created experiment exp-0123456789abcdef (a-rather-long-name): 4 trial(s) in pool default"
    )
    assert len(message) > 80
    render.echo(message)
    assert capsys.readouterr().out == message + "\n"


def test_the_messages_own_lines_stay(capsys: pytest.CaptureFixture[str]) -> None:
    render.echo("first line\nsecond line")
    assert capsys.readouterr().out == "first line\nsecond line\n"
