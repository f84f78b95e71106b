"""`q20`: twenty questions. The model asks yes/no questions to find a secret entity, then names it.

The answerer is a rule-based oracle over a bundled list of entities (`data/q20/entities.json`: each
with a category — animal, food, object, vehicle — and yes/no attributes): it answers questions that
mention a category or an attribute (by keywords, e.g. "fly", "wheels", "kitchen"), and a question
naming one entity of the list is a guess. With `workflow_args.answerer` (an auxiliary model's name) that
model answers the questions instead, told the secret (`ModelOracle`); a guess is still checked by name.
Rows of the taskset name the secret (`secret` column, or format.prompt_key when that column exists).

Rewards: 1.0 when the model names the secret (the episode ends); each turn the oracle cannot answer
(no known category, attribute or entity, or several entities at once) costs `invalid_turn_reward`.
`accuracy` (and the `success` metric) is whether the secret was found.

workflow_args: max_turns, max_tokens_per_turn, episode_timeout_s (see workflows.multi_turn),
  entities (path, default data/q20/entities.json), invalid_turn_reward (default -0.05), answerer (the name of
  an auxiliary model that answers instead of the rules).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.rollout import SamplingSettings
from buffer.taskset import resolve_local_path
from workflows.auxiliary import AuxiliaryModel, pick
from workflows.base import register_workflow
from workflows.multi_turn import DEFAULT_MAX_TURNS, Env, EnvStep, MultiTurnWorkflow
from workflows.render import Messages

DEFAULT_ENTITIES = "data/q20/entities.json"
DEFAULT_INVALID_TURN_REWARD = -0.05

CATEGORY_WORDS: dict[str, tuple[str, ...]] = {
    "animal": ("animal", "creature"),
    "food": ("food", "eat", "edible", "eaten"),
    "object": ("object", "household item", "tool"),
    "vehicle": ("vehicle", "transport", "drive", "driven", "ride"),
}
ATTRIBUTE_WORDS: dict[str, tuple[str, ...]] = {
    "alive": ("alive", "living", "live"),
    "fly": ("fly", "flies", "flying", "wings"),
    "water": ("water", "swim", "sea", "ocean"),
    "legs": ("legs", "leg", "walk"),
    "mammal": ("mammal", "fur"),
    "pet": ("pet",),
    "fruit": ("fruit",),
    "vegetable": ("vegetable",),
    "sweet": ("sweet", "sugar", "dessert"),
    "tree": ("tree", "trees"),
    "electronic": ("electric", "electronic", "electricity", "battery", "plug"),
    "metal": ("metal", "metallic"),
    "wheels": ("wheel", "wheels"),
    "kitchen": ("kitchen",),
    "music": ("music", "musical", "instrument"),
    "paper": ("paper", "read"),
    "big": ("big", "large", "huge", "bigger", "larger"),
}
SMALL_WORDS = ("small", "little", "tiny", "smaller")  # the opposite of "big"


@dataclass(frozen=True)
class Entity:
    name: str
    category: str
    attributes: dict[str, bool]


@functools.lru_cache(maxsize=4)
def load_entities(path: str = DEFAULT_ENTITIES) -> tuple[Entity, ...]:
    found = resolve_local_path(path)
    if found is None:
        raise FileNotFoundError(f"q20 entities: {path} not found")
    data = json.loads(Path(found).read_text(encoding="utf-8"))
    return tuple(Entity(e["name"], e["category"], dict(e["attributes"])) for e in data["entities"])


def _mentions(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}s?\b", text) is not None


class Oracle:
    """Answers yes/no questions about one secret entity of a list."""

    def __init__(self, secret: Entity, entities: tuple[Entity, ...]) -> None:
        self.secret = secret
        self.entities = entities

    def answer(self, question: str) -> tuple[str, bool | None]:
        """(reply, verdict): verdict True/False for an answered question, None when it cannot be answered.
        A guess of the secret answers "Yes! ..." with verdict True and `guessed` set."""
        text = question.lower()
        named = [e for e in self.entities if _mentions(text, e.name)]
        if len(named) == 1:
            hit = named[0] == self.secret
            return (f"Yes! It is the {self.secret.name}." if hit else f"No, it is not the {named[0].name}."), hit
        if len(named) > 1:
            return "Please guess one thing at a time.", None
        for category, words in CATEGORY_WORDS.items():
            if any(_mentions(text, w) for w in words):
                return self._yes_no(self.secret.category == category)
        if any(_mentions(text, w) for w in SMALL_WORDS):
            return self._yes_no(not self.secret.attributes.get("big", False))
        for attribute, words in ATTRIBUTE_WORDS.items():
            if any(_mentions(text, w) for w in words):
                return self._yes_no(bool(self.secret.attributes.get(attribute, False)))
        return ("I can only answer yes/no questions about its kind (animal, food, object, vehicle) or its "
                "features, or a guess like 'Is it a dog?'."), None

    @staticmethod
    def _yes_no(value: bool) -> tuple[str, bool]:
        return ("Yes." if value else "No."), value

    def is_guess_of_secret(self, question: str) -> bool:
        named = [e for e in self.entities if _mentions(question.lower(), e.name)]
        return named == [self.secret]


class ModelOracle(Oracle):
    """The answerer as an auxiliary model (workflow_args.answerer): it is told the secret and answers each
    question yes or no; a guess is still checked by name (a rule of the game, not a judgment)."""

    PROMPT = ("We play twenty questions. The secret thing is: {name} (a {category}). Answer the player's question "
              "about it with one word, Yes or No.\n\nQuestion: {question}")

    def __init__(self, secret: Entity, entities: tuple[Entity, ...], model: AuxiliaryModel) -> None:
        super().__init__(secret, entities)
        self.model = model

    def answer(self, question: str) -> tuple[str, bool | None]:
        named = [e for e in self.entities if _mentions(question.lower(), e.name)]
        if named:  # a guess: the rules decide
            return super().answer(question)
        ask = self.PROMPT.format(name=self.secret.name, category=self.secret.category, question=question.strip())
        (reply,) = self.model.chat([{"role": "user", "content": ask}], SamplingSettings(n=1, temperature=0.0, max_tokens=8))
        word = re.match(r"\W*(yes|no)\b", reply.text.lower())
        if word is None:
            return "I can only answer yes or no to that.", None
        return self._yes_no(word.group(1) == "yes")


class Q20Env(Env):
    def __init__(self, secret: Entity, entities: tuple[Entity, ...], max_turns: int, invalid_reward: float,
                 answerer: AuxiliaryModel | None = None) -> None:
        self.oracle = Oracle(secret, entities) if answerer is None else ModelOracle(secret, entities, answerer)
        self.entities = entities
        self.max_turns = max_turns
        self.invalid_reward = invalid_reward
        self.found = False
        self.valid = 0

    def initial_messages(self) -> Messages:
        names = ", ".join(e.name for e in self.entities)
        system = (
            "We play twenty questions. I am thinking of one of these things: "
            f"{names}. Ask me one yes/no question per turn, for example 'Is it an animal?' or 'Can it fly?'. "
            f"When you know it, guess with 'Is it a <name>?'. You have {self.max_turns} turns."
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": "I have chosen. Ask your first question."}]

    def step(self, response: str) -> EnvStep:
        reply, verdict = self.oracle.answer(response)
        if verdict is None:
            return EnvStep([{"role": "user", "content": reply}], reward=self.invalid_reward,
                           metrics={"valid_questions": float(self.valid)})
        self.valid += 1
        if self.oracle.is_guess_of_secret(response):
            self.found = True
            return EnvStep([], reward=0.0, done=True, metrics={"success": 1.0, "valid_questions": float(self.valid)})
        return EnvStep([{"role": "user", "content": reply}], metrics={"valid_questions": float(self.valid)})

    def final_reward(self) -> tuple[float, dict[str, float]]:
        return (1.0 if self.found else 0.0), {"accuracy": 1.0 if self.found else 0.0}


@register_workflow("q20")
class Q20Workflow(MultiTurnWorkflow):
    """Twenty questions against the rule-based oracle; one episode per sample of the group."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return []  # the secret's column is `secret` (or format.prompt_key); checked when the task runs

    def secret(self) -> Entity:
        args = self.task.workflow_args or {}
        entities = load_entities(str(args.get("entities", DEFAULT_ENTITIES)))
        raw = self.task.raw
        name = raw.get("secret", raw.get(self.task.format.prompt_key) if self.task.format is not None else None)
        match = [e for e in entities if e.name == str(name).strip().lower()]
        if not match:
            raise KeyError(f"task {self.task.task_id}: secret {name!r} is not one of the entities "
                           f"({', '.join(e.name for e in entities)})")
        return match[0]

    def make_env(self, index: int) -> Env:
        args = self.task.workflow_args or {}
        return Q20Env(
            self.secret(),
            load_entities(str(args.get("entities", DEFAULT_ENTITIES))),
            max_turns=int(args.get("max_turns", DEFAULT_MAX_TURNS)),
            invalid_reward=float(args.get("invalid_turn_reward", DEFAULT_INVALID_TURN_REWARD)),
            answerer=pick(self.auxiliary, str(args["answerer"]), "q20 (workflow_args.answerer)") if "answerer" in args else None,
        )
