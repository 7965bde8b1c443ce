"""The docs test's reading of Markdown: markers, commands, expected output and exit codes."""

from __future__ import annotations

from pathlib import Path

from tests.docs.doc_blocks import Block, Command, blocks_in, code_of

SAMPLE = """# Sample

```sh
corral config validate a.yaml   # checks it
corral command run sh -c 'exit 3'   # prints nothing, exits 3
aws s3 ls \\
    s3://bucket
```

<!-- run: local stack -->

```console
$ corral pool list
POOLS
  default

$ corral events   # exits 1
```

<!-- not run: needs an AWS account -->

```bash
sam deploy
```

<!-- not run: -->

```sh
make
```

<!-- run: somewhere else -->

```shell
ls
```

```yaml
not: a command
```
"""


def _blocks(tmp_path: Path) -> list[Block]:
    doc = tmp_path / "sample.md"
    doc.write_text(SAMPLE, encoding="utf-8")
    return blocks_in(doc)


def test_markers_decide_how_a_block_is_treated(tmp_path: Path) -> None:
    blocks = _blocks(tmp_path)
    assert [(b.line, b.mode) for b in blocks] == [
        (3, "offline"),
        (12, "stack"),
        (22, "excused"),
        (28, None),
        (34, None),
    ]
    assert blocks[2].reason == "needs an AWS account"
    assert "needs a reason" in blocks[3].problem
    assert "unknown marker" in blocks[4].problem


def test_plain_lines_are_commands_with_continuations_and_exit_codes(tmp_path: Path) -> None:
    assert _blocks(tmp_path)[0].commands() == [
        Command(4, "corral config validate a.yaml   # checks it", None, 0),
        Command(5, "corral command run sh -c 'exit 3'   # prints nothing, exits 3", None, 3),
        Command(6, "aws s3 ls \\\n    s3://bucket", None, 0),
    ]


def test_prompt_lines_carry_their_expected_output(tmp_path: Path) -> None:
    assert _blocks(tmp_path)[1].commands() == [
        Command(13, "corral pool list", "POOLS\n  default\n", 0),
        Command(17, "corral events   # exits 1", "", 1),
    ]


def test_comments_are_not_part_of_the_command() -> None:
    assert code_of("corral x '# not a comment' # a comment") == "corral x '# not a comment'"
    assert code_of("a \\\n  b   # c") == "a \\\n  b"
