"""A real pretrained model: `builtin:smollm2-135m` (built once, cached under ~/.cache/a2rl/models)
evaluated on small held-out slices of GSM8K and HumanEval on CPU with the transformers backend,
under the default evaluation protocol. Checks the outputs are well-formed, not the scores: the
chat template was applied, and an answer was extracted for most items.

Wall time: the decode budget is capped (`MAX_NEW_TOKENS`; the protocols allow 512 and more) and
torch runs one thread: on a 2-core machine shared with other processes, two threads made every
decoding step ~10x slower (0.19 s against 2.0 s per step at batch 8, measured). The full-budget
figures under both protocols: `bench/smollm2_eval.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2rl_tasks import get_task

from a2rl.models import smollm2
from a2rl.models.resolve import resolve_base_model
from a2rl.protocols import DEFAULT_PROTOCOL
from tests.support.smollm2_eval import CHAT_MARKERS, EXECUTED, RecordingBackend, evaluate_slice

pytestmark = pytest.mark.slow
#: Items per slice. GSM8K's reference prompt is 8-shot (~1,500 tokens an item): on one thread its
#: prefill alone took ~160 s of the 8-item slice's 260 s (2026-11-29), so its slice is half as long.
N_ITEMS = {"gsm8k": 4, "humaneval": 8}
MAX_NEW_TOKENS = 192


@pytest.fixture(scope="module")
def model_dir() -> Path:
    started = time.monotonic()
    path = resolve_base_model("builtin:smollm2-135m")  # converted once, then reused from the cache
    print(f"\nbuiltin:smollm2-135m resolved in {time.monotonic() - started:.1f} s: {path}")
    return path


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> Iterator[RecordingBackend]:
    import torch  # lazy: heavy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.monotonic()
    loaded = RecordingBackend(
        model_dir, device="cpu", batch_size=max(N_ITEMS.values()), max_new_tokens_cap=MAX_NEW_TOKENS
    )
    print(f"loaded in {time.monotonic() - started:.1f} s")
    try:
        yield loaded
    finally:
        loaded.close()
        torch.set_num_threads(threads)


def test_the_cached_model_matches_its_record(model_dir: Path) -> None:
    record = smollm2.read_record(model_dir)
    assert record is not None and record["params"] == smollm2.build_params()
    assert smollm2.verify(model_dir).digest == record["digest"]
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    assert record["n_parameters"] > 130_000_000
    assert (model_dir / "chat_template.jinja").read_text().count("<|im_start|>") >= 2


@pytest.mark.parametrize("task_name", ["gsm8k", "humaneval"])
def test_heldout_slice_is_well_formed(
    task_name: str, backend: RecordingBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = N_ITEMS[task_name]
    run = evaluate_slice(backend, task_name, None, n, tmp_path)
    with capsys.disabled():
        print(f"\n{task_name} [{DEFAULT_PROTOCOL}]: {json.dumps(run.summary(), sort_keys=True)}")
    assert run.protocol == DEFAULT_PROTOCOL
    assert run.result.evaluator_version == get_task(task_name).evaluator_version
    assert run.result.n == n and len(run.result.details) == n
    # The chat template was applied: every prompt the backend tokenized is in SmolLM2's form.
    assert len(run.texts) == n
    assert all(all(m in text for m in CHAT_MARKERS) for text in run.texts), run.texts[0][:300]
    assert all(text.rstrip().endswith("<|im_start|>assistant") for text in run.texts)
    assert all(d["mode"] == "chat" for d in run.result.details)
    assert all(str(d["completion"]).strip() for d in run.result.details)
    # An answer was taken from most outputs.
    assert run.extracted >= 0.75 * n, [d["completion"][:200] for d in run.result.details]
    if task_name == "humaneval":
        # Every program was built and run (no item skipped as "no code").
        assert all(d["status"] in EXECUTED for d in run.result.details)
    else:
        assert all("gold" in d for d in run.result.details)
    assert 0.0 <= run.result.score <= 100.0
