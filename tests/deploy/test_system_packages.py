"""The Debian packages beside the Python ones (scripts/system-packages.txt): one install path for users and CI
(`scripts/install` runs scripts/system-packages, `.ci/run` runs scripts/install), a plain report of what it could
not install and what then skips, and tests that skip without a package locally but fail under CI=true."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import require_system, system_packages, system_tool

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system-packages"
BASH = shutil.which("bash") or "/bin/bash"


def run_script(path_dir: Path, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
    """scripts/system-packages with only `path_dir` on PATH (as `user`, through runuser, when given)."""
    command = [BASH, str(SCRIPT), *args]
    if user:
        command = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--", *command]
    return subprocess.run(command, env={"PATH": str(path_dir), "LANG": "C"}, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_the_list_holds_the_packages_and_what_needs_them():
    packages = system_packages()
    assert set(packages) == {"bubblewrap", "postgresql", "chromium", "tmux", "redis-server"}
    assert packages["postgresql"][0] == ["initdb", "/usr/lib/postgresql/*/bin/initdb"]
    for package, (found_as, needed_by) in packages.items():
        assert found_as and needed_by, package
        for named in (w.strip("(),.") for w in needed_by.split() if w.strip("(),.").startswith("tests/")):
            assert (ROOT / named).is_file(), f"{package}: {named} does not exist"


def test_users_and_ci_install_them_through_one_script():
    install = (ROOT / "scripts" / "install").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/system-packages" in install and "bash scripts/install" in ci
    commands = [ln for ln in (install + ci).splitlines() if not ln.lstrip().startswith("#")]
    assert not [ln for ln in commands if "apt-get" in ln]   # no second list of packages to keep in step


def test_the_script_says_what_it_could_not_install_and_agrees_with_the_tests(tmp_path, monkeypatch):
    """Without apt-get nothing can be installed: the script names every missing package with what needs it and
    exits 0 (the Python install stands without them); the tests find the same packages missing."""
    (tmp_path / "tmux").symlink_to("/bin/true")     # a `tmux` on PATH: found, so not reported
    done = run_script(tmp_path)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = {p for p in system_packages() if system_tool(p) is None}
    assert system_tool("tmux") == str(tmp_path / "tmux") and {"bubblewrap", "chromium", "redis-server"} <= missing
    assert f"NOT installed: {' '.join(p for p in system_packages() if p in missing)}: no apt-get" in done.stderr
    for package, (_, needed_by) in system_packages().items():
        assert (f"  - {package}: {needed_by}" in done.stderr) == (package in missing), package
    assert "under CI=true it fails" in done.stderr


def test_without_root_or_passwordless_sudo_it_gives_the_command_to_run():
    with tempfile.TemporaryDirectory() as bin_dir:    # as root: run as nobody, who can read this one
        os.chmod(bin_dir, 0o755)
        (Path(bin_dir) / "apt-get").symlink_to(shutil.which("apt-get") or "/bin/false")   # apt-get there, sudo not
        done = run_script(Path(bin_dir), user="nobody" if os.geteuid() == 0 else None)
    assert done.returncode == 0, done.stderr
    assert "not root and no passwordless sudo: run `sudo apt-get install -y bubblewrap" in done.stderr


def test_check_installs_nothing_and_reports(tmp_path):
    done = run_script(tmp_path, "--check")
    assert done.returncode == 0 and "--check installs nothing" in done.stderr


def test_a_missing_package_skips_locally_and_fails_in_ci(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="tmux is not installed: `bash scripts/install` installs it"):
        require_system("tmux")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="tmux is not installed.*CI must run every test"):
        require_system("tmux")
    (tmp_path / "tmux").symlink_to("/bin/true")
    assert require_system("tmux") == str(tmp_path / "tmux")
