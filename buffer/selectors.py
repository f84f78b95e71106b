"""Task selectors: which tasks of a taskset each batch reads (Trinity-RFT's task_selector, by its names).

`SELECTORS` registers each by its `selector_type`. A selector maps a position (tasks handed out so far) to the next
tasks, so a reader positioned anew (a resumed or retried step) reads what an uninterrupted one would:

  sequential         file order, every epoch
  shuffle            a permutation per epoch fixed by (seed, epoch)
  random             each batch drawn uniformly, fixed by (seed, position)
  offline_easy2hard  easiest first by the rows' feature_keys (harder_when), every epoch
  difficulty_based   the tasks whose estimated pass rate is nearest kwargs.target_reward (BOTS): each task's pass rate
                     is a Beta estimate updated from the results of its groups (`update`) and, for tasks not seen, a
                     prior from its features around a capacity fitted to what was observed. As the model passes more,
                     the capacity rises and the picks move to harder tasks.

Only difficulty_based learns (`adaptive`); its state is JSON (`state_dict`), kept in the experiment folder by
buffer/selector_state.py.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from buffer.task import Task
    from schemas import TaskSelectorConfig

# The rank prior's slope: a task 0.5 harder (in rank) than the capacity passes with sigmoid(-3) ≈ 5 %.
RANK_SLOPE = 6.0
# Weight of the past in the capacity's moving average (Trinity's cap_coef_update_discount).
CAPACITY_DISCOUNT = 0.9
PASS_CLIP = 0.02  # observed pass rates are clipped away from 0 and 1 before the logit of the rank prior
# task_selector.harder_when: the sign that makes a larger value a harder task
HARDER_SIGN = {"higher": 1.0, "lower": -1.0}


class SelectorError(ValueError):
    """The taskset's rows cannot give what the selector reads: the message names the key and the row."""


def feature_value(row: Mapping[str, Any], key: str) -> float:
    """The number at `key` of a row: a column of that name (Trinity's keys may hold dots: qwen2.5_7b_pass_rate), else
    'a.b', key b of column a, a mapping or JSON text (reasoning-gym's metadata)."""
    value = _lookup(row, key, "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise KeyError(f"{value!r} is not a number")
    return float(value)


def _lookup(value: Any, key: str, where: str) -> Any:
    if isinstance(value, str) and where:
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise KeyError(f"'{where}' is text, not JSON") from None
    inside = f" in '{where}'" if where else ""
    if not isinstance(value, Mapping):
        raise KeyError(f"no '{key}'{inside}")
    if value.get(key) is not None:  # a file's row has None where other rows have the column
        return value[key]
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:cut])
        if value.get(head) is not None:
            return _lookup(value[head], ".".join(parts[cut:]), f"{where}.{head}" if where else head)
    raise KeyError(f"no '{key}'{inside}")


def feature_matrix(tasks: Sequence[Task], keys: Sequence[str]) -> np.ndarray:
    """[task, key] values of every task's features; SelectorError naming the first row without one."""
    out = np.empty((len(tasks), len(keys)))
    for i, task in enumerate(tasks):
        for j, key in enumerate(keys):
            try:
                out[i, j] = feature_value(task.raw, key)
            except KeyError as err:
                columns = ", ".join(sorted(task.raw))
                raise SelectorError(f"feature key '{key}' of task {task.task_id}: {err.args[0]} (columns: {columns})") from None
    return out


def difficulty(features: np.ndarray, harder_when: str) -> np.ndarray:
    """Each task's difficulty in [0, 1]: the mean over keys of its rank (ties share theirs), 0 the easiest."""
    n = len(features)
    if n == 1:
        return np.zeros(1)
    columns = []
    for column in features.T:
        values = HARDER_SIGN[harder_when] * column
        order = np.argsort(values, kind="stable")
        ranks = np.empty(n)
        ranks[order] = np.arange(n)
        for value in np.unique(values):  # ties share their mean rank
            same = values == value
            ranks[same] = ranks[same].mean()
        columns.append(ranks / (n - 1))
    return np.mean(columns, axis=0)


class TaskSelector:
    """Picks task indices by position; `update` learns from results (a no-op unless `adaptive`)."""

    name: ClassVar[str]
    adaptive: ClassVar[bool] = False

    def __init__(self, tasks: Sequence[Task], config: TaskSelectorConfig) -> None:
        self.num_tasks = len(tasks)
        self.config = config
        self.seed = config.seed

    def pick(self, consumed: int, size: int) -> list[int]:
        """The indices of the `size` tasks handed out after the first `consumed`."""
        raise NotImplementedError

    def update(self, results: Mapping[int, float]) -> None:
        """Learn from a step's finished groups: {task index: pass rate}."""

    def metrics(self, picked: Sequence[int]) -> dict[str, float]:
        """What the selector tells about a step's picks (logged as explore/selector_*)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict()`'s output."""


