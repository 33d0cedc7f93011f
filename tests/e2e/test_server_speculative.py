"""`voltinfer serve --spec ...` through the official openai SDK: a server that drafts answers
exactly what a server without drafts answers, greedy and seeded-sampled, several requests at
once, and reports its drafts in /metrics.

- SmolLM2 (the bundled model, attention only) with n-gram drafts, on prompts that ask for text
  the prompt already holds (where n-gram drafts are kept);
- a random Qwen3.5 from `make-model` (GDN layers: refused drafts go back to a state copy) with
  its MTP head, through /v1/completions.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import DEFAULT_MODEL, run
from server_fixtures import API_KEY, start_server


def oai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def smol_pair(tmp_path_factory):
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing: run scripts/get_default_model.sh")
    common = ["-np", "3", "-c", "1024", "--alias", "smollm2"]
    plain = start_server(tmp_path_factory, "smol_plain", common)
    drafted = start_server(tmp_path_factory, "smol_spec", [*common, "--spec", "ngram", "--draft-max", "5"])
    yield plain, drafted
    plain.stop()
    drafted.stop()


TEXT = ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
        "How vexingly quick daft zebras jump. Sphinx of black quartz, judge my vow.")


def chat(srv, content: str, **kw) -> str:
    r = oai(srv).chat.completions.create(model="smollm2", messages=[{"role": "user", "content": content}],
                                         max_tokens=80, **kw)
    return r.choices[0].message.content


def test_ngram_server_answers_as_the_plain_one(smol_pair):
    plain, drafted = smol_pair
    asks = [f"Repeat this text exactly: {TEXT}", f"Copy the following, word for word: {TEXT}",
            "Count from 1 to 30, separated by commas."]
    kws = [dict(temperature=0), dict(temperature=0.8, seed=42)]
    jobs = [(a, kw) for a in asks for kw in kws]
    with ThreadPoolExecutor(len(jobs)) as pool:  # all at once: drafts and prompt chunks share steps
        want = list(pool.map(lambda j: chat(plain, j[0], **j[1]), jobs))
        got = list(pool.map(lambda j: chat(drafted, j[0], **j[1]), jobs))
    for (ask, kw), w, g in zip(jobs, want, got):
        assert g == w, f"{kw}: {ask[:30]}..."
    m = drafted.metrics()
    kept = m['voltinfer_draft_tokens_total{outcome="kept"}']
    proposed = m['voltinfer_draft_tokens_total{outcome="proposed"}']
    assert 0 < kept <= proposed, (kept, proposed)
    assert plain.metrics()['voltinfer_draft_tokens_total{outcome="proposed"}'] == 0


@pytest.fixture(scope="module")
def qwen_pair(tmp_path_factory, voltinfer):
    d = tmp_path_factory.mktemp("spec_qwen")
    run(["make-model", "--arch", "qwen3_5", "--preset", "tiny", "--seed", "4", "--dtype", "q8_0", "-o",
         d / "q.gguf"])
    common = ["-m", d / "q.gguf", "-np", "2", "-c", "512", "--alias", "tiny"]
    plain = start_server(tmp_path_factory, "qwen_plain", common)
    drafted = start_server(tmp_path_factory, "qwen_spec", [*common, "--spec", "mtp", "--draft-max", "3"])
    yield plain, drafted
    plain.stop()
    drafted.stop()


def test_mtp_server_answers_as_the_plain_one(qwen_pair):
    plain, drafted = qwen_pair

    def complete(srv, prompt, kw):
        r = oai(srv).completions.create(model="tiny", prompt=prompt, max_tokens=40, **kw)
        return r.choices[0].text

    jobs = [("one two three four", dict(temperature=0)), ("a b a b a b", dict(temperature=0.9, seed=5)),
            ("hello", dict(temperature=0))]
    with ThreadPoolExecutor(len(jobs)) as pool:
        want = list(pool.map(lambda j: complete(plain, *j), jobs))
        got = list(pool.map(lambda j: complete(drafted, *j), jobs))
    assert got == want
    m = drafted.metrics()
    assert m['voltinfer_draft_tokens_total{outcome="proposed"}'] > 0


def test_spec_mtp_refused_without_a_head(tmp_path):
    proc = run(["serve", "--spec", "mtp", "-c", "256"], check=False, timeout=120)
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing")
    assert proc.returncode != 0 and "has no MTP head" in proc.stderr
