"""Agent Q's search core and the LLM-as-judge pairings, on hand-worked trees and scores: UCB1 values and
choices, backup (eq. 8), the value blend (eq. 10) and θ pairs, the critic's iterative ranking, and the strict
parsers of the critic's and the judge's answers."""

import json
import math
import os

import pytest

from rollout.judge import JudgeParseError, judge_prompt, parse_scores
from rollout.search.critic import CriticParseError, critic_prompt, iterative_ranking, parse_choice
from rollout.search.mcts import Edge, SearchNode, backup, best_edge, node_pairs, rank_values, select, ucb1, walk
from tgpo_jax.data.schema import NodeRecord
from trees.judge_pairs import ScoredStep, command_key, dpo1_pairs, dpo2_pairs, judge_pairs

from chat_server import ChatServer, listed


def _node(*edges, key="n"):
    return SearchNode(
        key=key,
        edges=[
            Edge(action=f"a{i}", command=f"c{i}", critic=cr, q_search=q, visits=n) for i, (cr, q, n) in enumerate(edges)
        ],
    )


def test_ucb1_scores_and_choice_by_hand():
    # (critic Q̂, Q̃, N(h, a)); N(h) = 3, log 3 = 1.0986
    node = _node((1.0, 0.5, 2), (0.5, 1.0, 1), (0.0, 0.0, 0))
    # blended at α = 0.5: 0.75, 0.75, 0; bonuses sqrt(log 3 / (1 + N)): 0.6051, 0.7412, 1.0481
    assert ucb1(node, c=1.0, alpha=0.5) == pytest.approx([1.355148, 1.491152, 1.048147], abs=1e-6)
    assert best_edge(node, c=1.0, alpha=0.5) == 1
    assert best_edge(node, c=3.0, alpha=0.5) == 2  # 2.5654, 2.9735, 3.1444: exploration wins
    assert best_edge(node, c=0.0, alpha=0.5) == 0  # a tie at 0.75: the critic's better-ranked edge
    assert best_edge(node, c=0.0, alpha=1.0) == 1  # search value alone


def test_a_fresh_node_starts_with_the_critics_best():
    node = _node((0.0, 0.0, 0), (1.0, 0.0, 0), (0.5, 0.0, 0))
    assert ucb1(node, c=5.0, alpha=0.5) == [0.0, 0.5, 0.25]  # log N(h) taken as 0 before the first visit
    assert best_edge(node, c=5.0, alpha=0.5) == 1
    with pytest.raises(ValueError, match="no edges"):
        best_edge(SearchNode("leaf"), 1.0, 0.5)


def test_backup_keeps_running_means_along_the_path():
    root, child = _node((1.0, 0.0, 0), (0.0, 0.0, 0)), _node((1.0, 0.0, 0))
    root.edges[0].child = child
    path = [(root, 0), (child, 0)]
    for r in (1.0, 0.0, 1.0):
        backup(path, r)
    for node in (root, child):
        assert node.edges[0].visits == 3 and node.edges[0].q_search == pytest.approx(2 / 3)
    assert root.visits == 3 and root.edges[1].visits == 0 and root.edges[1].q_search == 0.0
    backup([(root, 1)], 0.25)
    assert root.visits == 4 and root.edges[1].q_search == 0.25


def test_select_descends_to_the_first_unexecuted_edge():
    root = _node((1.0, 0.0, 0), (0.0, 0.0, 0), key="root")
    mid = _node((0.0, 0.0, 0), (1.0, 0.0, 0), key="mid")
    root.edges[0].child = mid
    path = select(root, c=1.0, alpha=0.5)
    assert [(n.key, i) for n, i in path] == [("root", 0), ("mid", 1)]  # the critic's best at each fresh node
    backup(path, 0.0)
    backup(path, 0.0)
    # root: edge 0 has Q 0.5·0 + 0.5·1 = 0.5 + sqrt(log 2 / 3) = 0.98; edge 1: 0 + sqrt(log 2) = 0.83 -> still 0
    assert [(n.key, i) for n, i in select(root, c=1.0, alpha=0.5)][0] == ("root", 0)
    # with c = 2 the unvisited edge's bonus 1.665 beats 0.5 + 0.961: root's edge 1, never executed, ends the path
    assert [(n.key, i) for n, i in select(root, c=2.0, alpha=0.5)] == [("root", 1)]
    end = SearchNode("end", terminal=True, reward=1.0)
    mid.edges[1].child = end
    assert select(root, c=1.0, alpha=0.5)[-1] == (mid, 1)  # a terminal child ends the path too
    assert [n.key for n in walk(root)] == ["root", "mid", "end"]


