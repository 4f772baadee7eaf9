"""The built-in tiny model: tokenizer round trip, deterministic build, idempotent CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_cli import main as cli_main

from a2rl.models.tiny import MARKER, build_tiny_model, build_tokenizer, is_built
from a2rl.store.cas import hash_tree

ROUND_TRIP = [
    "47 + 38 = 85\n#### 85",
    "Question: What is 47 - 38?\nAnswer: ",
    "Ava has 12 coins and gets 7 more.  Total: 65,000.5 -3\t(ok)\n\n",
    "héllo wörld — ünïcode ✓ 中文",
]


# Not the shared `tiny_model`: this module tests the build itself and compares tree digests
# (which include file modes) with fresh builds, so it needs its own writable build.
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_tokenizer_round_trips_text_exactly(text: str) -> None:
    tok = build_tokenizer(0)
    assert tok.decode(tok(text)["input_ids"]) == text


def test_digits_are_single_tokens() -> None:
    tok = build_tokenizer(0)
    pieces = tok.convert_ids_to_tokens(tok("12345 + 678")["input_ids"])
    digit_pieces = [p for p in pieces if any(ch.isdigit() for ch in p)]
    assert digit_pieces == list("12345678")


def test_saved_model_loads_with_auto_classes(tiny_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config.model_type == "llama"
    assert tok.padding_side == "left"
    assert tok.eos_token_id is not None and tok.pad_token_id is not None
    assert tok.eos_token_id != tok.pad_token_id
    assert model.config.eos_token_id == tok.eos_token_id == model.generation_config.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id == model.generation_config.pad_token_id
    n_params = sum(p.numel() for p in model.parameters())
    assert 2_000_000 <= n_params <= 5_000_000
    assert (tiny_dir / "model.safetensors").is_file()
    # The reloaded tokenizer still round-trips (no class swap on reload).
    text = ROUND_TRIP[0]
    assert tok.decode(tok(text)["input_ids"]) == text


def test_chat_template_has_generation_markers(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
    out = tok.apply_chat_template(msgs, tokenize=True, return_assistant_tokens_mask=True, return_dict=True)
    mask = out["assistant_masks"]
    ids = out["input_ids"]
    assistant_text = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert assistant_text == "5" + tok.eos_token
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|assistant|>\n")


def test_build_is_deterministic_per_seed(tiny_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert hash_tree(again).digest == hash_tree(tiny_dir).digest
    assert hash_tree(other).digest != hash_tree(tiny_dir).digest


def test_marker_and_idempotent_rebuild(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "tiny"
    assert cli_main(["models", "build-tiny", "--dest", str(dest), "--seed", "3"]) == 0
    marker = json.loads((dest / MARKER).read_text())
    assert marker["params"]["seed"] == 3 and marker["params"]["kind"] == "tiny"
    assert is_built(dest, 3) and not is_built(dest, 4)
    mtime = (dest / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    assert cli_main(["models", "build-tiny", "--dest", str(dest), "--seed", "3"]) == 0
    assert "already built" in capsys.readouterr().out
    assert (dest / "model.safetensors").stat().st_mtime_ns == mtime
    # A different seed replaces the model in place.
    assert cli_main(["models", "build-tiny", "--dest", str(dest), "--seed", "4"]) == 0
    assert is_built(dest, 4)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tiny.build-")]
