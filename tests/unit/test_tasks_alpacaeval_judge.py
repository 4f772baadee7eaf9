"""The shared LLM judge: configuration, retries, errors and the persistent cache (loopback server)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from a2rl_tasks.judge import (
    Judge,
    JudgeCache,
    JudgeClient,
    JudgeConfig,
    JudgeConfigError,
    JudgeError,
    cache_key,
    judge_config_from_env,
    version_tag,
)

from tests.support.judge_server import JudgeServer

DSQA_PROMPT = "Answer type: Single Answer\nGold answer: Paris\nPredicted answer: {pred}\n"


def _messages(pred: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": DSQA_PROMPT.format(pred=pred)}]


def _config(server: JudgeServer, tmp_path: Path | None = None, **kw: object) -> JudgeConfig:
    base = {"backoff_s": 0.001, "backoff_max_s": 0.01, "max_retries": 3}
    base.update(kw)
    return JudgeConfig(
        base_url=server.base_url,
        model="loopback-judge",
        api_key=server.api_key,
        cache_dir=tmp_path,
        **base,  # type: ignore[arg-type]
    )


def test_missing_configuration_is_a_clear_error() -> None:
    with pytest.raises(JudgeConfigError) as err:
        judge_config_from_env("alpacaeval", {})
    msg = str(err.value)
    assert "A2RL_JUDGE_BASE_URL and A2RL_JUDGE_MODEL are not set" in msg and "alpacaeval" in msg
    with pytest.raises(JudgeConfigError, match="A2RL_JUDGE_MODEL is not set"):
        judge_config_from_env("x", {"A2RL_JUDGE_BASE_URL": "http://127.0.0.1:1/v1"})
    with pytest.raises(JudgeConfigError, match="http"):
        judge_config_from_env("x", {"A2RL_JUDGE_BASE_URL": "127.0.0.1:1", "A2RL_JUDGE_MODEL": "m"})
    with pytest.raises(JudgeConfigError, match="integer"):
        judge_config_from_env(
            "x", {"A2RL_JUDGE_BASE_URL": "http://h/v1", "A2RL_JUDGE_MODEL": "m", "A2RL_JUDGE_WORKERS": "many"}
        )


def test_configuration_from_env(tmp_path: Path) -> None:
    cfg = judge_config_from_env(
        "alpacaeval",
        {
            "A2RL_JUDGE_BASE_URL": "https://judge.example/v1/",
            "A2RL_JUDGE_MODEL": "gpt-5.2",
            "A2RL_JUDGE_CACHE_DIR": str(tmp_path),
            "A2RL_JUDGE_WORKERS": "3",
        },
    )
    assert cfg.endpoint == "https://judge.example/v1/chat/completions"
    assert cfg.api_key is None and cfg.workers == 3 and cfg.cache_dir == tmp_path
    assert "key" not in cfg.describe()
    assert version_tag("org/Model 7B:v2") == "org-Model-7B-v2"


def test_request_format_and_reply() -> None:
    with JudgeServer() as server:
        client = JudgeClient(_config(server))
        assert client.complete(_messages("It is Paris.")) == "correct"
        assert client.complete(_messages("Lyon")) == "incorrect"
        body = server.bodies[0]
        assert body["model"] == "loopback-judge" and body["temperature"] == 0 and body["max_tokens"] == 100
        assert body["messages"] == _messages("It is Paris.")
        assert client.requests == server.requests == 2


def test_transient_failures_are_retried_with_bounded_backoff() -> None:
    sleeps: list[float] = []
    with JudgeServer(fail_first=2) as server:
        client = JudgeClient(_config(server, backoff_s=0.5, backoff_max_s=0.75), sleep=sleeps.append)
        assert client.complete(_messages("Paris")) == "correct"
        assert server.requests == 3
    assert sleeps == [0.5, 0.75]  # 0.5 * 2**0, then min(0.75, 0.5 * 2**1)


def test_persistent_failure_gives_up_with_a_clear_error() -> None:
    with JudgeServer(fail_first=100) as server:
        client = JudgeClient(_config(server, max_retries=2))
        with pytest.raises(JudgeError) as err:
            client.complete(_messages("Paris"))
        assert server.requests == 3
    msg = str(err.value)
    assert "failed after 3 attempt(s)" in msg and "HTTP 503" in msg and "overloaded" in msg


def test_bad_key_fails_at_once() -> None:
    with JudgeServer() as server:
        cfg = _config(server)
        client = JudgeClient(JudgeConfig(**{**cfg.__dict__, "api_key": "wrong"}))
        with pytest.raises(JudgeError, match=r"rejected the request: HTTP 401: .*invalid api key"):
            client.complete(_messages("Paris"))
        assert server.requests == 1


def test_unreachable_judge_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_s=0.001)
    with pytest.raises(JudgeError, match="failed after 2 attempt"):
        JudgeClient(cfg).complete(_messages("Paris"))


def test_cache_makes_repeated_questions_free(tmp_path: Path) -> None:
    requests = [_messages(p) for p in ("Paris", "Lyon", "Paris, France", "Paris")]
    with JudgeServer() as server:
        judge = Judge(_config(server, tmp_path / "cache", workers=4))
        first = judge.ask_many(requests)
        assert [r.text for r in first] == ["correct", "incorrect", "correct", "correct"]
        assert server.requests == 3  # the repeated request is asked once
        before = server.requests
        # A new Judge (a later evaluation) with the same cache directory asks nothing.
        again = Judge(_config(server, tmp_path / "cache"))
        second = again.ask_many(requests)
        assert [r.text for r in second] == [r.text for r in first]
        assert all(r.cached for r in second) and server.requests == before
        assert again.stats() == {"judge_requests": 0.0, "judge_cache_hits": 3.0}
        # Another judge model is another key: asked again.
        other = Judge(JudgeConfig(**{**_config(server, tmp_path / "cache").__dict__, "model": "other"}))
        other.ask(requests[0])
        assert server.requests == before + 1


def test_cache_key_covers_model_and_messages(tmp_path: Path) -> None:
    a = cache_key({"model": "j", "messages": _messages("Paris")})
    assert a == cache_key({"messages": _messages("Paris"), "model": "j"})
    assert a != cache_key({"model": "j2", "messages": _messages("Paris")})
    assert a != cache_key({"model": "j", "messages": _messages("Paris ")})
    cache = JudgeCache(tmp_path)
    assert cache.get(a) is None
    cache.put(a, "j", "correct")
    assert cache.get(a) == "correct"
    assert (tmp_path / a[:2] / f"{a}.json").is_file()
    assert not list(tmp_path.rglob("*.tmp"))
    assert JudgeCache(None).get(a) is None
    # A cache that cannot be written (the eval box shows it read-only) is read, never fatal.
    (tmp_path / "file").write_text("")
    JudgeCache(tmp_path / "file").put(a, "j", "correct")


def test_judge_settings_never_reach_the_agent() -> None:
    from a2rl.contracts.env import agent_base_env

    env = agent_base_env(
        {"PATH": "/bin", "A2RL_JUDGE_API_KEY": "sk-secret", "A2RL_JUDGE_BASE_URL": "http://j/v1",
         "A2RL_SEARCH_API_KEY": "serp-secret"}
    )  # fmt: skip
    assert env == {"PATH": "/bin"}
