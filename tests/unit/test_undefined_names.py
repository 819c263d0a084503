"""Code that only runs inside spark-submit, a DAG parse or an Airflow worker is not
imported by the unit tests; an undefined name there (a missing `import os`) surfaces as
a NameError only on a real run. pyflakes finds every undefined name statically."""

from pathlib import Path

import pytest
from pyflakes import api, messages, reporter

REPO = Path(__file__).resolve().parents[2]
FILES = sorted(p for d in ("spark/jobs", "dags", "plugins", "include/seglake") for p in (REPO / d).rglob("*.py"))


class _Collect(reporter.Reporter):
    def __init__(self):
        super().__init__(None, None)
        self.found = []

    def flake(self, message):
        if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_no_undefined_names(path):
    rep = _Collect()
    api.checkPath(str(path), rep)
    assert not rep.found, "\n".join(rep.found)
