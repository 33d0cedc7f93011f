"""Fixtures for the server end-to-end tests: start the real `voltinfer serve` binary on a
free port (CPU backend) and stop it afterwards, and build a tiny random-weight Qwen3.5 that
speaks the real Qwen3.5 tokenizer and chat template (tests/data) so the Qwen conventions
(<think> pre-fill, tool rendering) run through a genuine model forward pass.

The tiny Qwen3.5 has the shape of tests/golden/qwen35_a but the full 248k vocabulary, so
every token the tokenizer produces is a valid model input."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai/anthropic SDKs are built on
import pytest

from conftest import BIN, DEFAULT_MODEL, ROOT

API_KEY = "test-key-7d1f"
TOKENIZER_DIR = ROOT / "tests" / "data" / "tokenizer" / "qwen35"
QWEN_TEMPLATE = ROOT / "tests" / "data" / "chat_templates" / "qwen3_5.jinja"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running `voltinfer serve`; .url is its base URL (no /v1)."""

    def __init__(self, args: list[str], api_key: str | None, log: Path):
        self.port = free_port()
        self.api_key = api_key
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(BIN), "serve", "--port", str(self.port), *map(str, args)]
        # e.g. VOLTINFER_SERVE_ARGS="--device cuda": the same tests against the GPU backend.
        cmd += shlex.split(os.environ.get("VOLTINFER_SERVE_ARGS", ""))
        if api_key:
            cmd += ["--api-key", api_key]
        self.log_path = log
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"voltinfer serve exited {self.proc.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"voltinfer serve did not become healthy:\n{log.read_text()}")

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def metrics(self) -> dict[str, float]:
        """Prometheus samples as {'name{labels}': value}."""
        text = httpx.get(self.url + "/metrics", headers=self.headers(), timeout=10).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_server(tmp_path_factory, name: str, args: list[str], api_key: str | None = API_KEY):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build first (scripts/setup.sh)")
    log = tmp_path_factory.mktemp(name) / "server.log"
    return Server(args, api_key, log)


@pytest.fixture(scope="module")
def smol_server(tmp_path_factory):
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing: run scripts/get_default_model.sh")
    # No -m: `voltinfer serve` must find the bundled default model by itself.
    srv = start_server(tmp_path_factory, "smol", ["-np", "4", "-c", "1024", "--max-body", "65536",
                                                  "--alias", "smollm2"])
    yield srv
    srv.stop()


def make_tiny_qwen35(folder: Path) -> Path:
    """A random-weight Qwen3.5 (hybrid GDN + attention) with the real tokenizer and template."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok_json = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())
    n_vocab = max(max(tok_json["model"]["vocab"].values()), *(a["id"] for a in tok_json["added_tokens"])) + 1
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
        max_position_embeddings=4096, initializer_range=0.5,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    torch.manual_seed(20261129)
    model = transformers.Qwen3_5ForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    for extra in ("generation_config.json",):
        (folder / extra).unlink(missing_ok=True)
    shutil.copy(TOKENIZER_DIR / "tokenizer.json", folder / "tokenizer.json")
    shutil.copy(TOKENIZER_DIR / "tokenizer_config.json", folder / "tokenizer_config.json")
    shutil.copy(QWEN_TEMPLATE, folder / "chat_template.jinja")
    return folder


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory) -> Path:
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip("Qwen3.5 tokenizer fixture missing")
    return make_tiny_qwen35(tmp_path_factory.mktemp("tiny_qwen35"))


@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory, qwen_dir):
    srv = start_server(tmp_path_factory, "qwen", ["-m", qwen_dir, "-np", "2", "-c", "2048",
                                                  "--alias", "tiny-qwen35"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def qwen_hf_tokenizer(qwen_dir):
    """transformers' own tokenizer + chat template rendering, the reference for prompts."""
    transformers = pytest.importorskip("transformers")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(qwen_dir / "tokenizer.json"))
    tok.chat_template = (qwen_dir / "chat_template.jinja").read_text()
    return tok


def _scripted(tmp_path_factory, name: str, scripts: dict) -> tuple[Path, dict]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip("Qwen3.5 tokenizer fixture missing")
    from scripted_qwen import build_scripted_qwen35
    folder = tmp_path_factory.mktemp(name)
    return folder, build_scripted_qwen35(folder, TOKENIZER_DIR, QWEN_TEMPLATE, scripts)


@pytest.fixture(scope="module")
def scripted_qwen(tmp_path_factory):
    """(server, chains) for a tiny Qwen3.5 built to reply with scripted_qwen.SCRIPT_TOOL_CALL
    when thinking is on and SCRIPT_ANSWER when it is off (see scripted_qwen.py)."""
    from scripted_qwen import SCRIPT_ANSWER, SCRIPT_TOOL_CALL, START_THINKING_OFF, START_THINKING_ON
    folder, info = _scripted(tmp_path_factory, "scripted_qwen35",
                             {START_THINKING_ON: SCRIPT_TOOL_CALL, START_THINKING_OFF: SCRIPT_ANSWER})
    srv = start_server(tmp_path_factory, "scripted", ["-m", folder, "-np", "2", "-c", "2048",
                                                      "--alias", "scripted-qwen35"])
    yield srv, info
    srv.stop()


@pytest.fixture(scope="module")
def scripted_qwen_json(tmp_path_factory):
    """(server, chains) for a tiny Qwen3.5 that calls get_weather in the JSON form
    (scripted_qwen.SCRIPT_JSON_CALL) when thinking is on."""
    from scripted_qwen import SCRIPT_JSON_CALL, START_THINKING_ON
    folder, info = _scripted(tmp_path_factory, "scripted_qwen35_json", {START_THINKING_ON: SCRIPT_JSON_CALL})
    srv = start_server(tmp_path_factory, "scripted_json", ["-m", folder, "-np", "1", "-c", "1024",
                                                           "--alias", "scripted-qwen35"])
    yield srv, info
    srv.stop()
