"""ALFWorld games generated from PDDL problems, for when the official games are not available.

A game is what the official ALFWorld release ships per trial: `game.tw-pddl` (JSON with the PDDL
domain and the text grammar of the installed `alfworld` package, plus a PDDL problem) and a
`traj_data.json` naming the task. Problems use ALFRED object naming
(`Mug_bar__plus_01_dot_77_bar__plus_01_dot_01_bar__minus_00_dot_68` is shown as "mug 1"), so
the stock `AlfredTWEnv`, the demangler and the experts all play them.

Everything is a pure function of a string key: `generate_game(key, task_type, scene)` draws the
task and the object placement from `random.Random(key)`, and a scene (a room with its
receptacles) is a function of its scene number. Train and held-out games use disjoint keys
(`"<seed>:train:<type>:<i>"` vs `"<seed>:heldout:<type>:<i>"`) *and* disjoint scenes: held-out games are
played in "unseen" rooms whose receptacle layout occurs in no train scene, like ALFWorld's
`valid_unseen` split. Staged held-out games draw their unseen rooms from the held-out seed too
(`scene_seed`, a secret: `a2rl_tasks.staging`), so public code cannot compute them: without it,
an agent could generate unlimited training games in exactly the held-out rooms.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from a2rl_tasks.alfworld import catalog

GENERATOR_VERSION = "a2rl-alfworld-gen-1"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"

#: First scene number per room (ALFRED numbers kitchens 1-30, living rooms 201-230, …).
SCENE_BASE: dict[str, int] = {"Kitchen": 0, "LivingRoom": 200, "Bedroom": 300, "Bathroom": 400}
#: Scene numbers 1..TRAIN_SCENES are seen in training; the next UNSEEN_SCENES are held out.
TRAIN_SCENES = 24
UNSEEN_SCENES = 6
SPLITS = ("train", "heldout", "examples")


# --- ALFRED naming --------------------------------------------------------------------------


def _coord(value: float) -> str:
    sign = "_plus_" if value >= 0 else "_minus_"
    return sign + f"{abs(value):05.2f}".replace(".", "_dot_")


def _int_part(value: int) -> str:
    return str(value) if value >= 0 else f"_minus_{-value}"


def alfred_id(type_name: str, xyz: tuple[float, float, float]) -> str:
    """`Type|+x|+y|+z` mangled the ALFWorld way; basins get their `|SinkBasin` suffix."""
    base = catalog.BASINS.get(type_name, type_name)
    ident = base + "".join(f"_bar_{_coord(v)}" for v in xyz)
    if type_name in catalog.BASINS:
        ident += f"_bar_{type_name}"
    return ident


def location_id(parts: tuple[int, int, int, int]) -> str:
    return "loc" + "".join(f"_bar_{_int_part(v)}" for v in parts)


class _Ids:
    """Unique ALFRED ids and locations drawn from an RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def object_id(self, type_name: str) -> str:
        while True:
            xyz = (
                round(self.rng.uniform(-3.0, 3.0), 2),
                round(self.rng.uniform(0.0, 2.3), 2),
                round(self.rng.uniform(-3.0, 3.0), 2),
            )
            ident = alfred_id(type_name, xyz)
            if ident.lower() not in self.used:
                self.used.add(ident.lower())
                return ident

    def location(self) -> str:
        while True:
            parts = (
                self.rng.randint(-6, 12),
                self.rng.randint(-6, 12),
                self.rng.randint(0, 3),
                self.rng.choice((-30, -15, 0, 15, 30, 45, 60)),
            )
            ident = location_id(parts)
            if ident not in self.used:
                self.used.add(ident)
                return ident


# --- scenes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Receptacle:
    type: str
    id: str
    location: str


@dataclass(frozen=True)
class Scene:
    number: int
    room: str
    receptacles: tuple[Receptacle, ...]
    agent_location: str

    @property
    def signature(self) -> tuple[tuple[str, int], ...]:
        """The receptacle layout as the agent sees it (types and counts)."""
        counts: dict[str, int] = {}
        for r in self.receptacles:
            counts[r.type] = counts.get(r.type, 0) + 1
        return tuple(sorted(counts.items()))

    def types(self) -> set[str]:
        return {r.type for r in self.receptacles}


