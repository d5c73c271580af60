"""Tracked files describe the product as it is: no numbered references to past work (the work items, review
rounds and working periods the product came from) and no commit ids as provenance. How the product got here
belongs in git history (CONTRIBUTING.md, "No history in the product")."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import in_ci

ROOT = Path(__file__).resolve().parents[2]

# Built from pieces so that this file does not match its own patterns.
WORDS = "|".join(("sess" + "ion", "iss" + "ue", "pro" + "be", "find" + "ing"))
HISTORY = r"\b(" + WORDS + r")s? ?#?[0-9]+"
COMMIT = r"\b" + "com" + r"mit[: ]+[0-9a-f]{7,40}\b"
HEX_WORD = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# Another project's issue or pull request is a fact about that project, not our history.
THIRD_PARTY = re.compile(r"\b[\w.-]+/[\w.-]+#[0-9]+\b|https?://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/[0-9]+",
                         re.IGNORECASE)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def checkout():
    if shutil.which("git") is None or _git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        message = "not a git checkout (or no git): nothing tracked to check"
        if in_ci():
            pytest.fail(message + "; CI runs on a clone", pytrace=False)
        pytest.skip(message)
    return ROOT


def _grep(pattern: str) -> list[str]:
    """Tracked text files' lines matching `pattern` (extended regex, case-insensitive), as `path:line:text`."""
    done = _git("grep", "-n", "-I", "-i", "-E", pattern)
    assert done.returncode in (0, 1), done.stderr    # 1: no match
    return done.stdout.splitlines()


def _offending(lines: list[str]) -> list[str]:
    return [line for line in lines if not THIRD_PARTY.search(line.split(":", 2)[-1])]


def test_patterns_find_history_and_leave_third_party_links():
    history, commit = re.compile(HISTORY, re.IGNORECASE), re.compile(COMMIT, re.IGNORECASE)
    for text in ("measured (iss" + "ue 15)", "Issue" + " 21 removed a rule", "before sess" + "ion 27",
                 "pro" + "be 3", "Fin" + "ding #2"):
        assert history.search(text), text
    for text in ("a session timeout of 30 minutes", "issues/34314", "the probe's result", "issue numbers"):
        assert not history.search(text), text
    assert commit.search("a regression since com" + "mit " + "f00d" + "123")
    assert not commit.search("commit the trials to SQLite")
    assert _offending(["docs/x.md:3:see apache/arrow#34314 (iss" + "ue 34314 there)"]) == []
    assert _offending(["docs/x.md:3:https://github.com/duckdb/duckdb/issues/1234: iss" + "ue 1234"]) == []
    assert _offending(["docs/x.md:3:as measured in iss" + "ue 15"]) != []


def test_no_numbered_references_to_past_work(checkout):
    found = _offending(_grep(HISTORY))
    assert found == [], "state the fact or the reason instead of pointing at past work:\n" + "\n".join(found)


def test_no_commit_ids_as_provenance(checkout):
    found = _offending(_grep(COMMIT))
    lines = _grep(r"\b[0-9a-f]{7,40}\b")
    words = sorted({w for line in lines for w in HEX_WORD.findall(line.split(":", 2)[-1])})
    if words:
        # A word that names a commit of this repository is provenance; a content hash the product prints is not.
        batch = subprocess.run(["git", "-C", str(checkout), "cat-file", "--batch-check"], input="\n".join(words) + "\n",
                               capture_output=True, text=True, timeout=120)
        answers = batch.stdout.splitlines()
        assert len(answers) == len(words), batch.stderr
        commits = {w for w, answer in zip(words, answers) if answer.split()[1:2] == ["commit"]}
        found += [line for line in lines if commits & set(HEX_WORD.findall(line.split(":", 2)[-1]))]
    assert found == [], "commit ids belong in git history, not in tracked files:\n" + "\n".join(found)
