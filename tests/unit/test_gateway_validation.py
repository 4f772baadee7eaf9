"""The gateway's checks before a call goes upstream, pure: request bodies (content codings within a
limit, strict JSON), the fields the meter relies on per protocol, the most a call may use, and the
budget's reservations (`Meter.admit` / `account`)."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest
from a2rl_gateway import protocols as p
from a2rl_gateway import validation as v
from a2rl_gateway.bodies import BodyError, decode, parse_json
from a2rl_gateway.budget import Limits, Reservation, exhausted_reason
from a2rl_gateway.meter import Meter

from a2rl.records.driver import DriverCallRecord, DriverUsage


def endpoint(provider: str, path: str, method: str = "POST") -> p.Endpoint:
    ep = p.route(provider, method, path)
    assert ep is not None
    return ep


MESSAGES = endpoint("anthropic", "/v1/messages")
CHAT = endpoint("openai", "/v1/chat/completions")
RESPONSES = endpoint("openai", "/v1/responses")
GENERATE = endpoint("gemini", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM_GENERATE = endpoint("gemini", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")


# --- bodies ---------------------------------------------------------------------------------------
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}).encode()


def raw_deflate(data: bytes) -> bytes:
    co = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return co.compress(data) + co.flush()


@pytest.mark.parametrize(
    ("encoding", "sent"),
    [
        ("", BODY),
        ("identity", BODY),
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        ("GZIP", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", raw_deflate(BODY)),  # what some clients call deflate
        ("gzip, gzip", gzip.compress(gzip.compress(BODY))),
        ("deflate, gzip", gzip.compress(zlib.compress(BODY))),
    ],
)
def test_decode_undoes_each_coding_in_order(encoding: str, sent: bytes) -> None:
    assert decode(sent, encoding, 1 << 20) == BODY


def test_decode_reads_a_gzip_of_several_members() -> None:
    assert decode(gzip.compress(BODY) + gzip.compress(b"!"), "gzip", 1 << 20) == BODY + b"!"


@pytest.mark.parametrize(
    ("encoding", "sent", "status", "says"),
    [
        ("gzip", gzip.compress(bytes(5 << 20)), 413, "over 4 MiB once decompressed"),
        ("deflate", zlib.compress(bytes(5 << 20)), 413, "over 4 MiB"),
        ("gzip, gzip", gzip.compress(gzip.compress(bytes(5 << 20))), 413, "over 4 MiB"),
        ("gzip", gzip.compress(BODY)[:-9], 400, "truncated"),
        ("gzip", b"\x1f\x8b" + b"\x00" * 30, 400, "corrupt"),
        ("deflate", b"not deflate at all", 400, "corrupt"),
        ("deflate", zlib.compress(BODY) + b"trailing", 400, "after the end"),
        ("gzip", b"".join(gzip.compress(b"x") for _ in range(17)), 400, "more than 16 members"),
        ("br", BODY, 415, "'br' is not supported"),
        ("zstd", BODY, 415, "'zstd' is not supported"),
        ("gzip, gzip, gzip", BODY, 415, "more than 2 content codings"),
    ],
)
def test_decode_refuses_bombs_corrupt_bodies_and_unknown_codings(
    encoding: str, sent: bytes, status: int, says: str
) -> None:
    with pytest.raises(BodyError) as err:
        decode(sent, encoding, 4 << 20)
    assert err.value.status == status and says in str(err.value)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"stream": false, "stream": true}', "names 'stream' twice"),
        (b'{"a": {"b": 1, "b": 2}}', "names 'b' twice"),
        ('\ufeff{"stream": true}'.encode(), "not JSON"),
        ('{"stream": true}'.encode("utf-16"), "not UTF-8"),
        (b'{"max_tokens": NaN}', "NaN"),
        (b'{"max_tokens": Infinity}', "Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"max_tokens": 1' + b"0" * 5000 + b"}", "not JSON"),
        (b"stream=true", "not JSON"),
    ],
)
def test_parse_json_refuses_what_two_parsers_could_read_apart(raw: bytes, says: str) -> None:
    with pytest.raises(BodyError) as err:
        parse_json(raw)
    assert err.value.status == 400 and says in str(err.value)


def test_parse_json_reads_unicode_and_escapes() -> None:
    assert parse_json('{"t": "héllo \\ud83d\\ude00", "n": [1, 2.5, null]}'.encode()) == {
        "t": "héllo 😀",
        "n": [1, 2.5, None],
    }


# --- the fields the meter relies on ---------------------------------------------------------------
# What the stacks send (docs/agents.md): accepted, with the maximum they may generate.
STACK_REQUESTS: list[tuple[p.Endpoint, dict[str, Any], v.CallShape]] = [
    (  # Claude Code
        MESSAGES,
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 32000,
            "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "messages": [{"role": "user", "content": "hi"}],
        },
        v.CallShape(stream=True, max_output_tokens=32000),
    ),
    (  # Codex CLI: no maximum
        RESPONSES,
        {"model": "gpt-5-codex", "stream": True, "store": False, "input": [], "parallel_tool_calls": True},
        v.CallShape(stream=True, max_output_tokens=128_000),
    ),
    (  # OpenCode
        CHAT,
        {
            "model": "qwen",
            "max_tokens": 32000,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [],
        },
        v.CallShape(stream=True, max_output_tokens=32000),
    ),
    (  # OpenHands (litellm): not streaming, max_completion_tokens, n
        CHAT,
        {"model": "gpt-5", "max_completion_tokens": 4000, "max_tokens": None, "n": 2, "messages": []},
        v.CallShape(stream=False, max_output_tokens=8000),
    ),
    (  # Gemini CLI
        STREAM_GENERATE,
        {
            "contents": [],
            "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
        },
        v.CallShape(stream=True, max_output_tokens=65_536),
    ),
    (  # litellm's Gemini: snake_case
        GENERATE,
        {"contents": [], "generation_config": {"max_output_tokens": 2048, "candidate_count": 2}},
        v.CallShape(stream=False, max_output_tokens=4096),
    ),
    (MESSAGES, {"model": "claude-haiku-4-5", "messages": []}, v.CallShape(max_output_tokens=64_000)),
    (
        RESPONSES,
        {"model": "gpt-5", "background": False, "max_output_tokens": 10},
        v.CallShape(max_output_tokens=10),
    ),
    (endpoint("anthropic", "/v1/messages/count_tokens"), {"model": "m", "messages": []}, v.CallShape()),
    (endpoint("gemini", "/v1beta/models/g:countTokens"), {"contents": []}, v.CallShape()),
    (endpoint("openai", "/v1/models", "GET"), None, v.CallShape()),
]


@pytest.mark.parametrize(("ep", "body", "shape"), STACK_REQUESTS)
def test_what_the_stacks_send_is_accepted_with_its_maximum(
    ep: p.Endpoint, body: dict[str, Any], shape: v.CallShape
) -> None:
    assert v.check(ep, body) == shape


@pytest.mark.parametrize(
    ("ep", "body", "says"),
    [
        (CHAT, {"stream": "true"}, "stream must be true or false, not 'true'"),
        (CHAT, {"stream": 0}, "stream must be true or false"),
        (RESPONSES, {"stream": [True]}, "stream must be true or false"),
        (MESSAGES, {"stream": "false", "max_tokens": 5}, "stream must be true or false"),
        (MESSAGES, {"max_tokens": True}, "max_tokens must be a positive integer, not True"),
        (MESSAGES, {"max_tokens": 1e9}, "max_tokens must be a positive integer"),
        (CHAT, {"max_completion_tokens": "4000"}, "max_completion_tokens must be a positive integer"),
        (CHAT, {"n": 0}, "n must be a positive integer"),
        (CHAT, {"n": 2, "best_of": 3}, "best_of (3) greater than n (2)"),
        (CHAT, {"stream": True, "stream_options": ["include_usage"]}, "stream_options must be an object"),
        (
            CHAT,
            {"stream": True, "stream_options": {"include_usage": 1}},
            "include_usage must be true or false",
        ),
        (RESPONSES, {"max_output_tokens": -5}, "max_output_tokens must be a positive integer"),
        (RESPONSES, {"background": "false"}, "background responses are not served"),
        (GENERATE, {"generationConfig": "fast"}, "generationConfig must be an object"),
        (GENERATE, {"generationConfig": {"maxOutputTokens": 8.0}}, "generationConfig.maxOutputTokens"),
        (
            GENERATE,
            {"generationConfig": {"candidateCount": 1, "candidate_count": 4}},
            "candidateCount and generationConfig.candidate_count are the same field",
        ),
        (GENERATE, {"generationConfig": {}, "generation_config": {}}, "are the same field"),
        (GENERATE, ["contents"], "must be a JSON object"),
        (CHAT, None, "must be a JSON object"),
    ],
)
def test_fields_of_the_wrong_type_are_refused(ep: p.Endpoint, body: Any, says: str) -> None:
    with pytest.raises(v.InvalidRequestError) as err:
        v.check(ep, body)
    assert says in str(err.value)


def test_the_most_a_call_may_use() -> None:
    shape = v.check(CHAT, {"max_tokens": 300, "n": 2})
    assert v.max_usage(shape, 1234) == DriverUsage(input_tokens=1234, output_tokens=600)
    assert v.max_usage(v.CallShape(), 1234) == DriverUsage()  # count_tokens, model lists: nothing


# --- reservations ---------------------------------------------------------------------------------
def test_exhausted_reason_counts_what_calls_in_flight_reserved() -> None:
    limits = Limits(tokens=1000, cost_usd=1.0)
    assert exhausted_reason(limits, 400, 0.1, Reservation(599, 0.5)) is None
    assert exhausted_reason(limits, 400, 0.1, Reservation(600, 0.0)) == (
        "the run's driver budget (1000 tokens) is exhausted: 400 tokens used "
        "and 600 reserved by calls in flight"
    )
    assert exhausted_reason(limits, 1000, 0.1, Reservation(600, 0.0)) == (
        "the run's driver budget (1000 tokens) is exhausted: 1000 tokens used"
    )
    assert "$0.9000 reserved by calls in flight" in (
        exhausted_reason(limits, 0, 0.1, Reservation(0, 0.9)) or ""
    )


def call(usage: DriverUsage | None, **kw: Any) -> DriverCallRecord:
    return DriverCallRecord(index=1, status=200, usage=usage, **kw)


def test_admission_reserves_and_the_call_settles_to_what_it_used() -> None:
    exhausted: list[str] = []
    meter = Meter(limits=Limits(tokens=1000), prices={}, on_exhausted=exhausted.append)
    first, second = Reservation(500), Reservation(500)
    assert meter.admit(first) is None and meter.admit(second) is None
    assert meter.reserved == Reservation(1000)
    # spent 0 + reserved 1000 reaches the limit: refused, and that ends the budget
    refusal = meter.admit(Reservation(10))
    assert refusal == (
        "the run's driver budget (1000 tokens) is exhausted: 0 tokens used and 1000 reserved by calls "
        "in flight; a2rl's driver gateway refuses further calls for this run"
    )
    assert meter.exhausted.is_set()
    refused = DriverCallRecord(index=3, status=403, refused="budget_exhausted")
    newly = meter.account(refused)
    assert newly is not None and newly in refusal and meter.snapshot().budget.exhausted
    # the calls in flight end: their reservations become what they used
    meter.account(call(DriverUsage(input_tokens=20, output_tokens=100)), first)
    meter.account(call(DriverUsage(input_tokens=20, output_tokens=480)), second)
    assert meter.reserved == Reservation() and meter.snapshot().total_tokens == 620
    assert meter.admit(Reservation(1)) is not None  # exhausted stays exhausted
    assert meter.admit(Reservation()) is not None  # even for a call that costs nothing


def test_a_call_that_costs_nothing_is_admitted_while_reservations_fill_the_budget() -> None:
    meter = Meter(limits=Limits(tokens=100), prices={})
    assert meter.admit(Reservation(100)) is None
    assert meter.admit(Reservation()) is None  # count_tokens, a model list
    assert not meter.exhausted.is_set()


def test_sequential_calls_behave_as_before_reservations() -> None:
    """One call at a time: admitted while the spent tokens are under the limit, whatever its maximum;
    the call that crosses the limit is answered, the next refused."""
    meter = Meter(limits=Limits(tokens=1000), prices={})
    for used in (400, 400, 400):
        r = Reservation(64_000)
        assert meter.admit(r) is None
        meter.account(call(DriverUsage(input_tokens=used)), r)
    assert meter.exhausted.is_set() and meter.snapshot().total_tokens == 1200
    assert meter.admit(Reservation(1)) is not None