def test_node_pairs_by_blended_value_and_theta():
    # (critic, Q̃, visits); edge 3 never ran: it takes no part
    node = _node((0.0, 0.9, 2), (1.0, 0.5, 1), (0.5, 0.45, 3), (1.0, 0.0, 0))
    pure = node_pairs(node, alpha=1.0, theta=0.1)
    assert [(p.chosen, p.rejected) for p in pure] == [(0, 1), (0, 2)]
    assert [p.gap for p in pure] == pytest.approx([0.4, 0.45])
    assert len(node_pairs(node, alpha=1.0, theta=0.0)) == 3  # 0.5 vs 0.45 too
    # α = 0.5: blended 0.45, 0.75, 0.475 -> edge 1 wins both; 0.475 vs 0.45 is under θ
    blend = node_pairs(node, alpha=0.5, theta=0.1)
    assert [(p.chosen, p.rejected) for p in blend] == [(1, 0), (1, 2)]
    assert [p.gap for p in blend] == pytest.approx([0.3, 0.275])
    assert len(node_pairs(node, alpha=0.5, theta=0.1, min_visits=2)) == 0  # edges 0 and 2: 0.025 apart
    with pytest.raises(ValueError, match="theta"):
        node_pairs(node, alpha=0.5, theta=-0.1)


def test_critic_ranking_by_iterative_best_removal():
    hidden = [0.2, 0.9, 0.5, 0.7]
    offered_seen = []

    def pick(offered):
        offered_seen.append(list(offered))
        return max(range(len(offered)), key=lambda k: hidden[offered[k]])

    ranking, bad = iterative_ranking(4, pick)
    assert ranking == [1, 3, 2, 0] and bad == 0
    assert offered_seen == [[0, 1, 2, 3], [0, 2, 3], [0, 2]]  # the pick is removed and the rest asked again
    assert rank_values(ranking) == pytest.approx([0.0, 1.0, 1 / 3, 2 / 3])
    assert rank_values([0]) == [1.0]
    with pytest.raises(ValueError, match="permutation"):
        rank_values([0, 0, 1])

    answers = iter([CriticParseError("x"), 1, 0])  # one malformed answer, asked again

    def flaky(offered):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert iterative_ranking(3, flaky) == ([1, 0, 2], 1)

    def broken(offered):
        raise CriticParseError("never parses")

    assert iterative_ranking(3, broken, max_tries=2) == ([0, 1, 2], 2)  # proposal order kept, counted


@pytest.mark.parametrize("answer,expected", [("2", 1), (" Candidate 3. ", 2), ("(1)", 0), ("4", 3)])
def test_critic_answers_that_name_one_candidate(answer, expected):
    assert parse_choice(answer, 4) == expected


@pytest.mark.parametrize(
    "answer,message",
    [
        ("5", "not offered"),
        ("0", "not offered"),
        ("", "not a candidate"),
        ("2 because it buys", "not a candidate"),
        ("1 2", "not a candidate"),
        ("the second", "not a candidate"),
    ],
)
def test_critic_answers_that_are_not_a_choice(answer, message):
    with pytest.raises(CriticParseError, match=message):
        parse_choice(answer, 4)


def test_critic_prompt_numbers_the_offered_candidates():
    text = critic_prompt("buy a lamp", '[1] link "Lamp"', ["CLICK [1]", "STOP []", "GO_BACK"], [0, 2])
    assert "1. CLICK [1]\n2. GO_BACK" in text and "STOP" not in text


@pytest.mark.parametrize(
    "answer",
    ['{"scores": [90, 10, 0]}', '```json\n{"scores": [90, 10, 0]}\n```', "1: 90\n2: 10\n3: 0", "3: 0\n1: 90\n\n2 - 10"],
)
def test_judge_scores_in_either_form(answer):
    assert parse_scores(answer, 3) == [90, 10, 0]