def _draw_scene(room: str, number: int, attempt: int, scene_seed: int | None = None) -> Scene:
    salt = "" if scene_seed is None else f"unseen-{scene_seed}:"
    rng = random.Random(f"{GENERATOR_VERSION}:scene:{salt}{number}:{attempt}")
    ids = _Ids(rng)
    receptacles: list[Receptacle] = []
    for rtype, (lo, hi) in catalog.ROOM_RECEPTACLES[room].items():
        for _ in range(rng.randint(lo, hi)):
            receptacles.append(Receptacle(rtype, ids.object_id(rtype), ids.location()))
    return Scene(number=number, room=room, receptacles=tuple(receptacles), agent_location=ids.location())


@cache
def train_scenes(room: str) -> tuple[Scene, ...]:
    base = SCENE_BASE[room]
    return tuple(_draw_scene(room, base + k, 0) for k in range(1, TRAIN_SCENES + 1))


@cache
def unseen_scenes(room: str, scene_seed: int | None = None) -> tuple[Scene, ...]:
    """Held-out rooms: redrawn until their layout differs from every train scene's (and from
    each other's). With `scene_seed` (the held-out seed) they are drawn from it."""
    seen = {s.signature for s in train_scenes(room)}
    out: list[Scene] = []
    base = SCENE_BASE[room] + TRAIN_SCENES
    for k in range(1, UNSEEN_SCENES + 1):
        attempt = 0
        scene = _draw_scene(room, base + k, attempt, scene_seed)
        while scene.signature in seen:
            attempt += 1
            scene = _draw_scene(room, base + k, attempt, scene_seed)
        seen.add(scene.signature)
        out.append(scene)
    return tuple(out)


