"""The search tool of the DeepSearchQA rollout: pluggable, configured by the evaluation's environment.

- **HTTP** (`A2RL_SEARCH_URL`, optional `A2RL_SEARCH_API_KEY`): `GET <url>?q=<query>&num=3[&api_key=…]`
  (parameters already in the URL are kept, e.g. `https://serpapi.com/search?engine=google`). The
  JSON answer may be SerpAPI's (`organic_results[].snippet`) or a generic/SearXNG one
  (`results[].snippet|content|text`). The observation is the top-3 snippets joined by `" | "`
  (as the reference's SerpAPI tool), `"No results found."` when there are none, and
  `"Search error: …"` when the request fails (10 s timeout) — failures are counted.
- **Local corpus** (`A2RL_SEARCH_CORPUS`): a JSONL file of documents `{"title", "text"}` ranked
  by BM25 (k1 = 1.2, b = 0.75; ties by file order); the observation is the top-3 documents as
  `"<title>: <text>"` (each cut to 300 characters) joined by `" | "`. Deterministic — the test
  suite's backend, and an offline option (e.g. a Wikipedia extract).

With neither set, evaluation stops with a clear error (the reference silently fell back to the
DuckDuckGo Instant Answer API, which answers almost nothing).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from a2rl.constants import ENV_SEARCH_API_KEY, ENV_SEARCH_CORPUS, ENV_SEARCH_URL
from a2rl.errors import A2rlError

TOP_K = 3
TIMEOUT_S = 10.0
SNIPPET_CHARS = 300
SEPARATOR = " | "
NO_RESULTS = "No results found."


class SearchConfigError(A2rlError):
    """No (usable) search backend is configured."""


class SearchBackend(ABC):
    #: Identifies the backend in the evaluator version (e.g. `http-serpapi.com`, `corpus-<sha>`).
    tag: str

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.queries = 0
        self.errors = 0

    def search(self, query: str) -> str:
        with self._lock:
            self.queries += 1
        try:
            return self._search(query)
        except Exception as exc:
            with self._lock:
                self.errors += 1
            return f"Search error: {type(exc).__name__}: {str(exc)[:200]}"

    @abstractmethod
    def _search(self, query: str) -> str: ...


def _join(snippets: list[str]) -> str:
    text = SEPARATOR.join(s for s in snippets if s)
    return text or NO_RESULTS


class HttpSearch(SearchBackend):
    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__()
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise SearchConfigError(f"{ENV_SEARCH_URL} must be an http(s) URL, got {url!r}")
        self.url = url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.tag = f"http-{parsed.hostname}"
        #: JSON answer -> observation text (the `reference` protocol swaps in the reference's rule).
        self.observation: Callable[[Any], str] = observation_text

    def request_url(self, query: str) -> str:
        parts = urllib.parse.urlsplit(self.url)
        params = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        params += [("q", query), ("num", str(TOP_K))]
        if self.api_key:
            params.append(("api_key", self.api_key))
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(params)))

    def _search(self, query: str) -> str:
        req = urllib.request.Request(self.request_url(query), headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            data = json.loads(resp.read())
        return self.observation(data)


def observation_text(data: Any) -> str:
    """Our observation: the top-3 non-empty snippets (whitespace-normalised) joined by `" | "`."""
    return _join(snippets_from_json(data)[:TOP_K])


def snippets_from_json(data: Any) -> list[str]:
    """Result snippets of a SerpAPI-style (`organic_results`) or generic (`results`) JSON answer."""
    if not isinstance(data, dict):
        return []
    results = data.get("organic_results")
    if not isinstance(results, list):
        results = data.get("results")
    if not isinstance(results, list):
        return []
    out: list[str] = []
    for r in results:
        if isinstance(r, dict):
            for key in ("snippet", "content", "text"):
                value = r.get(key)
                if isinstance(value, str) and value.strip():
                    out.append(" ".join(value.split()))
                    break
    return out


_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


class CorpusSearch(SearchBackend):
    """BM25 over a JSONL corpus of `{"title", "text"}` documents."""

    K1 = 1.2
    B = 0.75

    def __init__(self, path: Path) -> None:
        super().__init__()
        if not path.is_file():
            raise SearchConfigError(f"{ENV_SEARCH_CORPUS}: corpus file not found: {path}")
        raw = path.read_bytes()
        self.tag = "corpus-" + hashlib.sha256(raw).hexdigest()[:12]
        self.docs: list[tuple[str, str]] = []
        for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise SearchConfigError(f"{path}:{n}: not JSON: {exc}") from exc
            text = row.get("text") if isinstance(row, dict) else None
            if not isinstance(text, str):
                raise SearchConfigError(f'{path}:{n}: each document needs a string "text"')
            title = row.get("title") or ""
            self.docs.append((str(title), " ".join(text.split())))
        if not self.docs:
            raise SearchConfigError(f"{path}: the corpus is empty")
        self._tf = [Counter(tokens(f"{t} {x}")) for t, x in self.docs]
        self._len = [sum(c.values()) for c in self._tf]
        self._avg = sum(self._len) / len(self._len) or 1.0
        df: Counter[str] = Counter()
        for c in self._tf:
            df.update(c.keys())
        n_docs = len(self.docs)
        self._idf = {w: math.log(1.0 + (n_docs - k + 0.5) / (k + 0.5)) for w, k in df.items()}

    def scores(self, query: str) -> list[float]:
        q = tokens(query)
        out: list[float] = []
        for tf, length in zip(self._tf, self._len, strict=True):
            s = 0.0
            for w in q:
                f = tf.get(w, 0)
                if f:
                    s += (
                        self._idf[w]
                        * f
                        * (self.K1 + 1)
                        / (f + self.K1 * (1 - self.B + self.B * length / self._avg))
                    )
            out.append(s)
        return out

    def _search(self, query: str) -> str:
        scored = self.scores(query)
        ranked = sorted((i for i, s in enumerate(scored) if s > 0), key=lambda i: (-scored[i], i))
        snippets = []
        for i in ranked[:TOP_K]:
            title, text = self.docs[i]
            snippets.append(((f"{title}: " if title else "") + text)[:SNIPPET_CHARS])
        return _join(snippets)


def search_from_env(environ: Mapping[str, str] | None = None) -> SearchBackend:
    env = os.environ if environ is None else environ
    url = env.get(ENV_SEARCH_URL, "").strip()
    corpus = env.get(ENV_SEARCH_CORPUS, "").strip()
    if url and corpus:
        raise SearchConfigError(f"set only one of {ENV_SEARCH_URL} and {ENV_SEARCH_CORPUS}")
    if url:
        return HttpSearch(url, env.get(ENV_SEARCH_API_KEY, "").strip() or None)
    if corpus:
        return CorpusSearch(Path(corpus).expanduser())
    raise SearchConfigError(
        f"task deepsearchqa needs a search tool: set {ENV_SEARCH_URL} (an HTTP search API answering "
        f"SerpAPI-style JSON, with {ENV_SEARCH_API_KEY} if it needs a key) or {ENV_SEARCH_CORPUS} (a local "
        'JSONL corpus of {"title", "text"} documents) in the evaluation\'s environment'
    )


def search_tag_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The version tag of the configured backend without building it (None when unset/unusable)."""
    env = os.environ if environ is None else environ
    url = env.get(ENV_SEARCH_URL, "").strip()
    corpus = env.get(ENV_SEARCH_CORPUS, "").strip()
    if url and not corpus:
        host = urllib.parse.urlsplit(url).hostname
        return f"http-{host}" if host else None
    if corpus and not url:
        try:
            return "corpus-" + hashlib.sha256(Path(corpus).expanduser().read_bytes()).hexdigest()[:12]
        except OSError:
            return None
    return None
