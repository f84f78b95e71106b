"""GiGPO (advantage_fn / algorithm_type `gigpo`, algorithms/advantage/gigpo.py): episode-level plus anchor-state
step-level advantages, worked out by hand on three episodes; validation refuses a workflow that records no step
states; and, slow, the frozenlake recipe with `gigpo` through the real flow on the tiny model, each episode's
per-turn advantages read back from the experience store."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from algorithms import ADVANTAGE_FNS
from algorithms.advantage.gigpo import STEP_STATE_WORKFLOWS, gigpo_advantages
from buffer.experience import Experience
from deployments import load_recipe
from schemas import describe_errors
from workflows import WORKFLOWS
from workflows.multi_turn import Env


def episode(eid: str, group: str, states: list[str], turn_rewards: list[float], reward: float) -> Experience:
    """An episode of len(states) model turns of 2 tokens each, with 1 environment token between turns."""
    ids, mask, spans = [], [], []
    for t in range(len(states)):
        if t:
            ids.append(900)
            mask.append(0)
        spans.append([len(ids), len(ids) + 2])
        ids += [500 + t, 501 + t]
        mask += [1, 1]
    return Experience(eid=eid, task_id=group, group_id=group, prompt_token_ids=[1, 2], response_token_ids=ids,
                      logprobs=[-1.0] * len(ids), reward=reward, response_mask=mask,
                      info={"step_states": states, "turn_spans": spans, "turn_rewards": turn_rewards,
                            "turns": len(states)})


def three_episodes(group: str = "g") -> list[Experience]:
    """A: s0 → s1 → s2, reaches the goal on its third turn (reward 1). B: s0 → s1, then stays at s1 (an invalid
    move) and fails (0). C: s0 → s3, no turn reward, and a final reward of 0.5 (on its last step)."""
    return [episode("A", group, ["s0", "s1", "s2"], [0.0, 0.0, 1.0], 1.0),
            episode("B", group, ["s0", "s1", "s1"], [0.0, 0.0, 0.0], 0.0),
            episode("C", group, ["s0", "s3"], [0.0, 0.0], 0.5)]


def args(**overrides: object) -> dict:
    return ADVANTAGE_FNS.resolve_args("gigpo", {"gamma": 0.5, **overrides})


def turn_values(exp: Experience) -> list[float]:
    return [exp.token_advantages[start] for start, _ in exp.info["turn_spans"]]


def test_hand_computed_advantages_of_three_episodes() -> None:
    """gamma 0.5, omega 1, fnorm none (Trinity's default: centred, not divided by the std).

    Episode level: returns A 1, B 0, C 0.5; mean 0.5 → A_E = A +0.5, B −0.5, C 0.
    Discounted returns R_t = r_t + 0.5·R_{t+1}: A [0.25, 0.5, 1], B [0, 0, 0], C [0.25, 0.5] (C's final 0.5 is its
    last step's reward).
    Step groups (same state, same task): s0 = {A0 0.25, B0 0, C0 0.25}, mean 1/6 → A0 +1/12, B0 −1/6, C0 +1/12;
    s1 = {A1 0.5, B1 0, B2 0}, mean 1/6 → A1 +1/3, B1 −1/6, B2 −1/6; s2 = {A2}, s3 = {C1}: alone → 0.
    Each turn's tokens: A_E + A_S → A [7/12, 5/6, 1/2], B [−2/3, −2/3, −2/3], C [1/12, 0]."""
    exps = three_episodes()
    metrics = gigpo_advantages(exps, args())
    a, b, c = exps
    assert turn_values(a) == pytest.approx([7 / 12, 5 / 6, 1 / 2], abs=1e-5)
    assert turn_values(b) == pytest.approx([-2 / 3, -2 / 3, -2 / 3], abs=1e-5)
    assert turn_values(c) == pytest.approx([1 / 12, 0.0], abs=1e-5)
    assert [e.advantage for e in exps] == pytest.approx([0.5, -0.5, 0.0], abs=1e-5)  # A_E
    assert a.info["gigpo"]["step_advantages"] == pytest.approx([1 / 12, 1 / 3, 0.0], abs=1e-5)
    assert a.info["gigpo"]["step_group_sizes"] == [3, 3, 1] and b.info["gigpo"]["step_group_sizes"] == [3, 3, 3]
    # every token of a turn has its turn's value; the environment's tokens (masked out) 0
    assert a.token_advantages == pytest.approx([7 / 12] * 2 + [0.0] + [5 / 6] * 2 + [0.0] + [1 / 2] * 2, abs=1e-5)
    assert metrics["gigpo/step_groups"] == 4 and metrics["gigpo/step_group_hit_ratio"] == 0.5


def test_omega_weighs_the_step_level_and_fnorm_std_divides_by_the_group_std() -> None:
    """omega 2: A's first turn 0.5 + 2·(1/12) = 2/3. fnorm std: episode returns [1, 0, 0.5] have std 0.5 → A_E
    [1, −1, 0]; s0's returns [0.25, 0, 0.25] have std sqrt(1/48) → A0 = (1/12)/sqrt(1/48) = 1/sqrt(3), B0 = −2/sqrt(3)."""
    exps = three_episodes()
    gigpo_advantages(exps, args(omega=2.0))
    assert turn_values(exps[0])[0] == pytest.approx(2 / 3, abs=1e-5)
    exps = three_episodes()
    gigpo_advantages(exps, args(fnorm="std"))
    assert [e.advantage for e in exps] == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)
    assert exps[0].info["gigpo"]["step_advantages"][0] == pytest.approx(3 ** -0.5, abs=1e-5)
    assert exps[1].info["gigpo"]["step_advantages"][0] == pytest.approx(-2 * 3 ** -0.5, abs=1e-5)


def test_step_groups_stay_within_their_task_s_group() -> None:
    """The same state text in another task's group is another step group: two groups give what each gives alone."""
    both = three_episodes("g1") + three_episodes("g2")
    gigpo_advantages(both, args())
    alone = three_episodes()
    gigpo_advantages(alone, args())
    assert [e.token_advantages for e in both] == [e.token_advantages for e in alone * 2]


def test_gamma_one_makes_the_first_step_s_return_the_episode_s() -> None:
    exps = three_episodes()
    gigpo_advantages(exps, args(gamma=1.0))
    # s0: returns A 1, B 0, C 0.5 → A_S = A_E: the first turn gets twice the episode's advantage
    assert [turn_values(e)[0] for e in exps] == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)


