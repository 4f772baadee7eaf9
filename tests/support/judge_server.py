"""A small deterministic OpenAI-compatible judge for the tests: a real HTTP server on loopback.

`POST /v1/chat/completions` answers our two judge prompts by fixed rules:

- **alpacaeval** (pairwise): the longer of the two responses wins (`m` on a tie) — a judge with a
  pure length bias, which is what the length control must see through; our prompt gets the
  label, the reference's (AlpacaEval's ranking prompt) the `ordered_models` JSON;
- **deepsearchqa** (correctness): `correct` iff the case-folded gold answer occurs in the
  prediction (Single Answer) or every comma-separated gold item does (Set Answer).

It checks the bearer key, can fail the first N requests with 503 (to exercise retries), and
counts every request it receives.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SECTION = re.compile(r"# Response (m|M)\n<<<\n(.*?)\n>>>", re.DOTALL)
_RANKED = re.compile(r'"model": "(m|M)",\n        "output": """(.*?)"""\n', re.DOTALL)
#: Our DeepSearchQA judge prompt's fields, and the reference's (indented, "Question answer type").
_FIELD = re.compile(
    r"^\s*(Answer type|Question answer type|Gold answer|Predicted answer): (.*)$", re.MULTILINE
)


def alpaca_verdict(prompt: str) -> str:
    sections = dict(_SECTION.findall(prompt))
    m, big_m = sections.get("m", ""), sections.get("M", "")
    return "M" if len(big_m) > len(m) else "m"


def alpaca_ranking(prompt: str) -> str:
    outputs = dict(_RANKED.findall(prompt))
    best = "M" if len(outputs.get("M", "")) > len(outputs.get("m", "")) else "m"
    worst = "m" if best == "M" else "M"
    return json.dumps({"ordered_models": [{"model": best, "rank": 1}, {"model": worst, "rank": 2}]})


def dsqa_verdict(prompt: str) -> str:
    fields = dict(_FIELD.findall(prompt))
    gold = fields.get("Gold answer", "").casefold()
    pred = fields.get("Predicted answer", "").casefold()
    if (fields.get("Answer type") or fields.get("Question answer type")) == "Set Answer":
        items = [x.strip() for x in gold.split(",") if x.strip()]
        ok = bool(items) and all(x in pred for x in items)
    else:
        ok = bool(gold.strip()) and gold.strip() in pred
    return "correct" if ok else "incorrect"


class JudgeServer:
    def __init__(self, api_key: str = "test-judge-key", fail_first: int = 0, status: int = 503) -> None:
        self.api_key = api_key
        self.fail_first = fail_first
        self.fail_status = status
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def env(self, model: str = "loopback-judge") -> dict[str, str]:
        return {
            "A2RL_JUDGE_BASE_URL": self.base_url,
            "A2RL_JUDGE_MODEL": model,
            "A2RL_JUDGE_API_KEY": self.api_key,
        }

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _count(self) -> int:
        with self._lock:
            self.requests += 1
            return self.requests

    def _answer(self, number: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.bodies.append(body)
        if number <= self.fail_first:
            return self.fail_status, {"error": {"message": "judge overloaded, try again"}}
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        if "# Response m" in prompt:
            content = alpaca_verdict(prompt)
        elif "make_partial_leaderboard" in prompt:
            content = alpaca_ranking(prompt)
        elif "Gold answer:" in prompt:
            content = dsqa_verdict(prompt)
        else:
            return 400, {"error": {"message": "unknown prompt"}}
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:
                number = server._count()
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self._send(401, {"error": {"message": "invalid api key"}})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                self._send(*server._answer(number, body))

        return Handler