@pytest.mark.parametrize(
    "answer,message",
    [
        ('{"scores": [90, 10]}', "2 scores for 3"),
        ('{"scores": [90, 10, 101]}', "outside"),
        ('{"scores": [90, 10, -1]}', "outside"),
        ('{"scores": [90, 10, 85.5]}', "not an integer"),
        ('{"scores": [90, 10, true]}', "not an integer"),
        ('{"scores": "90,10,0"}', 'no "scores" list'),
        ('{"scores": [90, 10, 0]', "invalid JSON"),
        ("1: 90\n2: 10", "missing \\[3\\]"),
        ("1: 90\n1: 80\n3: 0", "scored twice"),
        ("1: 90\n2: 10\n4: 0", "does not exist"),
        ("Candidate 1 is best: 90", "not a '<number>: <score>' line"),
        ("", "0 scores for 3"),
    ],
)
def test_judge_answers_that_are_not_scores(answer, message):
    with pytest.raises(JudgeParseError, match=message):
        parse_scores(answer, 3)


def test_judge_prompt_lists_the_reference_and_candidates():
    text = judge_prompt("Task: buy a lamp", "Command: CLICK [1]", ["Command: STOP []", "Command: CLICK [1]"])
    assert "Reference action (correct):\nCommand: CLICK [1]" in text and "2. Command: CLICK [1]" in text


def test_dpo_pairings_on_a_hand_made_step():
    step = ScoredStep(
        "s1",
        "Thought: a\nCommand: CLICK [3]",
        (
            "Thought: b\nCommand: CLICK [3]",  # the reference's command: never rejected against it
            "Thought: c\nCommand: CLICK [5]",  # 30 \ one action, mean 40
            "Thought: d\nCommand: click [5]",  # 50 /
            "Thought: e\nCommand: TYPE [2] [x]",
            "Command: STOP []",
        ),
        (95, 30, 50, 0, 85),
    )
    d1 = dpo1_pairs(step)
    assert [(command_key(p.rejected), p.rejected_score) for p in d1] == [("CLICK [5]", 40.0), ("TYPE [2] [x]", 0.0)]
    assert all(p.chosen == step.reference and p.chosen_score is None for p in d1)
    d2 = dpo2_pairs(step)  # four distinct scores 95, 40, 0, 85: every two of them
    assert len(d2) == 6 and all(p.chosen_score > p.rejected_score for p in d2)
    wide = {(command_key(p.chosen), command_key(p.rejected)) for p in dpo2_pairs(step, min_gap=50)}
    assert wide == {("CLICK [3]", "CLICK [5]"), ("CLICK [3]", "TYPE [2] [x]"), ("STOP []", "TYPE [2] [x]")}
    good = ScoredStep("s2", "Command: STOP []", ("Command: STOP []", "Command: GO_BACK"), (100, 80))
    assert dpo1_pairs(good) == [] and len(dpo2_pairs(good)) == 1
    assert [len(judge_pairs([step, good], m)) for m in ("dpo1", "dpo2", "dpo3")] == [2, 7, 9]
    with pytest.raises(ValueError, match="mode"):
        judge_pairs([step], "dpo4")
    with pytest.raises(ValueError, match="candidates"):
        ScoredStep("s3", "x", ("a", "b"), (1,))


def test_the_reference_judge_scores_the_recorded_actions_command_and_nothing_else():
    """The built-in judge (no endpoint): 100 for a candidate with the reference's command (whatever its thought,
    however its verb is cased), 0 for another command or an output without a valid one; DPO-2 then pairs the first
    against the second kind only."""
    from trees.judge_pairs import ReferenceJudge

    judge = ReferenceJudge()
    ref = "Thought: buy it\nCommand: CLICK [9]"
    cands = [
        "Thought: other words\nCommand: click [9]",
        "Thought: add\nCommand: CLICK [10]",
        "no command at all",
        "Command: CLICK [9] extra",
    ]
    scores = judge.score("page", ref, cands)
    assert scores == [100, 0, 0, 0]  # the last one's command line does not parse: it is its own text
    assert judge.calls == 1 and judge.malformed == judge.hits == 0 and judge.model == "reference"
    step = ScoredStep("s", ref, tuple(cands[:3]), tuple(scores[:3]))
    assert [command_key(p.rejected) for p in dpo1_pairs(step)] == ["CLICK [10]", "no command at all"]
    assert {(command_key(p.chosen), command_key(p.rejected)) for p in dpo2_pairs(step)} == {
        ("CLICK [9]", "CLICK [10]"),
        ("CLICK [9]", "no command at all"),
    }


