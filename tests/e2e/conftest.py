"""Shared fixtures for the end-to-end tests: paths to the built binary, the default model
and the golden fixtures. Tests that need the default model skip when it is absent
(scripts/get_default_model.sh fetches it; CI always has it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("VOLTINFER_BIN", ROOT / "build" / "voltinfer"))
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GOLDEN = ROOT / "tests" / "golden"


def load_module(path: Path, name: str) -> ModuleType:
    """A Python file of the repository (a script, a self-test) imported as a module under name."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def voltinfer() -> Path:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build first (scripts/setup.sh)")
    return BIN


@pytest.fixture(scope="session")
def default_model() -> Path:
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing: run scripts/get_default_model.sh")
    return DEFAULT_MODEL


def run(args: list[str], *, input: str | None = None, timeout: float = 300, check: bool = True,
        env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN), *map(str, args)], input=input, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"voltinfer {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc
