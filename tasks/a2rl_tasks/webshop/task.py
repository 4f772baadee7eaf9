"""The `webshop` task: shop for a customer in a text web shop; success = purchase reward ≥ 0.5."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest
from a2rl.protocols import PROTOCOL_REFERENCE
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.jsonl import read_jsonl
from a2rl_tasks.gsm8k.chat import render_chat
from a2rl_tasks.scoring import index_predictions, read_rows
from a2rl_tasks.webshop import data, real, reference
from a2rl_tasks.webshop.prompting import (
    MAX_NEW_TOKENS,
    STOP,
    SYSTEM,
    parse_reply,
    plain_prompt,
    user_message,
)
from a2rl_tasks.webshop.rollout import Episode, Slot, TextEnv, run_episodes, step_episode
from a2rl_tasks.webshop.sim import Goal, SimWebShopEnv, load_catalogue, load_goals

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

SUCCESS_THRESHOLD = 0.5


def episode_record(ep: Episode, mode: str | None, target: str | None) -> dict[str, Any]:
    reward = ep.reward if ep.done else 0.0
    record: dict[str, Any] = {
        "id": ep.goal_id,
        "instruction": ep.instruction,
        "target_asin": target,
        "steps": len(ep.actions),
        "actions": ep.actions,
        "replies": ep.replies,
        "invalid_actions": ep.invalid_actions,
        "ended": "error" if ep.error else ("purchase" if ep.done else "step_limit"),
        "purchased_asin": ep.info.get("asin"),
        "options": ep.info.get("options"),
        "reward": reward,
        "reward_details": {k: v for k, v in ep.info.items() if k not in ("asin", "options", "reward")},
        "success": reward >= SUCCESS_THRESHOLD,
        "strict_success": reward >= 1.0,
        "error": ep.error,
    }
    if mode is not None:
        record["mode"] = mode
    return record


def summarise(records: list[dict[str, Any]], evaluator_version: str, max_steps: int) -> EvalResult:
    n = len(records)

    def pct(key: str) -> float:
        return 100.0 * sum(1 for r in records if r[key]) / n if n else 0.0

    steps = sum(r["steps"] for r in records)
    metrics = {
        "success_rate": pct("success"),
        "strict_success_rate": pct("strict_success"),
        "mean_reward": sum(r["reward"] for r in records) / n if n else 0.0,
        "purchase_rate": 100.0 * sum(1 for r in records if r["ended"] == "purchase") / n if n else 0.0,
        "avg_steps": steps / n if n else 0.0,
        "invalid_action_rate": 100.0 * sum(r["invalid_actions"] for r in records) / steps if steps else 0.0,
        "errors": float(sum(1 for r in records if r["error"])),
        "max_steps": float(max_steps),
    }
    return EvalResult(
        score=metrics["success_rate"],
        n=n,
        correct=sum(1 for r in records if r["success"]),
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )


def _sim_envs(heldout_dir: Path, limit: int | None) -> tuple[list[TextEnv], list[Goal]]:
    products = load_catalogue(heldout_dir / data.CATALOGUE_FILE)
    goals = load_goals(heldout_dir / data.GOALS_FILE)[:limit]
    if not goals:
        raise A2rlError(f"held-out data is empty: {heldout_dir / data.GOALS_FILE}")
    # One environment per episode: all episodes step together (they are cheap).
    return [SimWebShopEnv(products, goals) for _ in goals], goals


def _prompt(backend: InferenceBackend, system: str, user: str, plain: str) -> tuple[str, str]:
    """(prompt, mode): the chat-rendered system + user messages, else the plain-text `plain`."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    rendered = render_chat(backend, messages)
    return (str(rendered), "chat") if rendered is not None else (plain, "plain")