def test_step_judge_retries_malformed_answers_caches_and_bounds_concurrency(tmp_path):
    import asyncio

    from rollout.judge import StepJudge

    bad_once: set[str] = set()

    def judge(text):  # 100 for the reference's command, 10 otherwise; the first answer to each prompt is prose
        if text not in bad_once:
            bad_once.add(text)
            return "The first candidate looks best."
        ref = text.split("Reference action (correct):\n", 1)[1].split("\n", 1)[0]
        return json.dumps({"scores": [100 if c == ref else 10 for c in listed(text, "Candidates:\n")]})

    server = ChatServer(judge, delay_s=0.05)
    cache = str(tmp_path / "judge.jsonl")
    try:
        j = StepJudge(server.url, "judge", cache_path=cache, concurrency=2)
        assert j.score("Task: t", "CLICK [1]", ["CLICK [2]", "CLICK [1]"]) == [10, 100]
        assert (j.calls, j.malformed, j.failed) == (2, 1, 0)
        assert j.score("Task: t", "CLICK [1]", ["CLICK [2]", "CLICK [1]"]) == [10, 100] and j.hits == 1
        assert len(server.prompts) == 2  # the cached step asked nothing

        async def many():
            return await asyncio.gather(*[j.ascore(f"Task: {k}", "STOP []", ["STOP []", "GO_BACK"]) for k in range(6)])

        assert asyncio.run(many()) == [[100, 10]] * 6
        assert server.max_in_flight <= 2 and len(server.prompts) == 2 + 12
        again = StepJudge(server.url, "judge", cache_path=cache)  # a later run reads the cache back
        assert len(again.cache) == 7 and again.score("Task: 3", "STOP []", ["STOP []", "GO_BACK"]) == [100, 10]
        assert again.calls == 0
        with open(cache, "a") as f:
            f.write('{"key": "torn')  # a killed run's last write
        resumed = StepJudge(server.url, "judge", cache_path=cache)
        assert len(resumed.cache) == 7  # the torn row is cut off ...
        assert resumed.score("Task: after", "STOP []", ["GO_BACK"]) == [10]  # ... so a new row starts its own line
        assert len(StepJudge(server.url, "judge", cache_path=cache).cache) == 8
        with open(cache, "a") as f:
            f.write('{"key": "x", "scores": [1\n{"key": "y", "scores": [1]}\n')  # damage inside the file
        with pytest.raises(ValueError, match="line 9"):
            StepJudge(server.url, "judge", cache_path=cache)
        never = StepJudge(server.url, "other-judge", max_tries=1)  # another model: another cache key, asked anew
        assert never.score("Task: fresh", "STOP []", ["GO_BACK"]) is None and (never.failed, never.malformed) == (1, 1)
    finally:
        server.close()


def test_model_critic_ranks_by_asking_for_the_best_of_the_rest():
    from rollout.search.critic import ModelCritic

    def critic(text):  # prefers longer commands; the first round's first answer is out of range
        offered = listed(text, "Candidates:\n")
        if len(offered) == 4 and not critic.bad:
            critic.bad = True
            return "7"
        return str(1 + max(range(len(offered)), key=lambda k: len(offered[k])))

    critic.bad = False
    server = ChatServer(critic)
    try:
        c = ModelCritic(server.url, "critic")
        ranking, bad = c.rank("buy", "page", ["STOP []", "TYPE [2] [long text]", "CLICK [3]", "GOTO /cart"])
        assert ranking == [1, 3, 2, 0] and bad == 1 and c.calls == 4  # 3 rounds + 1 retried answer
        assert math.isclose(rank_values(ranking)[1], 1.0)
    finally:
        server.close()


def test_judge_records_derive_the_recipes_pairs():
    from tgpo_jax.data.examples import PairConfig, preference_pairs
    from trees.judge_pairs import judge_records

    step = ScoredStep(
        "s1",
        "Thought: a\nCommand: CLICK [3]",
        (
            "Thought: b\nCommand: CLICK [3]",
            "Thought: c\nCommand: CLICK [5]",
            "Thought: d\nCommand: click [5]",
            "Thought: e\nCommand: TYPE [2] [x]",
            "Command: STOP []",
        ),
        (95, 30, 50, 0, 85),
    )
    prompt = [{"role": "user", "content": "Task: t"}]
    (d1,) = judge_records(step, prompt, "task", "dpo1")
    (d2,) = judge_records(step, prompt, "task", "dpo2")
    assert d1.value_source == d2.value_source == "judge"

    def texts(rec, margin=0.0):
        return {
            (command_key(rec.branches[p.chosen].action), command_key(rec.branches[p.rejected].action))
            for p in preference_pairs(rec, PairConfig(margin=margin))
        }

    assert texts(d1) == {(command_key(p.chosen), command_key(p.rejected)) for p in dpo1_pairs(step)}
    assert texts(d2) == {(command_key(p.chosen), command_key(p.rejected)) for p in dpo2_pairs(step)}
    wide = {(command_key(p.chosen), command_key(p.rejected)) for p in dpo2_pairs(step, min_gap=50)}
    assert texts(d2, margin=0.5 - 1e-9) == wide  # DPO-2's min_gap is the pair margin on score / 100
    assert len(judge_records(step, prompt, "task", "dpo3")) == 2
    same = ScoredStep("s2", "Command: STOP []", ("Command: STOP []", "Command: GO_BACK"), (90, 90))
    assert judge_records(same, prompt, "task", "dpo3") == []  # nothing below 80, no score differs: no record
    assert NodeRecord.from_bytes(d1.to_bytes()) == d1