def scenes_for(split: str, room: str, scene_seed: int | None = None) -> tuple[Scene, ...]:
    """Train and in-context-example games use the seen scenes; held-out games the unseen ones
    (of `scene_seed`)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    return unseen_scenes(room, scene_seed) if split == "heldout" else train_scenes(room)


# --- games ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    type: str
    id: str
    receptacle: Receptacle


@dataclass(frozen=True)
class GameSpec:
    key: str
    split: str
    task_type: str
    scene: Scene
    obj: str
    parent: str
    toggle: str
    goal: str
    items: tuple[Item, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """`<task type>-<object>-None-<receptacle or lamp>-<scene>/trial_<split>_<hash>`, like ALFWorld."""
        import hashlib

        last = self.toggle if self.task_type == "look_at_obj_in_light" else self.parent
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:12]
        return f"{self.task_type}-{self.obj}-None-{last}-{self.scene.number}/trial_{self.split}_{digest}"


class NoTaskError(Exception):
    """The drawn scene cannot host the drawn task (the caller draws again)."""


def _holders(scene: Scene, obj: str, exclude_types: frozenset[str] = frozenset()) -> list[Receptacle]:
    can = catalog.affordances().can_contain
    return [r for r in scene.receptacles if obj in can.get(r.type, ()) and r.type not in exclude_types]


def _has_property(task_type: str, obj: str) -> bool:
    aff = catalog.affordances()
    if task_type == "pick_clean_then_place_in_recep":
        return obj in aff.cleanable
    if task_type == "pick_heat_then_place_in_recep":
        return obj in aff.heatable
    if task_type == "pick_cool_then_place_in_recep":
        return obj in aff.coolable
    return True


def _choose_task(rng: random.Random, task_type: str, scene: Scene) -> tuple[str, str, str]:
    """(object type, goal receptacle type, lamp type) that the scene can host."""
    can = catalog.affordances().can_contain
    if task_type == "look_at_obj_in_light":
        if not any(r.type in catalog.LAMP_RECEPTACLES for r in scene.receptacles):
            raise NoTaskError("no place for a lamp")
        objs = [o for o in catalog.ROOM_OBJECTS[scene.room] if _holders(scene, o)]
        if not objs:
            raise NoTaskError("no object")
        return rng.choice(objs), "", catalog.LAMP
    excluded = catalog.EXCLUDED_PARENTS.get(task_type, frozenset()) | catalog.NEVER_PARENT
    pairs: list[tuple[str, str]] = []
    for obj in catalog.ROOM_OBJECTS[scene.room]:
        if not _has_property(task_type, obj):
            continue
        for parent in sorted(scene.types()):
            if parent in excluded or obj not in can.get(parent, ()):
                continue
            if _holders(scene, obj, frozenset({parent})):
                pairs.append((obj, parent))
    if not pairs:
        raise NoTaskError("no object/receptacle pair")
    obj, parent = rng.choice(pairs)
    return obj, parent, ""


def _goal_text(rng: random.Random, task_type: str, obj: str, parent: str, toggle: str) -> str:
    template = rng.choice(catalog.goal_templates(task_type))
    return template.format(
        obj=catalog.display_name(obj),
        recep=catalog.display_name(parent),
        toggle=catalog.display_name(toggle),
        mrecep="",
    )


def generate_game(key: str, task_type: str, split: str, scene_seed: int | None = None) -> GameSpec:
    """The game drawn from `key` for `task_type` in a scene of `split`'s scene pool (held-out:
    the unseen rooms of `scene_seed`)."""
    if task_type not in catalog.TASK_TYPES:
        raise ValueError(f"unknown ALFWorld task type {task_type!r}")
    rng = random.Random(f"{GENERATOR_VERSION}:game:{key}")
    for _ in range(100):
        room = rng.choice(catalog.ROOMS_FOR_TASK[task_type])
        scene = rng.choice(scenes_for(split, room, scene_seed))
        try:
            obj, parent, toggle = _choose_task(rng, task_type, scene)
        except NoTaskError:
            continue
        ids = _Ids(random.Random(f"{GENERATOR_VERSION}:ids:{key}"))
        ids.used |= {r.id.lower() for r in scene.receptacles}
        items: list[Item] = []
        # Target objects, never already in a goal-type receptacle.
        n_targets = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
        spots = _holders(scene, obj, frozenset({parent}) if parent else frozenset())
        for _ in range(n_targets):
            items.append(Item(obj, ids.object_id(obj), rng.choice(spots)))
        # Other objects (never of the target type, so the target count is what was drawn).
        pool = [o for o in catalog.ROOM_OBJECTS[scene.room] if o != obj and _holders(scene, o)]
        for _ in range(rng.randint(5, 12)):
            other = rng.choice(pool)
            items.append(Item(other, ids.object_id(other), rng.choice(_holders(scene, other))))
        if toggle:
            lamp_spots = [r for r in scene.receptacles if r.type in catalog.LAMP_RECEPTACLES]
            items.append(Item(toggle, ids.object_id(toggle), rng.choice(lamp_spots)))
        goal = _goal_text(rng, task_type, obj, parent, toggle)
        return GameSpec(
            key=key,
            split=split,
            task_type=task_type,
            scene=scene,
            obj=obj,
            parent=parent,
            toggle=toggle,
            goal=goal,
            items=tuple(items),
        )
    raise RuntimeError(f"could not draw a {task_type} game for key {key!r}")


# --- rendering ------------------------------------------------------------------------------


def _static_types() -> list[str]:
    types = {t for room in catalog.ROOM_RECEPTACLES.values() for t in room}
    return sorted(types | set(catalog.BASINS))


def _object_types(static: list[str]) -> list[str]:
    aff = catalog.affordances()
    return sorted((set(aff.all_object_types) | {catalog.LAMP}) - set(static) - set(catalog.BASINS.values()))


def render_problem(spec: GameSpec) -> str:
    """The PDDL problem of `spec` against the ALFRED domain shipped with `alfworld`."""
    aff = catalog.affordances()
    static = _static_types()
    otypes = _object_types(static)
    scene = spec.scene
    lines = [f"(define (problem plan_{spec.name.replace('/', '_').replace('-', '_')})", "(:domain alfred)"]
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in static]
    objects += [f"{it.id} - object" for it in spec.items]
    objects += [f"{r.id} - receptacle" for r in scene.receptacles]
    locations = sorted({r.location for r in scene.receptacles} | {scene.agent_location})
    objects += [f"{loc} - location" for loc in locations]
    lines.append("(:objects")
    lines += [f"        {o}" for o in objects]
    lines.append("        )")
    init: list[str] = []
    init += [f"(receptacleType {r.id} {r.type}Type)" for r in scene.receptacles]
    init += [f"(objectType {it.id} {it.type}Type)" for it in spec.items]
    present_objs = sorted({it.type for it in spec.items})
    for rtype in sorted(scene.types()):
        for otype in present_objs:
            if otype in aff.can_contain.get(rtype, ()):
                init.append(f"(canContain {rtype}Type {otype}Type)")
    for it in spec.items:
        if it.type == catalog.LAMP:
            init.append(f"(toggleable {it.id})")
            continue
        init.append(f"(pickupable {it.id})")
        if it.type in catalog.RECEPTACLE_OBJECTS:
            init.append(f"(isReceptacleObject {it.id})")
        for prop, types in (
            ("cleanable", aff.cleanable),
            ("heatable", aff.heatable),
            ("coolable", aff.coolable),
            ("sliceable", aff.sliceable),
        ):
            if it.type in types:
                init.append(f"({prop} {it.id})")
    init += [f"(openable {r.id})" for r in scene.receptacles if r.type in catalog.OPENABLE]
    init.append(f"(atLocation agent1 {scene.agent_location})")
    init += [f"(inReceptacle {it.id} {it.receptacle.id})" for it in spec.items]
    init += [f"(receptacleAtLocation {r.id} {r.location})" for r in scene.receptacles]
    init += [f"(objectAtLocation {it.id} {it.receptacle.location})" for it in spec.items]
    lines.append("(:init")
    lines += [f"        {fact}" for fact in init]
    lines.append("        )")
    goal = catalog.goal_pddl(spec.task_type, spec.obj, spec.parent, spec.toggle)
    return "\n".join(lines) + "\n" + goal.strip("\n") + "\n"


@cache
def domain_and_grammar() -> tuple[str, str]:
    """The PDDL domain and the text grammar shipped with the installed `alfworld` package."""
    import alfworld.info

    return (
        Path(alfworld.info.ALFRED_PDDL_PATH).read_text(),
        Path(alfworld.info.ALFRED_TWL2_PATH).read_text(),
    )


def game_json(spec: GameSpec) -> dict[str, Any]:
    domain, grammar = domain_and_grammar()
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", spec.goal),
        "pddl_problem": render_problem(spec),
        "solvable": True,
    }


def traj_data(spec: GameSpec) -> dict[str, Any]:
    """The `traj_data.json` fields ALFWorld's loader and experts read."""
    return {
        "task_type": spec.task_type,
        "task_id": spec.name.rsplit("/", 1)[-1],
        "pddl_params": {
            "object_target": spec.obj,
            "parent_target": spec.parent,
            "toggle_target": spec.toggle,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"scene_num": spec.scene.number, "room": spec.scene.room},
        "turk_annotations": {"anns": [{"task_desc": spec.goal}]},
        "a2rl": {"generator": GENERATOR_VERSION, "split": spec.split, "key": spec.key},
    }


def write_game(spec: GameSpec, root: Path) -> Path:
    """Write `root/<spec.name>/{game.tw-pddl, traj_data.json}`; returns the game file."""
    game_dir = root / spec.name
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / GAME_FILE).write_text(json.dumps(game_json(spec)))
    (game_dir / TRAJ_FILE).write_text(json.dumps(traj_data(spec), indent=1, sort_keys=True))
    return game_dir / GAME_FILE


def game_key(seed: int, split: str, task_type: str, index: int) -> str:
    """Disjoint keys per split: `"<seed>:train:<task type>:<i>"`, `"<seed>:heldout:…"`, …"""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    return f"{seed}:{split}:{task_type}:{index}"


def task_type_plan(counts: dict[str, int]) -> list[str]:
    """Task types in a stable interleaved order (so the first N games cover every type)."""
    remaining = dict(counts)
    order: list[str] = []
    while any(remaining.values()):
        for tt in catalog.TASK_TYPES:
            if remaining.get(tt, 0) > 0:
                order.append(tt)
                remaining[tt] -= 1
    return order
