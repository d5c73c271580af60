"""The production profile's systemd units (deploy/systemd/) read as systemd would: the command each runs, with the
`${VAR}` references of ExecStart taken from the environment file, so the tests start exactly what a deployment runs."""
from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

from tests.dagster.procs import ROOT

UNITS = ROOT / "deploy" / "systemd"
INSTALL_ROOT = "/srv/causal_assets"   # where the units expect the checkout (and its .venv)


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str   # systemd keys are case-sensitive
    parser.read_string((UNITS / f"causal-assets-{name}.service").read_text())
    return parser


def env_example() -> dict[str, str]:
    out = {}
    for line in (UNITS / "causal-assets.env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def exec_start(name: str, env: dict[str, str] | None = None, venv_bin: str | Path | None = None) -> list[str]:
    """The unit's ExecStart as argv: `${VAR}` expanded from `env` (a KeyError for one it lacks, as systemd would
    leave it empty), and the install's venv replaced by `venv_bin` when given."""
    argv = shlex.split(unit(name)["Service"]["ExecStart"])
    if venv_bin is not None:
        prefix = f"{INSTALL_ROOT}/.venv/bin/"
        assert argv[0].startswith(prefix), argv[0]
        argv[0] = str(Path(venv_bin) / argv[0][len(prefix):])
    if env is not None:
        argv = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a) for a in argv]
    return argv


def option(argv: list[str], *flags: str) -> str | None:
    for i, a in enumerate(argv):
        if a in flags and i + 1 < len(argv):
            return argv[i + 1]
    return None