def test_judge_dataset_from_a_collection_with_sampler_and_judge_servers(tmp_path):
    """Every step of the successful synthetic episodes: K candidates from a sampling server (by seed), scored by a
    judge server against the recorded action, written as DPO-3 records; a judge answering prose for one step
    leaves that step out, counted."""
    from tgpo_jax.data.examples import preference_pairs
    from tgpo_jax.data.io import DatasetReader
    from trees.dataset import BuildConfig, load_episodes
    from trees.judge_dataset import JudgeDataConfig, build_judge_dataset
    from trees.synthetic import write_synthetic_collection
    from rollout.judge import StepJudge

    col = str(tmp_path / "col")
    write_synthetic_collection(col, num_tasks=3, runs=2, seed=0)
    by_task, _ = load_episodes(col)
    good = [(ep, s) for eps in by_task.values() for ep in eps if ep.summary["success"] for s in ep.steps]
    assert good
    seeds = []

    def sampler(body):  # the seed decides: half the draws repeat the recorded action's command, half STOP
        seeds.append(body["seed"])
        assert body["temperature"] == 0.7 and body["top_k"] == 10 and body["top_p"] == 0.9
        return "Thought: guess\nCommand: CLICK [1]" if body["seed"] % 2 else "Thought: stop\nCommand: STOP []"

    def judge(text):
        if "Home" in text and "prose" not in judge.seen:  # one page: the judge answers prose (then asked again)
            judge.seen.add("prose")
            return "These look fine."

        def cmd(line):  # a one-line output: "Thought: … | Command: CLICK [1]"
            return line.rsplit("Command:", 1)[-1].strip()

        ref = cmd(text.split("Reference action (correct):\n", 1)[1].split("\n", 1)[0])
        return json.dumps({"scores": [100 if cmd(c) == ref else 20 for c in listed(text, "Candidates:\n")]})

    judge.seen = set()
    samp, jud = ChatServer(None, body_answer=sampler), ChatServer(judge)
    try:
        out = str(tmp_path / "ds")
        summary = build_judge_dataset(
            col,
            out,
            BuildConfig(num_shards=1),
            JudgeDataConfig(k=4, mode="dpo3"),
            samp.url,
            "policy",
            StepJudge(jud.url, "judge", max_tries=2),
            progress=False,
        )
        first = list(seeds)
        import subprocess
        import sys

        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "launch.build_dataset",
                f"--episodes={col}",
                f"--out={tmp_path / 'cli'}",
                "--values=judge",
                f"--sample_url={samp.url}",
                "--sample_model=policy",
                f"--judge_url={jud.url}",
                "--judge_model=judge",
                "--judge_k=4",
                "--num_shards=1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        assert cli.returncode == 0, cli.stderr[-2000:]
    finally:
        samp.close()
        jud.close()
    assert summary["steps"] == len(good) and summary["unscored"] == 0 and summary["judge_malformed"] == 1
    assert len(first) == 4 * len(good) and len(set(first)) > len(good)  # distinct seeds per step
    assert seeds[len(first) :] == first  # the command line draws the same candidates
    recs = list(DatasetReader(out))
    assert recs and all(r.value_source == "judge" for r in recs) and len(recs) == summary["records"]
    assert list(DatasetReader(str(tmp_path / "cli"))) == recs  # the command line builds the same records
    for r in recs:
        pairs = preference_pairs(r)
        assert pairs and all(r.branches[p.chosen].q > r.branches[p.rejected].q for p in pairs)
        if r.meta["judge"] == "dpo1":  # the recorded action against every candidate the judge scored under 80
            assert all(p.chosen == 0 for p in pairs) and r.branches[0].q == 1.0