SELECTORS: dict[str, type[TaskSelector]] = {}


def register(name: str) -> Callable[[type[TaskSelector]], type[TaskSelector]]:
    def add(cls: type[TaskSelector]) -> type[TaskSelector]:
        if name in SELECTORS:
            raise ValueError(f"task selector '{name}' is registered twice")
        cls.name = name
        SELECTORS[name] = cls
        return cls

    return add


def build_selector(tasks: Sequence[Task], config: TaskSelectorConfig) -> TaskSelector:
    """The taskset's selector; SelectorError when its rows lack a feature it reads."""
    if config.selector_type not in SELECTORS:
        raise ValueError(f"unknown task selector '{config.selector_type}' (known: {', '.join(SELECTORS)})")
    return SELECTORS[config.selector_type](tasks, config)


class OrderedSelector(TaskSelector):
    """Every task once an epoch, in `epoch_order(epoch)`."""

    def __init__(self, tasks: Sequence[Task], config: TaskSelectorConfig) -> None:
        super().__init__(tasks, config)
        self._epoch, self._order = -1, list(range(self.num_tasks))

    def epoch_order(self, epoch: int) -> list[int]:
        return list(range(self.num_tasks))

    def pick(self, consumed: int, size: int) -> list[int]:
        out = []
        for position in range(consumed, consumed + size):
            epoch, offset = divmod(position, self.num_tasks)
            if epoch != self._epoch:
                self._epoch, self._order = epoch, self.epoch_order(epoch)
            out.append(self._order[offset])
        return out


@register("sequential")
class Sequential(OrderedSelector):
    pass


@register("shuffle")
class Shuffle(OrderedSelector):
    def epoch_order(self, epoch: int) -> list[int]:
        order = list(range(self.num_tasks))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order


@register("offline_easy2hard")
class OfflineEasy2Hard(OrderedSelector):
    """Trinity's offline curriculum: sorted by the features (the first key first), easiest first, ties in file order."""

    def __init__(self, tasks: Sequence[Task], config: TaskSelectorConfig) -> None:
        super().__init__(tasks, config)
        features = feature_matrix(tasks, config.feature_keys)
        sign = HARDER_SIGN[config.harder_when]
        self._sorted = sorted(range(self.num_tasks), key=lambda i: (*(sign * features[i]), i))

    def epoch_order(self, epoch: int) -> list[int]:
        return list(self._sorted)


@register("random")
class Uniform(TaskSelector):
    def pick(self, consumed: int, size: int) -> list[int]:
        rng = random.Random(f"{self.seed}/random/{consumed}")
        n = self.num_tasks
        return rng.sample(range(n), size) if size <= n else rng.choices(range(n), k=size)


