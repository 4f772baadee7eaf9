"""Small task sources in their real formats (GSM8K, AlpacaEval, DeepSearchQA), shared by the task
tests, the leak test (task_sources.py) and the end-to-end evaluations."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from a2rl_tasks.alpacaeval import data as alpaca_data


def make_gsm8k_dir(root: Path, n_train: int = 12, n_test: int = 5, overlap: int = 0) -> Path:
    """A small self-made GSM8K-format source (train.jsonl + test.jsonl)."""
    root.mkdir(parents=True, exist_ok=True)

    def row(i: int, kind: str) -> dict[str, str]:
        a, b = 3 * i + (7 if kind == "Train" else 1007), 2 * i + 1
        return {
            "question": f"{kind} item {i}: Mia has {a} marbles and wins {b} more in a game. How many now?",
            "answer": f"Mia has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} marbles.\n#### {a + b:,}",
        }

    test = [row(i, "Test") for i in range(n_test)]
    train = [row(i, "Train") for i in range(n_train)] + test[:overlap]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (root / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    return root


TOPICS = ("volcanoes", "honeybees", "the printing press", "tides", "photosynthesis", "jazz", "glaciers",
          "the Roman roads", "compound interest", "black holes", "sourdough bread", "migratory birds",
          "semiconductors", "coral reefs", "the Silk Road", "chess openings")  # fmt: skip


def eval_row(i: int) -> dict[str, str]:
    topic = TOPICS[i % len(TOPICS)]
    return {
        "instruction": f"Explain to a curious ten-year-old how {topic} work, in a few sentences (item {i}).",
        "output": f"Reference answer {i}: {topic} are fascinating. "
        + "Here is a careful explanation. " * (1 + i % 4),
        "generator": "gpt4_1106_preview",
        "dataset": "helpful_base",
    }


def train_row(i: int) -> dict[str, str]:
    return {
        "instruction": f"Write a short haiku about the number {i} and the colour of the sky at dusk.",
        "input": "Use simple words." if i % 3 == 0 else "",
        "output": f"Number {i} glows / dusk paints the sky in amber / quiet evening",
    }


def make_alpaca_dir(root: Path, n_train: int = 12, n_eval: int = 6, overlap: int = 2) -> Path:
    """Alpaca-format training file + AlpacaEval-format evaluation file; `overlap` training rows
    repeat an evaluation instruction and one training row quotes a reference output."""
    root.mkdir(parents=True, exist_ok=True)
    evals = [eval_row(i) for i in range(n_eval)]
    train = [train_row(i) for i in range(n_train)]
    for k in range(overlap):
        train[2 * k + 1] = {"instruction": evals[k]["instruction"], "input": "", "output": "A short answer."}
    if overlap:
        train[-1] = {"instruction": "Summarise this.", "input": evals[-1]["output"], "output": "Fine."}
    (root / alpaca_data.EVAL_FILE).write_text(json.dumps(evals, indent=1))
    (root / alpaca_data.TRAIN_FILE).write_text(json.dumps(train, indent=1))
    return root


COUNTRIES = ("Freedonia", "Sylvania", "Latveria", "Genovia", "Elbonia", "Ruritania", "Graustark",
             "Florin", "Guilder", "Markovia", "Zubrowka", "Krakozhia")  # fmt: skip

CAPITALS = ("Zenda", "Vorhaven", "Doomstadt", "Pyrus", "Mudville", "Strelsau", "Edelweiss",
            "Florin City", "Guildton", "Markburg", "Lutz", "Krakow Nova")  # fmt: skip


def dsqa_row(i: int) -> dict[str, Any]:
    country = COUNTRIES[i % len(COUNTRIES)]
    if i % 3 == 2:
        return {
            "example_id": i,
            "problem": f"Which rivers flow through the fictional country of {country} (question {i})?",
            "problem_category": "Geography",
            "answer": f"River {i}a, River {i}b",
            "answer_type": "Set Answer",
        }
    return {
        "example_id": i,
        "problem": f"What is the capital city of the fictional country of {country} (question {i})?",
        "problem_category": "Geography",
        "answer": CAPITALS[i % len(CAPITALS)],
        "answer_type": "Single Answer",
    }


def make_dsqa_file(root: Path, n: int = 12, fmt: str = "jsonl") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = [dsqa_row(i) for i in range(n)]
    path = root / f"deepsearchqa.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    else:
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return path


def make_corpus(path: Path, n: int = 12) -> Path:
    docs = []
    for i in range(n):
        country = COUNTRIES[i % len(COUNTRIES)]
        docs.append({"title": country, "text": f"The capital of {country} is {CAPITALS[i % len(CAPITALS)]}."})
        docs.append(
            {"title": f"Rivers of {country}", "text": f"Question {i}: the rivers are River {i}a, River {i}b."}
        )
    docs.append({"title": "Unrelated", "text": "Bread is baked in ovens."})
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path
