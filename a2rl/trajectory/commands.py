"""What a shell command the agent ran was for: a training launch, a submission, a file edit, or
another shell command (`command_kind`).

Only the shell's own words count: heredoc bodies (a training script written with `cat <<EOF`)
are skipped, and a `bash -lc '…'` wrapper (Codex) is opened. The rules, checked on each simple
command of a list or pipeline, first match wins over the whole command:

- **submission**: an HTTP client (`curl`, `wget`, `http`, …) or a Python one-liner whose words
  name the grading API's `/submit`;
- **training**: `torchrun`, `deepspeed`, `accelerate launch`, `trl …`, `llamafactory-cli train`,
  `tune run`, or `python` running a script or module whose name says training (`train`, `sft`,
  `dpo`, `grpo`, `ppo`, `finetune`), also under `nohup`, `setsid`, `timeout N`, `uv run`, `env`,
  …, and inside a `sh -c '…'` (a detached training: `(setsid sh -c 'python train.py' &)`);
- **edit**: a file written by the shell (`cat > f`, `tee f`, `sed -i`, `patch`, `apply_patch`);
- **shell** otherwise.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex

from a2rl.trajectory.events import EDIT, SHELL, SUBMISSION, TRAINING

HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh", "httpie"})
LAUNCHERS = frozenset({"torchrun", "deepspeed", "trl", "llamafactory-cli", "axolotl"})
TRAINING_MODULES = frozenset({"torch.distributed.run", "accelerate.commands.launch", "deepspeed"})
#: Words that only change how the next word runs.
WRAPPERS = frozenset({"nohup", "time", "exec", "sudo", "env", "command", "stdbuf", "nice", "setsid"})
TRAINING_NAME = re.compile(r"train|sft|dpo|grpo|ppo|orpo|kto|finetune|fine_tune|fine-tune", re.IGNORECASE)
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
SHELLS = frozenset({"bash", "sh", "zsh", "dash"})

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_OPERATOR_CHARS = "();<>|&\n"
SEPARATORS = frozenset({"&&", "||", ";", ";;", "|", "|&", "&", "\n", "(", ")"})
_ROUGH_TOKEN = re.compile(r"&&|\|\||[;|&()\n]|[<>]+&?|[^\s;|&()<>]+")
_WRAPPED = re.compile(r"^\s*(?:/\S*/)?(?:bash|sh|zsh)\s+-l?c\s+(['\"])(.*)$", re.DOTALL)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def unwrap(command: str) -> str:
    """The script of a `bash -lc '<script>'` command line; any other command unchanged."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote (a cut command): strip the wrapper by pattern
        match = _WRAPPED.match(command)
        return match.group(2) if match else command
    if len(words) == 3 and os.path.basename(words[0]) in SHELLS and words[1] in ("-c", "-lc"):
        return words[2]
    return command


def strip_heredocs(script: str) -> str:
    """`script` without the bodies of its heredocs (an unterminated one runs to the end)."""
    kept: list[str] = []
    ends: list[str] = []
    for line in script.splitlines():
        if ends:
            if line.strip() == ends[0]:
                ends.pop(0)
            continue
        kept.append(line)
        ends = [m.group(2) for m in _HEREDOC.finditer(line)]
    return "\n".join(kept)


def tokens(script: str) -> list[str]:
    """Shell words and operators (`&&`, `|`, `;`, `>`, newline, …) of `script`, quotes respected."""
    lex = shlex.shlex(script, posix=True, punctuation_chars=_OPERATOR_CHARS)
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError:  # an unbalanced quote (a cut command): plain words and operators
        return [t for t in _ROUGH_TOKEN.findall(script) if t.strip(" \t\r")]


def simple_commands(script: str) -> list[list[str]]:
    """The words of each simple command of `script` (heredoc bodies skipped; lists, pipelines,
    subshells and `&` split apart); redirections stay among the words."""
    commands: list[list[str]] = [[]]
    for token in tokens(strip_heredocs(script)):
        if token in SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [words for words in commands if words]


def _program(words: list[str]) -> list[str]:
    """`words` from the program on: assignments, wrappers and their options skipped."""
    rest = list(words)
    while rest:
        name = os.path.basename(rest[0])
        if _ASSIGNMENT.match(rest[0]) or name in WRAPPERS or rest[0].startswith("-"):
            rest.pop(0)
        elif name == "timeout" and len(rest) > 1:
            rest = rest[2:] if not rest[1].startswith("-") else rest[1:]
        elif name == "uv" and rest[1:2] == ["run"]:
            rest = rest[2:]
        else:
            break
    return rest


def _is_training(words: list[str]) -> bool:
    if not words:
        return False
    name = os.path.basename(words[0])
    if name in LAUNCHERS:
        return True
    if name == "accelerate":
        return "launch" in words[1:2]
    if name == "tune":
        return "run" in words[1:2]
    if not (PYTHON.match(name) or name in SHELLS) or "-c" in words:
        return False
    args = [w for w in words[1:] if not w.startswith("-") or w == "-m"]
    if args[:1] == ["-m"]:
        module = args[1] if len(args) > 1 else ""
        return module in TRAINING_MODULES or module in LAUNCHERS or bool(TRAINING_NAME.search(module))
    return bool(args) and bool(TRAINING_NAME.search(os.path.basename(args[0])))


def _is_submission(words: list[str]) -> bool:
    if not words or not any("/submit" in w for w in words):
        return False
    name = os.path.basename(words[0])
    return name in HTTP_CLIENTS or (bool(PYTHON.match(name)) and "-c" in words)


def _is_edit(words: list[str]) -> bool:
    if not words:
        return False
    name = os.path.basename(words[0])
    if name in ("tee", "patch", "apply_patch"):
        return True
    if name == "sed" and any(w.startswith("-i") for w in words[1:]):
        return True
    return name in ("cat", "printf", "echo") and any(w in (">", ">>", ">|") for w in words)


def _inner_script(words: list[str]) -> str | None:
    """The script of a shell run as `sh -c SCRIPT` (or `-lc`), else None."""
    if not words or os.path.basename(words[0]) not in SHELLS:
        return None
    for flag, script in itertools.pairwise(words[1:]):
        if flag in ("-c", "-lc"):
            return script
    return None


def command_kind(command: str) -> str:
    """`training`, `submission`, `edit` or `shell` for one shell command line (module docstring)."""
    kinds = set()
    for words in simple_commands(unwrap(command)):
        program = _program(words)
        inner = _inner_script(program)
        if inner is not None:
            kinds.add(command_kind(inner))
        elif _is_submission(program):
            kinds.add(SUBMISSION)
        elif _is_training(program):
            kinds.add(TRAINING)
        elif _is_edit(program):
            kinds.add(EDIT)
    return next((kind for kind in (SUBMISSION, TRAINING, EDIT) if kind in kinds), SHELL)
