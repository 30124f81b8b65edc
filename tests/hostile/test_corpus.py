"""Every hostile document of the corpus gets exit 2 and one sentence from ``ascend-fleet validate``, never a crash."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import CORPUS, expected, validate_in_child

FILES = sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_is_large_enough():
    assert len(FILES) >= 60


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_validate_refuses_with_one_sentence(path):
    done = validate_in_child(str(path))
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, lines
    assert expected(path) in lines[0]
    assert str(path) in lines[0]
