"""deepsearchqa: the seed-42 split, search backends, the batched ReAct loop, judged scoring."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from a2rl_cli import main
from a2rl_grader.inference.text import cut_at_stops
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import heldout_leaks, stage_artifacts
from a2rl_tasks.deepsearchqa import DeepSearchQATask, data
from a2rl_tasks.deepsearchqa.judging import (
    decided_without_judge,
    extract_prediction,
    judge_messages,
    verdict_from_reply,
)
from a2rl_tasks.deepsearchqa.react import (
    MAX_STEPS,
    NO_ANSWER,
    initial_prompt,
    last_answer,
    parse_action,
    rollout,
)
from a2rl_tasks.deepsearchqa.search import (
    NO_RESULTS,
    CorpusSearch,
    HttpSearch,
    SearchConfigError,
    search_from_env,
)
from a2rl_tasks.judge import JudgeConfigError

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl.protocols import PROTOCOL_A2RL
from tests.support.judge_server import JudgeServer
from tests.support.task_data import COUNTRIES, dsqa_row, make_corpus, make_dsqa_file

# --- self-made data in the google/deepsearchqa format -----------------------------------------


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# --- split and staging -----------------------------------------------------------------------


def test_shuffle_is_the_datasets_seed_42_shuffle() -> None:
    datasets = pytest.importorskip("datasets")
    rows = [dsqa_row(i) for i in range(37)]
    ds = datasets.Dataset.from_list(rows).shuffle(seed=42)
    assert [r["example_id"] for r in ds] == [rows[i]["example_id"] for i in data.shuffled_order(37)]


def test_split_sizes_follow_the_reference() -> None:
    assert data.split_sizes(900) == (100, 200)
    assert data.split_sizes(300) == (100, 200)
    assert data.split_sizes(12) == (4, 8)
    rows = data.validate([dsqa_row(i) for i in range(900)], "t")
    train, heldout, meta = data.split(rows)
    assert (len(train), len(heldout)) == (100, 200)
    assert meta == {"dataset": "google/deepsearchqa", "source_split": "eval", "shuffle_seed": 42,
                    "train_size": 100, "eval_size": 200, "unused_size": 600, "total_size": 900}  # fmt: skip
    order = data.shuffled_order(900)
    assert [t["example_id"] for t in train] == [str(i) for i in order[:100]]
    assert [h["example_id"] for h in heldout] == [str(i) for i in order[100:300]]


def test_stage_writes_disjoint_artifacts(tmp_path: Path) -> None:
    src = make_dsqa_file(tmp_path / "src", n=12)
    staged = stage_artifacts(
        DeepSearchQATask(protocol=PROTOCOL_A2RL), source=str(src.parent), root=tmp_path / "staged"
    )
    train = _jsonl(staged.train_dir / "train.jsonl")
    heldout = _jsonl(staged.heldout_dir / "heldout.jsonl")
    assert (len(train), len(heldout)) == (4, 8)
    meta = json.loads((staged.train_dir / "split_meta.json").read_text())
    assert meta["train_size"] == 4 and meta["eval_size"] == 8 and meta["shuffle_seed"] == 42
    assert set(heldout[0]) == {"id", "example_id", "problem", "problem_category", "answer", "answer_type"}
    assert heldout[0]["id"] == f"deepsearchqa-{heldout[0]['example_id']}"
    assert heldout_leaks(staged.train_dir, staged.heldout_dir) == []
    train_text = "".join(p.read_text() for p in staged.train_dir.iterdir())
    assert not any(h["problem"] in train_text for h in heldout)
    assert not (staged.train_dir / "heldout.jsonl").exists()


def test_train_rows_quoting_heldout_text_are_dropped() -> None:
    rows = data.validate([dsqa_row(i) for i in range(12)], "t")
    order = data.shuffled_order(12)
    held = rows[order[4]]
    rows[order[0]] = {**rows[order[0]], "answer": f"see: {held['problem']}"}
    train, heldout, meta = data.split(rows)
    assert len(train) == 3 and meta["train_size"] == 3 and len(heldout) == 8


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_other_source_formats(fmt: str, tmp_path: Path) -> None:
    rows = data.load_source(str(make_dsqa_file(tmp_path, n=5, fmt=fmt)))
    assert [r["answer"] for r in rows] == [dsqa_row(i)["answer"] for i in range(5)]
    assert rows[2]["answer_type"] == "Set Answer" and rows[2]["example_id"] == "2"


def test_source_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(A2rlError, match="needs a data source"):
        data.load_source("")
    with pytest.raises(A2rlError, match="not found"):
        data.load_source(str(tmp_path / "nope.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**dsqa_row(0), "answer_type": "Multiple"}) + "\n")
    with pytest.raises(A2rlError, match="answer_type"):
        data.load_source(str(bad))
    bad.write_text(json.dumps(dsqa_row(0)) + "\n" + json.dumps(dsqa_row(0)) + "\n")
    with pytest.raises(A2rlError, match="not unique"):
        data.load_source(str(bad))


# --- search backends -------------------------------------------------------------------------


def test_corpus_search_ranks_with_bm25(tmp_path: Path) -> None:
    search = CorpusSearch(make_corpus(tmp_path / "corpus.jsonl"))
    obs = search.search("capital of Latveria")
    first = obs.split(" | ")[0]
    assert first == "Latveria: The capital of Latveria is Doomstadt."
    assert len(obs.split(" | ")) == 3
    assert search.search("zzz qqq") == NO_RESULTS
    assert search.search("capital of Latveria") == obs  # deterministic
    assert search.tag.startswith("corpus-") and search.queries == 3 and search.errors == 0


class SearchAPI:
    """A loopback search API answering SerpAPI-style JSON (500 for the query "boom")."""

    def __init__(self) -> None:
        self.queries: list[dict[str, list[str]]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                params = parse_qs(urlsplit(self.path).query)
                api.queries.append(params)
                if params.get("q") == ["boom"]:
                    self.send_response(500)
                    self.end_headers()
                    return
                results = [
                    {"title": f"r{i}", "snippet": f"snippet {i} for {params['q'][0]}"} for i in range(5)
                ]
                body = json.dumps({"organic_results": results}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/search?engine=test"


@pytest.fixture
def search_api() -> Iterator[SearchAPI]:
    api = SearchAPI()
    yield api
    api.httpd.shutdown()
    api.httpd.server_close()


def test_http_search_backend(search_api: SearchAPI) -> None:
    search = HttpSearch(search_api.url, api_key="k123")
    assert search.search("who won") == "snippet 0 for who won | snippet 1 for who won | snippet 2 for who won"
    assert search_api.queries[0] == {"engine": ["test"], "q": ["who won"], "num": ["3"], "api_key": ["k123"]}
    assert search.search("boom").startswith("Search error: HTTPError")
    assert search.errors == 1 and search.tag == "http-127.0.0.1"


def test_search_configuration(tmp_path: Path) -> None:
    with pytest.raises(SearchConfigError, match="A2RL_SEARCH_URL"):
        search_from_env({})
    corpus = make_corpus(tmp_path / "c.jsonl")
    with pytest.raises(SearchConfigError, match="only one"):
        search_from_env({"A2RL_SEARCH_URL": "http://x/s", "A2RL_SEARCH_CORPUS": str(corpus)})
    assert isinstance(search_from_env({"A2RL_SEARCH_CORPUS": str(corpus)}), CorpusSearch)
    with pytest.raises(SearchConfigError, match="not found"):
        search_from_env({"A2RL_SEARCH_CORPUS": str(tmp_path / "missing.jsonl")})
    with pytest.raises(SearchConfigError, match="http"):
        search_from_env({"A2RL_SEARCH_URL": "ftp://x"})


# --- the ReAct loop --------------------------------------------------------------------------


def test_action_parsing() -> None:
    a = parse_action("I should look.\nAction: search[capital of X]\nObservation: made up")
    assert a is not None and (a.kind, a.argument) == ("search", "capital of X")
    assert parse_action("Action:answer[ Paris ] more") is not None
    assert parse_action("no action here") is None
    assert last_answer("Action: answer[A]\nAction: answer[your answer]\nAction: search[x]") == "A"
    assert last_answer("Action: answer[your answer]") is None


class PolicyBackend(InferenceBackend):
    """A scripted policy behind the inference interface: it reads the question (and the last
    observation) from the prompt and acts; it honours stop strings like every backend."""

    name = "scripted"

    def __init__(self) -> None:
        self.calls: list[tuple[int, GenerationRequest]] = []

    def _act(self, prompt: str) -> str:
        question = re.findall(r"Question: (.*)\n", prompt)[-1]
        observations = re.findall(r"Observation: (.*)\n", prompt)
        if "Freedonia" in question or "Sylvania" in question:  # search, then answer from the result
            if not observations:
                country = "Freedonia" if "Freedonia" in question else "Sylvania"
                return f" I need it.\nAction: search[capital of {country}]\nObservation: made up\nThought: x"
            city = re.search(r"is ([A-Z][a-z]+)\.", observations[-1])
            return f" The result names it.\nAction: answer[{city.group(1) if city else 'unknown'}]"
        if "Latveria" in question:  # answers at once
            return " I know this one.\nAction: answer[Doomstadt]"
        if "Genovia" in question:  # never writes an action: forced to answer
            return " Hmm, I wonder about Genovia"
        if "Elbonia" in question:  # searches forever
            return f" Still looking.\nAction: search[Elbonia {len(observations)}]"
        if "Ruritania" in question:  # the placeholder first, then a real answer
            return " Done.\nAction: answer[your answer]" if "not a valid answer" not in prompt else (
                " Sorry.\nAction: answer[Strelsau]")  # fmt: skip
        return " ?"

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        self.calls.append((len(prompts), request))
        if request.stop == ("]",):
            return [cut_at_stops("Pyrus] and more text", request.stop) for _ in prompts]
        return [cut_at_stops(self._act(p), request.stop) for p in prompts]


def test_batched_rollout(tmp_path: Path) -> None:
    corpus = CorpusSearch(make_corpus(tmp_path / "corpus.jsonl"))
    questions = [(dsqa_row(i)["problem"], dsqa_row(i)["answer_type"]) for i in range(6)]
    backend = PolicyBackend()
    records = rollout(backend, questions, corpus.search)
    by_country = dict(zip(COUNTRIES[:6], records, strict=True))

    fr = by_country["Freedonia"]
    assert fr["predicted"] == "Zenda" and fr["steps"] == 2 and fr["searches"] == ["capital of Freedonia"]
    assert "made up" not in fr["trace"]  # text after the first action is dropped
    assert by_country["Sylvania"]["searches"] == ["capital of Sylvania"]
    assert by_country["Latveria"]["predicted"] == "Doomstadt" and by_country["Latveria"]["steps"] == 1
    assert by_country["Genovia"]["predicted"] == "Pyrus" and by_country["Genovia"]["forced_answer"]
    el = by_country["Elbonia"]
    assert el["predicted"] == NO_ANSWER and el["steps"] == MAX_STEPS and len(el["searches"]) == MAX_STEPS
    ru = by_country["Ruritania"]
    assert ru["predicted"] == "Strelsau" and ru["steps"] == 2

    # One generation call per step for all unfinished questions (plus one for forced answers).
    step_calls = [n for n, req in backend.calls if req.stop != ("]",)]
    assert step_calls == [6, 4, 1, 1, 1, 1]  # Freedonia, Sylvania, Elbonia, Ruritania; then Elbonia
    step_req = backend.calls[0][1]
    assert step_req.max_new_tokens == 256 and "\nAction:" not in step_req.stop
    forced = [(n, req.max_new_tokens) for n, req in backend.calls if req.stop == ("]",)]
    assert forced == [(1, 128)]


def test_prompt_format() -> None:
    p = initial_prompt("Who?", "Set Answer")
    assert p.endswith("\n\nQuestion: Who?\nAnswer type: Set Answer\n\nThought:")
    assert "search[" in p and "answer[" in p and "at most 6 steps" in p


# --- judging ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("correct", True), ("Correct.", True), ("**incorrect**", False), ("INCORRECT\nbecause", False),
     ("The answer is correct", None), ("", None)],
)  # fmt: skip
def test_verdict_parsing(reply: str, verdict: bool | None) -> None:
    assert verdict_from_reply(reply) is verdict


def test_obvious_cases_skip_the_judge() -> None:
    assert decided_without_judge("  zenda ", "Zenda") is True
    assert decided_without_judge("I don't know", "Zenda") is False
    assert decided_without_judge("", "Zenda") is False
    assert decided_without_judge("Zenda city", "Zenda") is None
    assert extract_prediction("Thought: x\nAction: answer[Zenda]") == "Zenda"
    assert extract_prediction("  Zenda \n") == "Zenda"
    msgs = judge_messages("Q?", "Set Answer", "A, B", "B and A")
    assert msgs[0]["content"] == "You are a strict answer evaluator."
    assert "Gold answer: A, B\nPredicted answer: B and A" in msgs[1]["content"]
    assert "ALL items" in msgs[1]["content"]


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("A2RL_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
        monkeypatch.delenv("A2RL_SEARCH_URL", raising=False)
        monkeypatch.setenv("A2RL_SEARCH_CORPUS", str(make_corpus(tmp_path / "corpus.jsonl")))
        yield server


def _refs(n: int = 6) -> list[dict[str, Any]]:
    return [{"id": f"deepsearchqa-{i}", **dsqa_row(i)} for i in range(n)]


def test_score_predictions_single_and_set_rules(judge: JudgeServer) -> None:
    refs = _refs(6)  # rows 2 and 5 are Set Answers
    preds = {
        "deepsearchqa-0": "It is Zenda.",  # Single, contains the gold: correct (judged)
        "deepsearchqa-1": "Vorhaven",  # exact: correct without the judge
        "deepsearchqa-2": "River 2b, River 2a",  # Set, all items: correct (judged)
        "deepsearchqa-3": "Thought: hm\nAction: answer[Zenda]",  # a trace; wrong answer (judged)
        "deepsearchqa-4": "I don't know",  # wrong without the judge
        "deepsearchqa-5": "River 5a",  # Set, an item missing: wrong (judged)
    }
    task = get_task("deepsearchqa", protocol=PROTOCOL_A2RL)
    assert task.evaluator_version.startswith("deepsearchqa-1+a2rl+judge-loopback-judge+search-corpus-")
    result = task.score_predictions(preds, refs)
    assert [d["correct"] for d in result.details] == [True, True, True, False, False, False]
    assert [d["judged"] for d in result.details] == [True, False, True, True, False, True]
    assert result.details[3]["predicted"] == "Zenda"
    assert judge.requests == 4 and result.correct == 3 and result.score == pytest.approx(50.0)
    assert result.metrics["single_accuracy"] == pytest.approx(50.0)
    assert result.metrics["set_accuracy"] == pytest.approx(50.0)
    assert result.metrics["no_answer_rate"] == pytest.approx(100 / 6)
    again = get_task("deepsearchqa", protocol=PROTOCOL_A2RL).score_predictions(preds, refs)
    assert judge.requests == 4 and again.metrics["judge_cache_hits"] == 4.0
    assert [d["correct"] for d in again.details] == [d["correct"] for d in result.details]


def test_evaluate_rolls_out_searches_and_judges(judge: JudgeServer, tmp_path: Path) -> None:
    src = make_dsqa_file(tmp_path / "src", n=18)
    staged = stage_artifacts(
        DeepSearchQATask(protocol=PROTOCOL_A2RL), source=str(src), root=tmp_path / "staged"
    )
    heldout = _jsonl(staged.heldout_dir / "heldout.jsonl")
    result = DeepSearchQATask(protocol=PROTOCOL_A2RL).evaluate(PolicyBackend(), staged.heldout_dir)
    assert result.n == len(heldout) == 12
    by_id = {d["id"]: d for d in result.details}
    for h in heldout:
        d = by_id[h["id"]]
        assert d["gold"] == h["answer"] and d["answer_type"] == h["answer_type"]
        if "Freedonia" in h["problem"] or "Sylvania" in h["problem"]:
            assert d["searches"] and d["predicted"] == h["answer"] and d["correct"]
    assert result.metrics["search_errors"] == 0.0 and "avg_steps" in result.metrics
    assert result.score == pytest.approx(100.0 * result.correct / result.n)


class NoGeneration(PolicyBackend):
    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        raise AssertionError("generation must not start without a judge and a search tool")


def test_missing_configuration_is_an_error_before_generation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    staged = stage_artifacts(
        DeepSearchQATask(protocol=PROTOCOL_A2RL),
        source=str(make_dsqa_file(tmp_path / "src")),
        root=tmp_path / "staged",
    )
    for k in ("A2RL_JUDGE_BASE_URL", "A2RL_JUDGE_MODEL", "A2RL_SEARCH_URL", "A2RL_SEARCH_CORPUS"):
        monkeypatch.delenv(k, raising=False)
    assert DeepSearchQATask(protocol=PROTOCOL_A2RL).evaluator_version == "deepsearchqa-1+a2rl"
    with pytest.raises(JudgeConfigError):
        DeepSearchQATask(protocol=PROTOCOL_A2RL).evaluate(NoGeneration(), staged.heldout_dir)
    monkeypatch.setenv("A2RL_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("A2RL_JUDGE_MODEL", "m")
    with pytest.raises(SearchConfigError, match="needs a search tool"):
        DeepSearchQATask(protocol=PROTOCOL_A2RL).evaluate(NoGeneration(), staged.heldout_dir)


def test_tasks_score_cli(judge: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = _refs(3)
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in refs))
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"id": "deepsearchqa-0", "prediction": "Action: answer[zenda]"}) + "\n"
        + json.dumps({"id": "deepsearchqa-2", "prediction": "River 2a"}) + "\n"
    )  # fmt: skip
    assert main(["tasks", "score", "deepsearchqa", "--protocol", "a2rl",
                 "--predictions", str(tmp_path / "p.jsonl"),
                 "--references", str(tmp_path / "r.jsonl"), "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert (out["n"], out["correct"]) == (3, 1) and out["metrics"]["missing"] == 1.0
    assert judge.requests == 1  # "zenda" equals the gold; the missing one is empty
