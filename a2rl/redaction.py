"""`redact_secrets`: text with credentials replaced by `[redacted]`. Pure.

What an agent's model saw and said is published (the run's transcript, docs/report.md): a key the
agent printed, read from a file or pasted into a tool call must not be. Two kinds of secret go:

- every occurrence of a secret the caller knows (the upstream key, the run's gateway token), at
  least `MIN_SECRET_LEN` characters long;
- anything shaped like a common credential (`SECRET_PATTERNS`): OpenAI/Anthropic `sk-…` keys,
  Together `tgp_v1_…` keys, AWS access key ids (`AKIA…`/`ASIA…`), Google `AIza…` keys, GitHub
  and Hugging Face tokens, a2rl's own run tokens (`a2rl-run-…`), private key blocks, and the
  credential of an `Authorization: Bearer …` value (the scheme word stays).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "[redacted]"
#: Shorter known secrets are not scrubbed (they would blank unrelated words).
MIN_SECRET_LEN = 8

#: (literal prefixes, pattern): a pattern runs only on a text holding one of its prefixes (a cheap
#: `in` test), so scrubbing a megabyte of ordinary text costs a few milliseconds; the patterns
#: start with their literal (`sk-(?<=\bsk-)`, not `\bsk-`), which `re` finds ~30 times faster.
SECRET_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (("sk-",), re.compile(r"sk-(?<=\bsk-)[A-Za-z0-9][A-Za-z0-9_\-]{15,}")),
    (("tgp_v1_",), re.compile(r"tgp_v1_(?<=\btgp_v1_)[A-Za-z0-9_\-]{16,}")),
    (("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (("AIza",), re.compile(r"AIza(?<=\bAIza)[0-9A-Za-z_\-]{35}")),
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"),
    ),
    (("hf_",), re.compile(r"hf_(?<=\bhf_)[A-Za-z0-9]{30,}")),
    (("a2rl-run-",), re.compile(r"a2rl-run-(?<=\ba2rl-run-)[A-Za-z0-9_\-]{16,}")),
    (
        ("PRIVATE KEY-----",),
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL
        ),
    ),
    #: `Bearer <credential>` (any case; a credential has a digit, so prose "bearer documents"
    #: stays): the credential goes, the scheme word stays (the replacement keeps groups 1 and 2).
    (
        ("earer", "EARER"),
        re.compile(r"\b(bearer)(\s+)(?=[A-Za-z._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE),
    ),
)


def _replace(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{REDACTED}" if match.re.groups == 2 else REDACTED


def redact_known(text: str, secrets: Sequence[str]) -> str:
    """`text` with every occurrence of the known `secrets` (those long enough) redacted."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_LEN and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_secrets(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every known secret in `secrets` and every credential-shaped string redacted."""
    text = redact_known(text, secrets)
    for prefixes, pattern in SECRET_PATTERNS:
        if any(p in text for p in prefixes):
            text = pattern.sub(_replace, text)
    return text