@register("difficulty_based")
class DifficultyBased(TaskSelector):
    """BOTS's selector (Trinity's DifficultyBasedSelector and its InterpolationBetaPREstimator, module docstring).

    Each task's pass rate is Beta(alpha, beta). An update with observed pass rates p (over m rollouts) moves every task:
        alpha ← (1 - lamb) alpha + lamb + (1 - rho) m p_obs + rho m p_prior    (beta: the same with 1 - p)
    where p_obs is 0 for a task not in the update and p_prior is the observed rate for one that is, else the prior
    from its features at the current capacity. Tasks handed out since the last update are not picked again before
    it (dynamic sampling's later rounds of a step take other tasks)."""

    adaptive = True

    def __init__(self, tasks: Sequence[Task], config: TaskSelectorConfig) -> None:
        super().__init__(tasks, config)
        self.args = config.kwargs
        self.features = feature_matrix(tasks, config.feature_keys)
        if self.args.prior == "interpolate":
            bad = np.argwhere((self.features < 0) | (self.features > 1))
            if len(bad):
                i, j = bad[0]
                raise SelectorError(f"feature key '{config.feature_keys[j]}' of task {tasks[i].task_id}: "
                                    f"{self.features[i, j]} is not a pass rate in [0, 1] (kwargs.prior interpolate)")
        self.difficulty = difficulty(self.features, config.harder_when)
        self.alpha = np.ones(self.num_tasks)
        self.beta = np.ones(self.num_tasks)
        self.capacity: float | None = None
        self.rho = self.args.rho
        self.pending: set[int] = set()

    # -- the prior -------------------------------------------------------------------------------------------------

    def prior(self) -> np.ndarray:
        """The pass rate of every task from its features at the current capacity (0.5 before any update)."""
        if self.capacity is None:
            return np.full(self.num_tasks, 0.5)
        if self.args.prior == "rank":
            return 1.0 / (1.0 + np.exp(-RANK_SLOPE * (self.capacity - self.difficulty)))
        low, high = self.features[:, 0], self.features[:, 1]  # interpolate
        return np.clip(low + self.capacity * (high - low), 0.0, 1.0)

    def _capacity_seen(self, indices: np.ndarray, rates: np.ndarray) -> float:
        if self.args.prior == "interpolate":  # where the mean pass rate lies between the two references
            low, high = self.features[indices, 0].mean(), self.features[indices, 1].mean()
            return float((rates.mean() - low) / (high - low + 1e-6))
        clipped = np.clip(rates, PASS_CLIP, 1 - PASS_CLIP)  # the rank at which each would pass half the time
        return float(np.mean(self.difficulty[indices] + np.log(clipped / (1 - clipped)) / RANK_SLOPE))

    # -- learning --------------------------------------------------------------------------------------------------

    def update(self, results: Mapping[int, float]) -> None:
        self.pending.clear()
        if not results:
            return
        indices = np.array(sorted(results))
        rates = np.array([results[i] for i in indices])
        seen = self._capacity_seen(indices, rates)
        self.capacity = seen if self.capacity is None else CAPACITY_DISCOUNT * self.capacity + (1 - CAPACITY_DISCOUNT) * seen
        prior = self.prior()
        if self.args.adaptive_rho and float(np.mean(np.abs(prior[indices] - rates))) >= 0.25:
            self.rho *= 0.5  # the features predict badly: trust them less
        prior[indices] = rates
        lamb, rho, m = self.args.lamb, self.rho, self.args.m
        passed, failed = np.zeros(self.num_tasks), np.zeros(self.num_tasks)
        passed[indices], failed[indices] = rates * m, (1 - rates) * m
        self.alpha = (1 - lamb) * self.alpha + lamb + (1 - rho) * passed + rho * prior * m
        self.beta = (1 - lamb) * self.beta + lamb + (1 - rho) * failed + rho * (1 - prior) * m

    # -- picking ---------------------------------------------------------------------------------------------------

    def pass_rates(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """The estimated pass rate of every task: the Beta mean, or a draw from it (kwargs.do_sample)."""
        if self.args.do_sample and rng is not None:
            return rng.beta(self.alpha, self.beta)
        return self.alpha / (self.alpha + self.beta)

    def pick(self, consumed: int, size: int) -> list[int]:
        rng = np.random.default_rng([self.seed, consumed])
        scores = -np.abs(self.args.target_reward - self.pass_rates(rng))
        free = np.array([i not in self.pending for i in range(self.num_tasks)])
        if free.sum() < size:  # fewer tasks than the batch wants: repeat rather than come up short
            free[:] = True
        candidates = np.flatnonzero(free)
        if self.args.tau == 0:
            chosen = candidates[np.argsort(-scores[candidates], kind="stable")][:size]
        else:
            logits = scores[candidates] / self.args.tau
            weights = np.exp(logits - logits.max())
            chosen = rng.choice(candidates, size=min(size, len(candidates)), replace=False, p=weights / weights.sum())
        picks = [int(i) for i in chosen]
        while len(picks) < size:  # a batch larger than the taskset: the ranking again
            picks += picks[: size - len(picks)]
        self.pending.update(picks)
        return picks

    def metrics(self, picked: Sequence[int]) -> dict[str, float]:
        if not picked:
            return {}
        chosen = list(picked)
        return {"selector_difficulty": float(self.difficulty[chosen].mean()),
                "selector_pass_rate": float(self.pass_rates()[chosen].mean()),
                **({"selector_capacity": self.capacity} if self.capacity is not None else {})}

    # -- state -----------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha.tolist(), "beta": self.beta.tolist(), "capacity": self.capacity, "rho": self.rho}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        alpha, beta = np.asarray(state["alpha"], dtype=float), np.asarray(state["beta"], dtype=float)
        if alpha.shape != (self.num_tasks,) or beta.shape != (self.num_tasks,):
            raise ValueError(f"selector state has {alpha.size} tasks, the taskset {self.num_tasks}")
        self.alpha, self.beta = alpha, beta
        self.capacity = None if state["capacity"] is None else float(state["capacity"])
        self.rho = float(state["rho"])
        self.pending.clear()