class WebShopTask(Task):
    name = "webshop"
    level = "L3"
    metric = "success rate (%)"
    data_version = "3"  # 3: the built-in shop's held-out targets are secret products
    #: `reference` gives the agent no expert trajectories and the reference's prompt builder.
    protocol_data = True
    secret_heldout = True  # the built-in shop's held-out goals
    default_source = data.BUILTIN

    @property
    def evaluator_version(self) -> str:  # type: ignore[override]
        return self.versioned("webshop-1")

    @property
    def is_reference(self) -> bool:
        return self.protocol == PROTOCOL_REFERENCE

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        train_dir, heldout_dir = Path(staged.train_dir), Path(staged.heldout_dir)
        if real.is_real_source(source):
            assert source is not None
            real.stage_real(train_dir, heldout_dir, source)
            return
        shop = data.load_shop(source, seed, heldout_seed)
        data.write_shop(train_dir, heldout_dir, shop, reference=self.is_reference)

    def _user_prompt(self, ep: Episode, max_steps: int) -> tuple[str, str]:
        """(system, user) text of one step under this task's protocol."""
        if self.is_reference:
            pages = [obs for obs, _ in ep.history]
            actions = [act for _, act in ep.history]
            history = reference.history_of(actions, pages, ep.observation)
            avail = reference.format_available_actions(ep.available)
            return reference.SYSTEM, reference.prompt(ep.instruction, history, ep.observation, avail)
        return SYSTEM, user_message(ep.instruction, ep.observation, ep.available, ep.history, max_steps)

    def default_generation_batch(self) -> int:
        return 16

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:

        heldout_dir = Path(heldout_dir)
        config = data.read_env_config(heldout_dir)
        max_steps = int(config.get("max_steps", data.MAX_STEPS))
        targets: dict[str, str] = {}
        if config["kind"] == "sim":
            envs, goals = _sim_envs(heldout_dir, limit)
            sessions: list[tuple[str, Any]] = [(g.id, i) for i, g in enumerate(goals)]
            targets = {g.id: g.asin for g in goals}
        else:
            rows = read_jsonl(heldout_dir / data.GOALS_FILE, limit)
            if not rows:
                raise A2rlError(f"held-out data is empty: {heldout_dir / data.GOALS_FILE}")
            pool = max(1, min(int(config.get("parallel_envs", 1)), len(rows)))
            envs = [real.make_real_env(int(config["num_products"])) for _ in range(pool)]
            sessions = [(str(r["id"]), int(r["session"])) for r in rows]

        request = GenerationRequest(max_new_tokens=MAX_NEW_TOKENS, stop=(STOP,))
        mode: list[str] = []

        def policy(slots: list[Slot]) -> list[str]:
            prompts = []
            for s in slots:
                assert s.episode is not None
                system, user = self._user_prompt(s.episode, max_steps)
                plain = reference.plain_prompt(user) if self.is_reference else plain_prompt(user)
                prompt, how = _prompt(backend, system, user, plain)
                prompts.append(prompt)
                mode[:] = [how]
            return backend.generate(prompts, request)

        parse = reference.parse_action if self.is_reference else parse_reply
        episodes = run_episodes(envs, sessions, policy, parse, max_steps)
        m = mode[0] if mode else None
        records = [episode_record(ep, m, targets.get(ep.goal_id)) for ep in episodes]
        return summarise(records, self.evaluator_version, max_steps)

    def score_prediction_files(self, predictions_path: Path, references_path: Path) -> EvalResult:
        """Offline scoring by replay: each prediction is an episode's replies, one per line (the
        `replies` of the evaluator's details joined by newlines), replayed in the simulated shop
        against the held-out goal. References: the held-out `goals.jsonl` (its `catalogue.json`
        beside it) or the held-out directory."""

        ref_dir = references_path if references_path.is_dir() else references_path.parent
        goals_path = references_path / data.GOALS_FILE if references_path.is_dir() else references_path
        catalogue = ref_dir / data.CATALOGUE_FILE
        if (ref_dir / data.ENV_FILE).is_file() and data.read_env_config(ref_dir)["kind"] != "sim":
            raise A2rlError(
                "offline replay needs the simulated shop; this held-out data is for the real WebShop"
            )
        if not catalogue.is_file():
            raise A2rlError(f"webshop scoring replays episodes and needs {catalogue} beside the references")
        rows = read_rows(goals_path, "references")
        if not rows:
            raise A2rlError(f"references file is empty: {goals_path}")
        try:
            goals = [Goal.from_dict(r) for r in rows]
        except (KeyError, ValueError, TypeError) as exc:
            raise A2rlError(f"references must be webshop goals (id, asin, instruction, …): {exc}") from exc
        ids = [g.id for g in goals]
        if len(set(ids)) != len(ids):
            raise A2rlError("reference ids are not unique")
        predictions = index_predictions(read_rows(predictions_path, "predictions"), set(ids))
        env = SimWebShopEnv(load_catalogue(catalogue), goals)
        records = []
        for i, goal in enumerate(goals):
            ep = Episode(index=i, goal_id=goal.id, session=i)
            ep.observation, _ = env.reset(session=i)
            ep.instruction, ep.available = env.get_instruction_text(), env.get_available_actions()
            parse = reference.parse_action if self.is_reference else parse_reply
            for reply in predictions.get(goal.id, "").split("\n")[: data.MAX_STEPS]:
                step_episode(ep, env, reply, parse)
                if ep.done or ep.error:
                    break
            records.append(episode_record(ep, None, goal.asin))
        result = summarise(records, self.evaluator_version, data.MAX_STEPS)
        result.metrics["missing"] = float(sum(1 for i in ids if i not in predictions))
        return result