def test_trinity_s_info_key_names_read_as_this_project_s() -> None:
    trinity = {"step_reward_key": "step_reward", "env_state_hash_key": "env_state_hash"}
    config = load_recipe("frozenlake").with_overrides({"algorithm.algorithm_type": "gigpo",
                                                       "algorithm.advantage_fn_args": trinity})
    resolved = config.algorithm.advantage_fn_args
    assert (resolved["step_reward_key"], resolved["env_state_hash_key"]) == ("turn_rewards", "step_states")
    # mapped where Trinity's names are (schemas/trinity/aliases.py), noted as the user's own setting
    assert config.derived["algorithm.advantage_fn_args.step_reward_key"].startswith("alias: Trinity's info key")
    exps = three_episodes()
    gigpo_advantages(exps, args(**{key: resolved[key] for key in trinity}))
    assert turn_values(exps[0]) == pytest.approx([7 / 12, 5 / 6, 1 / 2], abs=1e-5)


def test_an_experience_without_step_states_is_refused_naming_the_field() -> None:
    single = Experience(eid="x", task_id="t", group_id="g", prompt_token_ids=[1], response_token_ids=[5, 6],
                        logprobs=[-1.0, -1.0], reward=1.0)
    with pytest.raises(ValueError, match="turn_spans"):
        gigpo_advantages([single], args())
    single.info["turn_spans"] = [[0, 2]]
    with pytest.raises(ValueError, match="step_states"):
        gigpo_advantages([single], args())


def test_validation_refuses_gigpo_with_a_workflow_that_records_no_states() -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "gigpo"})
    lines = describe_errors(exc.value)
    assert any(line.startswith("buffer.explorer_input.taskset.default_workflow_type:") and "step_states" in line
               for line in lines), lines
    config = load_recipe("frozenlake").with_overrides({"algorithm.algorithm_type": "gigpo"})
    assert (config.algorithm.advantage_fn, config.algorithm.policy_loss_fn_args["loss_agg_mode"]) == ("gigpo", "token-mean")


def test_the_workflows_that_record_states_are_those_whose_env_names_one() -> None:
    """STEP_STATE_WORKFLOWS (what validation accepts) against the registered workflows' modules: a workflow records
    `step_states` when its module's Env overrides Env.state."""
    names_state = set()
    for name, cls in WORKFLOWS.items():
        module = sys.modules[cls.__module__]
        envs = [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                if issubclass(obj, Env) and obj is not Env and obj.__module__ == module.__name__]
        if any(env.state is not Env.state for env in envs):
            names_state.add(name)
    assert names_state == set(STEP_STATE_WORKFLOWS)


# -- the recipe, end to end (slow) -------------------------------------------------------------------------------


@pytest.mark.slow
def test_frozenlake_with_gigpo_stores_per_turn_advantages(tmp_path: Path, tiny_model_path: str) -> None:
    """frozenlake with algorithm_type gigpo on the tiny model, 1 step through the real flow (an invalid move costs
    0.1, so the episodes' returns differ more often): every stored episode has its step groups and per-turn
    advantages (A_E + A_S of each turn on its tokens, 0 on the environment's), what the stored steps give again,
    the first turns of a task's 4 episodes (the same map) are one step group, and the turns of some episode get
    different advantages; explore logs gigpo's metrics."""
    import copy

    from mlflow.tracking import MlflowClient

    from buffer.experience_store import ExperienceStore
    from flows.rft import rft
    from tracking import tracking_uri

    config = load_recipe("frozenlake").with_overrides({
        "algorithm.algorithm_type": "gigpo", "checkpoint_root_dir": str(tmp_path), "model.model_path": tiny_model_path,
        "buffer.total_steps": 1, "explorer.eval_interval": 1, "trainer.save_interval": 1,
        "buffer.explorer_input.eval_tasksets.0.split": "test[:1]",
        "buffer.explorer_input.taskset.workflow_args.invalid_action_reward": -0.1,
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 1
    store = ExperienceStore.for_experiment(config.experiment_dir)
    try:
        exps = store.experiences()
    finally:
        store.close()
    assert len(exps) == 2 * 4
    again = copy.deepcopy(exps)
    gigpo_advantages(again, ADVANTAGE_FNS.resolve_args("gigpo", config.algorithm.advantage_fn_args))
    differ = 0
    for exp, redone in zip(exps, again, strict=True):
        info, record = exp.info, exp.info["gigpo"]
        turns = len(info["turn_spans"])
        assert len(record["step_advantages"]) == len(record["step_group_sizes"]) == len(info["step_states"]) == turns
        assert exp.token_advantages == pytest.approx(redone.token_advantages, abs=1e-6)
        for (start, end), step_adv in zip(info["turn_spans"], record["step_advantages"], strict=True):
            assert exp.token_advantages[start:end] == pytest.approx([record["episode_advantage"] + step_adv]
                                                                    * (end - start), abs=1e-6)
        trained = {i for start, end in info["turn_spans"] for i in range(start, end)}
        assert all(exp.token_advantages[i] == 0.0 for i in range(len(exp.response_token_ids)) if i not in trained)
        assert record["step_group_sizes"][0] >= 4  # the task's 4 episodes all start on its map
        differ += len({round(exp.token_advantages[start], 6) for start, _ in info["turn_spans"]}) > 1
    assert differ > 0  # the turns of an episode whose states fell in different step groups differ (8 of 8 here)
    client = MlflowClient(tracking_uri=tracking_uri(config))
    for key in ("explore/gigpo/step_groups", "explore/gigpo/step_group_hit_ratio"):
        assert client.get_metric_history(outcome["mlflow_run_id"], key), key
