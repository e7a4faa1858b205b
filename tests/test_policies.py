"""Policies: prompt budget, the batched model policy, the OpenAI-compatible server and its client (the oracle's
thoughts: test_oracle_thoughts.py)."""

import asyncio
import dataclasses
import json
import re
import socket
import threading
import time
import urllib.request

import load_helpers as lh
import pytest

from rollout.core import ErrorInfo, HistoryItem, Observation, PolicyRequest, Task
from rollout.policies.http import OpenAIPolicy, PolicyError
from rollout.policies.model import ModelPolicy, cut_after_command
from rollout.policies.prompt import (
    SYSTEM_PROMPTS,
    PromptConfig,
    ANSWER_CUE,
    KEEP_RECENT,
    SYSTEM_PROMPT,
    build_messages,
    command_end,
    messages_for,
    observation_text,
    prompt_ids,
)
from serving.serve import ModelServer
from tgpo_jax.models.config import tiny_config
from tgpo_jax.models.loading import flat_params, model_from_flat
from tgpo_jax.models.sampler import Completion, Sampler, SamplingParams
from tgpo_jax.models.tokenizer import chat_ids
from tgpo_jax.models.transformer import init_model

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
BUDGET = 300
SYS = "You are a web agent. Answer with 'Thought: ...' then 'Command: ...'."  # short: the test tokenizer is ~char-level


def make_request(n_history=3, page_lines=12, step=None, key="t0/0", instruction="search for red running shoes"):
    task = Task(
        task_id="t0",
        env="shop",
        family="webshop",
        instruction=instruction,
        start_path="/",
        optimal_steps=4,
        split="train",
    )
    text = "\n".join(f"[{i}] link 'Item {i} red running shoes {i * 3} dollars'" for i in range(page_lines))
    obs = Observation(
        url="http://127.0.0.1:1/search?q=shoes",
        title="Results",
        text=text,
        elements=(),
        error=ErrorInfo("no_such_element", "no element [99]") if n_history else None,
    )
    hist = tuple(
        HistoryItem(
            command=f"CLICK [{i}]",
            thought=f"step {i} thought " + "x" * 300,
            error="no_such_element" if i % 3 == 2 else None,
        )
        for i in range(n_history)
    )
    return PolicyRequest(
        task=task, observation=obs, history=hist, step=len(hist) if step is None else step, episode_key=key, seed=0
    )


@pytest.fixture(scope="module")
def sampler(spm_tokenizer):
    cfg = tiny_config(
        "llama", vocab_size=len(spm_tokenizer), eos_token_id=spm_tokenizer.eos_token_id, max_position_embeddings=1024
    )
    m = init_model(cfg, seed=0)
    model = model_from_flat(cfg, {p: v * (1.0 if "norm" in p else 6.0) for p, v in flat_params(m).items()})
    return Sampler(model, spm_tokenizer, bucket=BUDGET + 20)  # one prompt bucket: few compiles


# ---------------------------------------------------------------- prompt
def test_prompt_keeps_newest_history_and_page_within_budget(spm_tokenizer):
    req = make_request(n_history=20)
    full = build_messages(req, prompt=PromptConfig(budget_tokens=100000), tokenizer=spm_tokenizer)
    assert full[0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = full[1]["content"]
    assert user.startswith("Task: search for red running shoes\n\nPrevious actions:\n1. CLICK [0] | step 0 thought")
    assert "omitted" not in user
    assert user.endswith("Current page:\n" + observation_text(req.observation) + "\n\n" + ANSWER_CUE)
    assert "3. CLICK [2] | step 2 thought" in user and "(error: no_such_element)" in user
    assert "x" * 200 not in user and "…" in user  # thoughts cut to thought_chars
    n_full = len(chat_ids(spm_tokenizer, full))
    budget = n_full - 200
    msgs = build_messages(req, prompt=PromptConfig(budget_tokens=budget), tokenizer=spm_tokenizer)
    assert len(chat_ids(spm_tokenizer, msgs)) <= budget
    user = msgs[1]["content"]
    assert user.endswith(observation_text(req.observation) + "\n\n" + ANSWER_CUE)  # the page is whole
    kept = [i for i in range(20) if f"{i + 1}. CLICK [{i}] " in user]
    assert kept and kept == list(range(20 - len(kept), 20))  # the newest, oldest dropped first
    assert f"({20 - len(kept)} earlier actions omitted)" in user
    # one more item would not fit: as few dropped as possible
    assert (
        build_messages(req, prompt=PromptConfig(budget_tokens=budget), tokenizer=spm_tokenizer) == msgs
    )  # deterministic
    assert prompt_ids(req, spm_tokenizer, prompt=PromptConfig(budget_tokens=budget)) == chat_ids(spm_tokenizer, msgs)


def test_prompt_cuts_the_page_from_its_end_after_the_old_history(spm_tokenizer):
    """Oldest items go first, down to the last KEEP_RECENT; then the page is cut; the recent items stay."""
    req = make_request(n_history=KEEP_RECENT + 3, page_lines=80)
    no_hist = build_messages(
        make_request(n_history=0, page_lines=80), prompt=PromptConfig(budget_tokens=10**6), tokenizer=spm_tokenizer
    )
    budget = len(chat_ids(spm_tokenizer, no_hist)) // 2
    msgs = build_messages(req, prompt=PromptConfig(budget_tokens=budget, thought_chars=0), tokenizer=spm_tokenizer)
    n = len(chat_ids(spm_tokenizer, msgs))
    assert budget - 30 <= n <= budget
    user = msgs[1]["content"]
    assert "(3 earlier actions omitted)" in user and "CLICK [2]" not in user
    assert all(
        re.search(rf"^{i + 1}\. CLICK \[{i}\]( \(error: \w+\))?$", user, re.M) for i in range(3, KEEP_RECENT + 3)
    )
    assert " | " not in user  # thought_chars=0: commands only, not a cut thought ('| …') on every line
    page = user.split("Current page:\n", 1)[1]
    head, note = page.split("\n[... page text cut", 1)
    assert note.endswith(ANSWER_CUE)
    assert observation_text(req.observation).startswith(head) and len(head) > 100
    # a budget the recent items alone overflow: they go too, and the page is cut after them
    tight = (
        len(
            chat_ids(
                spm_tokenizer,
                build_messages(
                    make_request(n_history=0, page_lines=0),
                    prompt=PromptConfig(budget_tokens=10**6),
                    tokenizer=spm_tokenizer,
                ),
            )
        )
        + 40
    )
    msgs = build_messages(req, prompt=PromptConfig(budget_tokens=tight, thought_chars=0), tokenizer=spm_tokenizer)
    assert len(chat_ids(spm_tokenizer, msgs)) <= tight
    assert f"({KEEP_RECENT + 3 - 1} earlier actions omitted)" in msgs[1]["content"]  # only the newest fits
    # without a tokenizer: about 4 characters a token
    est = build_messages(req, prompt=PromptConfig(budget_tokens=budget, thought_chars=0))
    assert sum(len(m["content"]) for m in est) <= 4 * budget


def test_history_last_moves_the_previous_actions_after_the_page_and_keep_recent_bounds_them(spm_tokenizer):
    """history_last: the same lines, the previous actions between the page and the answer cue; keep_recent: how
    many items stay before the page is cut (the default's and history_last's truncation agree item for item)."""
    req = make_request(n_history=KEEP_RECENT + 3, page_lines=80)
    first = build_messages(req, prompt=PromptConfig(budget_tokens=10**6, thought_chars=0), tokenizer=spm_tokenizer)[1][
        "content"
    ]
    last = build_messages(
        req, prompt=PromptConfig(budget_tokens=10**6, thought_chars=0, history_last=True), tokenizer=spm_tokenizer
    )[1]["content"]
    task, done, seen, cue = re.fullmatch(
        r"(Task: .*?)\n\n(Previous actions:.*?)\n\n(Current page:.*)\n\n(.*)", first, re.S
    ).groups()
    assert last == "\n\n".join([task, seen, done, cue]) and cue == ANSWER_CUE
    no_hist = build_messages(
        make_request(n_history=0, page_lines=80), prompt=PromptConfig(budget_tokens=10**6), tokenizer=spm_tokenizer
    )
    budget = len(chat_ids(spm_tokenizer, no_hist)) // 2
    for keep in (KEEP_RECENT, 2, 0):
        cut = [
            build_messages(
                req,
                prompt=PromptConfig(budget_tokens=budget, thought_chars=0, keep_recent=keep, history_last=h),
                tokenizer=spm_tokenizer,
            )[1]["content"]
            for h in (False, True)
        ]
        for user in cut:
            assert f"({KEEP_RECENT + 3 - keep} earlier actions omitted)" in user and "[... page text cut" in user
            assert len(re.findall(r"^\d+\. CLICK", user, re.M)) == keep
        assert sorted(cut[0].splitlines()) == sorted(cut[1].splitlines())
    # fewer items kept: more of the page
    pages = [
        len(
            build_messages(
                req, prompt=PromptConfig(budget_tokens=budget, thought_chars=0, keep_recent=k), tokenizer=spm_tokenizer
            )[1]["content"]
            .split("Current page:")[1]
            .split("[... page")[0]
        )
        for k in (KEEP_RECENT, 2)
    ]
    assert pages[1] > pages[0]
    with pytest.raises(ValueError, match="keep_recent"):
        build_messages(req, prompt=PromptConfig(keep_recent=-1))


def test_text_first_leaves_out_the_fewest_text_lines_from_the_end_before_any_element():
    """page_cut='text_first': every element line stays while the text-only lines can make room, the ones left out
    are the last ones (the fewest that fit: one more line back overflows), the header stays; when even no text lines
    leave no room, the element lines are cut from the end as page_cut='end' cuts; the default cut is unchanged."""
    from rollout.policies.prompt import CUT_NOTE, count_tokens, messages_for, text_lines, without_lines

    page = "\n".join(
        [
            "URL: http://shop/item/3",
            "Title: A pillow",
            '[1] link "Home"',
            'text "Bedding > Pillows"',
            'heading "A pillow"',
            'text "Price: $43.65"',
            '[2] combobox "size" value="s" options=["s","m"]',
            '[3] button "Add to cart"',
        ]
        + [f'text "feature number {i} of this pillow"' for i in range(12)]
        + ['[4] link "Next >"']
    )
    assert text_lines(page) == [3, 4, 5] + list(range(8, 20))
    kw = dict(system_prompt="sys", thought_chars=0)
    full = count_tokens(messages_for("Buy it.", [], page, prompt=PromptConfig(budget_tokens=10**6, **kw)))
    budget = full - 40
    user = messages_for("Buy it.", [], page, prompt=PromptConfig(budget_tokens=budget, page_cut="text_first", **kw))[1][
        "content"
    ]
    shown = user.split("Current page:\n")[1].split(CUT_NOTE)[0]
    assert all(line in shown for line in page.splitlines() if "[" in line) and shown.startswith("URL:")
    texts = text_lines(page)
    k = next(k for k in range(len(texts) + 1) if shown == without_lines(page, texts[len(texts) - k :]))
    assert 0 < k < len(texts)
    back = messages_for(
        "Buy it.",
        [],
        without_lines(page, texts[len(texts) - k + 1 :]) + CUT_NOTE,
        prompt=PromptConfig(budget_tokens=10**6, **kw),
    )
    assert count_tokens(back) > budget  # one line fewer left out does not fit
    end = messages_for("Buy it.", [], page, prompt=PromptConfig(budget_tokens=budget, **kw))[1]["content"]
    assert (
        end
        == messages_for("Buy it.", [], page, prompt=PromptConfig(budget_tokens=budget, page_cut="end", **kw))[1][
            "content"
        ]
    )
    assert '[4] link "Next >"' not in end  # the end cut loses the last element
    # no room even without the text: the elements are cut from their end
    elements = without_lines(page, texts)
    tight = count_tokens(messages_for("Buy it.", [], elements, prompt=PromptConfig(budget_tokens=10**6, **kw))) - 5
    user = messages_for("Buy it.", [], page, prompt=PromptConfig(budget_tokens=tight, page_cut="text_first", **kw))[1][
        "content"
    ]
    shown = user.split("Current page:\n")[1].split(CUT_NOTE)[0]
    assert elements.startswith(shown) and len(shown) < len(elements) and "text " not in shown
    with pytest.raises(ValueError, match="page_cut"):
        messages_for("Buy it.", [], page, prompt=PromptConfig(page_cut="middle", **kw))


def test_page_ids_after_the_name():
    """page_ids='after' moves each element's id behind its role and quoted name (escaped quotes included) and
    leaves every other line alone; the prompt carries the moved page, and an unknown form is an error."""
    from rollout.policies.prompt import page_form

    page = (
        'URL: http://x/\ntext "Click on the \\"okay\\" button."\n[1] button "okay"\n'
        '  [6] combobox "color" value="black" options=["a","b"]\n[12] link "a \\"q\\" b"\nheading "[3] x"'
    )
    assert page_form(page) == page
    assert page_form(page, "after").splitlines() == [
        "URL: http://x/",
        'text "Click on the \\"okay\\" button."',
        'button "okay"[1]',
        '  combobox "color"[6] value="black" options=["a","b"]',
        'link "a \\"q\\" b"[12]',
        'heading "[3] x"',
    ]
    with pytest.raises(ValueError, match="page_ids"):
        page_form(page, "middle")
    req = make_request(n_history=0, page_lines=2)
    user = build_messages(req, prompt=PromptConfig(budget_tokens=10**6, page_ids="after"))[1]["content"]
    assert "link 'Item 1" in user  # single-quoted names are no element line of the renderer: unchanged
    assert (
        messages_for("t", (), page, prompt=PromptConfig(page_ids="after"))[1]["content"].count('button "okay"[1]') == 1
    )


def test_command_end_and_cut(spm_tokenizer):
    assert command_end("Thought: go\nCommand: CLICK [3]") is None
    assert command_end("Thought: go\nCommand: CLICK [3]\n") is None
    text = "Thought: go\nCommand: CLICK [3]\nThought: more\nCommand: GO_BACK"
    assert text[: command_end(text)] == "Thought: go\nCommand: CLICK [3]"
    toks = spm_tokenizer(text, add_special_tokens=False)["input_ids"]
    c = cut_after_command(Completion(toks, [-0.5] * len(toks), text, "length"), spm_tokenizer)
    assert c.text == "Thought: go\nCommand: CLICK [3]" and c.finish_reason == "stop"
    assert spm_tokenizer.decode(c.tokens).startswith(c.text + "\n") and len(c.logprobs) == len(c.tokens) < len(toks)
    # a command without free text ends at its closing bracket even where the line runs on
    for tail, want in (
        ("CLICK [7] [11]", "CLICK [7]"),
        ("CLICK [7].", "CLICK [7]"),
        ("GO_BACK now", "GO_BACK"),
        ("SCROLL [DOWN] x", "SCROLL [DOWN]"),
        ("CLICK [7]", None),
        ("TYPE [2] [a] [b]", None),
        ("GO_BACKWARD", None),
        ("STOP [] x", None),
        ("CLEAR [3] y", "CLEAR [3]"),
        ("GO_BACK[3]", None),
        ("GO_BACK2 x", None),
        ("CLICK x", None),
    ):
        text = "Thought: go\nCommand: " + tail
        cut = command_end(text)
        assert (text[:cut] if cut is not None else None) == (None if want is None else "Thought: go\nCommand: " + want)
    text = "Thought: go\nCommand: CLICK [7] [12 Unsalted11]"
    toks = spm_tokenizer(text, add_special_tokens=False)["input_ids"]
    c = cut_after_command(Completion(toks, [-0.5] * len(toks), text, "length"), spm_tokenizer)
    assert c.text == "Thought: go\nCommand: CLICK [7]" and len(c.tokens) < len(toks)
    assert spm_tokenizer.decode(c.tokens).startswith(c.text)


# ---------------------------------------------------------------- the model policy
class CountingSampler:
    def __init__(self, inner):
        self.inner, self.calls, self.cfg = inner, [], inner.cfg

    def generate(self, prompts, params, row_seeds=None):
        self.calls.append(len(prompts))
        return self.inner.generate(prompts, params, row_seeds=row_seeds)


def test_model_policy_batches_concurrent_requests(sampler, spm_tokenizer):
    reqs = [make_request(n_history=i, page_lines=4 + i, key=f"t{i}/0") for i in range(4)]
    counting = CountingSampler(sampler)
    policy = ModelPolicy(
        counting,
        spm_tokenizer,
        prompt=PromptConfig(budget_tokens=BUDGET, system_prompt=SYS),
        params=GREEDY,
        max_batch=8,
    )

    async def main():
        outs = await asyncio.gather(*(policy.act(r) for r in reqs))
        await policy.close()
        return outs

    t0 = time.perf_counter()
    outs = asyncio.run(main())
    print(f"batched act x4: {time.perf_counter() - t0:.2f}s (compile included)")
    assert counting.calls == [4]
    for r, out in zip(reqs, outs):
        ids = prompt_ids(r, spm_tokenizer, prompt=PromptConfig(budget_tokens=BUDGET, system_prompt=SYS))
        assert BUDGET - 40 <= len(ids) <= BUDGET or r.history == ()  # the budget binds
        direct = sampler.generate([ids], GREEDY)[0]
        assert out.text == direct.text
        assert out.logprob == pytest.approx(sum(direct.logprobs), abs=1e-4)
        assert out.num_tokens == len(direct.tokens)
        assert out.info["prompt_tokens"] == len(ids) and out.info["batch_size"] == 4
        assert out.info["finish_reason"] == direct.finish_reason


def test_model_policy_errors_reach_every_caller(spm_tokenizer):
    class Broken:
        def generate(self, prompts, params, row_seeds=None):
            raise RuntimeError("device on fire")

    policy = ModelPolicy(Broken(), spm_tokenizer, prompt=PromptConfig(budget_tokens=BUDGET), params=GREEDY)

    async def main():
        res = await asyncio.wait_for(
            asyncio.gather(*(policy.act(make_request(key=f"k{i}")) for i in range(3)), return_exceptions=True),
            timeout=30,
        )
        await policy.close()
        with pytest.raises(PolicyError, match="closed"):
            await policy.act(make_request())
        return res

    res = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "device on fire" in str(r) for r in res)


# ---------------------------------------------------------------- server + OpenAI client
@pytest.fixture(scope="module")
def server(sampler, spm_tokenizer):
    s = ModelServer(sampler, spm_tokenizer, "tiny")
    s.start()
    yield s
    s.stop()


def test_a_server_from_a_saved_model_answers_as_the_model_does(sampler, spm_tokenizer, tmp_path):
    from flax import nnx

    from tgpo_jax.models.hf_export import export_hf

    export_hf(nnx.merge(sampler.graphdef, sampler.state), str(tmp_path / "m"), spm_tokenizer)
    ids = chat_ids(
        spm_tokenizer,
        build_messages(make_request(n_history=1), prompt=PromptConfig(budget_tokens=BUDGET // 2, system_prompt=SYS)),
    )
    with ModelServer.from_path(str(tmp_path / "m"), "saved") as s:
        assert s.model_name == "saved" and s.sampler.cfg.eos_token_id == spm_tokenizer.eos_token_id
        assert s.sampler.generate([ids], GREEDY)[0].tokens == sampler.generate([ids], GREEDY)[0].tokens


def test_server_round_trip_matches_direct_sampling(server, sampler, spm_tokenizer):
    req = make_request(n_history=2)
    policy = OpenAIPolicy(
        server.base_url + "/v1",
        "tiny",
        prompt=PromptConfig(budget_tokens=BUDGET // 2, system_prompt=SYS),
        temperature=0.0,
        max_tokens=GREEDY.max_tokens,
        retries=0,
    )
    t0 = time.perf_counter()
    out = asyncio.run(policy.act(req))
    print(f"http act: {time.perf_counter() - t0:.2f}s")
    ids = chat_ids(spm_tokenizer, out.info["messages"])
    assert out.info["messages"] == build_messages(
        req, prompt=PromptConfig(budget_tokens=BUDGET // 2, system_prompt=SYS)
    )
    direct = sampler.generate([ids], GREEDY)[0]
    assert out.text == direct.text
    assert out.logprob == pytest.approx(sum(direct.logprobs), abs=1e-4)
    assert out.num_tokens == len(direct.tokens) and out.info["prompt_tokens"] == len(ids)

    def get(path):
        with urllib.request.urlopen(server.base_url + path, timeout=10) as r:
            return json.loads(r.read())

    assert get("/health")["status"] == "ok"
    assert get("/v1/models")["data"][0]["id"] == "tiny"
    body = {"model": "tiny", "prompt": "CLICK [12]", "max_tokens": 5, "temperature": 0, "logprobs": 0}
    r = urllib.request.Request(
        server.base_url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(r, timeout=30) as resp:
        d = json.loads(resp.read())
    pids = spm_tokenizer("CLICK [12]", add_special_tokens=False)["input_ids"]
    c = sampler.generate([pids], SamplingParams(temperature=0.0, max_tokens=5))[0]
    assert d["object"] == "text_completion" and d["choices"][0]["text"] == c.text
    assert d["usage"] == {
        "prompt_tokens": len(pids),
        "completion_tokens": len(c.tokens),
        "total_tokens": len(pids) + len(c.tokens),
    }
    assert d["choices"][0]["logprobs"]["token_logprobs"] == pytest.approx(c.logprobs, abs=1e-4)


def test_server_rejects_n2_with_a_clear_error(server):
    policy = OpenAIPolicy(
        server.base_url,
        "tiny",
        prompt=PromptConfig(budget_tokens=BUDGET),
        retries=3,
        backoff_s=10.0,
        extra_body={"n": 2},
    )
    posts, inner = [], policy._post_once
    policy._post_once = lambda body: (posts.append(1), inner(body))[1]
    with pytest.raises(PolicyError, match="400.*only n=1") as e:
        asyncio.run(policy.act(make_request()))
    assert e.value.status == 400 and len(posts) == 1  # 4xx: no retries
    bad = OpenAIPolicy(server.base_url, "other-model", prompt=PromptConfig(budget_tokens=BUDGET), retries=0)
    with pytest.raises(PolicyError, match="404.*other-model"):
        asyncio.run(bad.act(make_request()))


def _raw(base_url: str, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    host, port = base_url.split("//")[1].split(":")
    return lh.exchange(host, int(port), data, timeout)


@pytest.mark.parametrize(
    "body,status,message",
    [
        (b'{"prompt": "a", "max_tokens": 2, "temperature": NaN}', 400, b"finite number"),
        (b'{"prompt": "a", "max_tokens": 2, "temperature": Infinity}', 400, b"finite number"),
        (b'{"prompt": [1, 99999999], "max_tokens": 2}', 400, b"token ids must be in"),
        (b'{"prompt": [-1], "max_tokens": 2}', 400, b"token ids must be in"),
        (b'{"prompt": "a", "max_tokens": 9223372036854775808}', 400, b"max_tokens"),
        (b'{"prompt": "a", "max_tokens": 2, "seed": 9223372036854775808}', 200, b"text_completion"),
        (b'{"prompt": "a", "max_tokens": 2, "seed": 99999999999999999999999}', 400, b"seed"),
        (b"[" * 100000 + b"]" * 100000, 400, b"nested too deeply"),
    ],
)
def test_server_answers_hostile_fields_with_a_4xx(server, body, status, message):
    # the 200 cases generate (the first may compile): the timeout only catches a hang, so it leaves room for a loaded
    # machine (10 s timed out with two pipelines beside the suite)
    code, answer = _raw(server.base_url, lh.post("/v1/completions", body), timeout=120.0)
    assert code == status and message in answer, answer[:300]


@pytest.mark.parametrize("length,status", [("1000000000000", 413), ("-1", 400), ("1e12", 400)])
def test_server_refuses_bodies_it_should_not_read(server, length, status):
    t0 = time.perf_counter()
    code, answer = _raw(server.base_url, lh.post("/v1/completions", b"{}", length))
    assert code == status and time.perf_counter() - t0 < 5, answer  # at once: nothing read, no thread held


def _hold_slots(port: int, n: int) -> list[socket.socket]:
    """``n`` idle connections that each hold a server slot. One answered 503 and closed (a slot still held by an
    earlier request's thread, on a loaded machine) reads as readable; it is replaced until ``n`` are held."""
    import select

    held: list[socket.socket] = []
    for _ in range(20):
        held += [socket.create_connection(("127.0.0.1", port)) for _ in range(n - len(held))]
        time.sleep(0.3)
        turned = set(select.select(held, [], [], 0)[0])
        for c in turned:
            c.close()
        held = [c for c in held if c not in turned]
        if len(held) == n:
            return held
    raise AssertionError(f"could not hold {n} server slots")


def _dropped(c: socket.socket, timeout: float) -> bool:
    """Whether the server closes ``c`` within ``timeout`` seconds."""
    c.settimeout(timeout)
    try:
        while c.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_server_bounds_connections_drops_idle_ones_and_checks_the_key(sampler, spm_tokenizer):
    import threading

    with pytest.raises(ValueError, match="allow_remote"):
        ModelServer(sampler, spm_tokenizer, "tiny", host="0.0.0.0")
    # The idle timeout leaves seconds of slack: CI's two test processes load the machine, and an idle socket
    # dropped before the fourth connection arrives would free a slot (a CI run failed on a 1 s timeout).
    timeout = 3.0
    s = ModelServer(sampler, spm_tokenizer, "tiny", max_connections=3, socket_timeout=timeout, api_key="sesame")
    base = s.start()
    try:
        threads0 = threading.active_count()
        health = b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\nConnection: close\r\n\r\n"
        assert _raw(base, health)[0] == 200
        assert _raw(base, health.replace(b"sesame", b"wrong"))[0] == 401
        assert _raw(base, lh.post("/v1/completions", b'{"prompt": "a"}'))[0] == 401  # no key
        idle = _hold_slots(s.port, 3)  # hold every slot
        assert _raw(base, health)[0] == 503  # a fourth is turned away, not given a thread
        assert all(_dropped(c, 4 * timeout) for c in idle)  # the idle sockets time out and free their threads
        short = lh.post("/v1/completions", b'{"prompt": "a"}', "100")  # promises 100 bytes, sends 15
        code, answer = _raw(
            base, short.replace(b"Connection: close", b"Authorization: Bearer sesame"), timeout=4 * timeout
        )
        assert code == 408 and b"not sent within" in answer
        assert _raw(base, health)[0] == 200
        for c in idle:
            c.close()
        time.sleep(0.5)
        assert threading.active_count() <= threads0 + 1
    finally:
        s.stop()


@pytest.mark.slow  # a load test: the slow tier
def test_server_under_load_answers_every_request_and_returns_to_baseline(server):
    valid = lh.post("/v1/completions", b'{"prompt": "CLICK", "max_tokens": 1, "temperature": 0}')
    mix = [
        valid,
        lh.get("/health"),
        lh.get("/nope"),
        lh.post("/v1/completions", b"{not json"),
        lh.post("/v1/completions", b'{"prompt": "a", "temperature": NaN}'),
        lh.post("/v1/completions", b"{}", "-1"),
        lh.post("/v1/completions", b"{}", "1000000000000"),
        lh.post("/v1/chat/completions", b'{"messages": 3}'),
        b"GARBAGE\r\n\r\n",
    ]
    host, port = "127.0.0.1", server.port
    lh.hammer(host, port, mix * 5, connections=10)  # warm: compiles, caches
    threads0, rss0 = threading.active_count(), lh.rss_mb()
    codes = lh.hammer(host, port, (mix * 223)[:2000], connections=50)
    assert sum(codes.values()) == 2000
    assert set(codes) <= {200, 400, 404, 413}, codes  # every answer a valid response or a 4xx
    assert codes[200] >= 2 * 2000 // len(mix) - 2
    assert lh.settle(threads0) <= 0
    assert lh.rss_mb() - rss0 < 100, (rss0, lh.rss_mb())


def test_api_keys_travel_only_over_https_or_loopback(monkeypatch, caplog):
    from rollout.endpoint import ChatEndpoint, EndpointError

    monkeypatch.delenv("TGPO_ALLOW_INSECURE_KEY", raising=False)
    assert ChatEndpoint("https://api.example.com/v1", api_key="k").api_key == "k"
    assert ChatEndpoint("http://127.0.0.1:8000", api_key="k").api_key == "k"
    assert ChatEndpoint("http://localhost:8000", api_key="k").api_key == "k"
    with pytest.raises(EndpointError, match="plain http"):
        ChatEndpoint("http://10.0.0.5:8000", api_key="k")
    assert ChatEndpoint("http://10.0.0.5:8000", api_key="k", allow_insecure_key=True).api_key == "k"
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert ChatEndpoint("http://10.0.0.5:8000").api_key is None and "not sent" in caplog.text
    assert ChatEndpoint("https://api.example.com").api_key == "from-env"


def test_endpoint_does_not_follow_redirects_with_the_key():
    import http.server

    from rollout.endpoint import ChatEndpoint, EndpointError

    hits = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            hits.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(307 if self.path.startswith("/v1") else 200)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ep = ChatEndpoint(f"http://127.0.0.1:{srv.server_address[1]}", api_key="k", retries=0)
        with pytest.raises(EndpointError, match="307.*not followed"):
            ep.post({"messages": []})
        assert hits == ["Bearer k"]  # one request: the redirect target never saw the key
    finally:
        srv.shutdown()


def test_unreachable_server_raises_after_retries():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}", "tiny", retries=2, backoff_s=0.01, timeout_s=2)
    calls = []
    inner = policy._post_once
    policy._post_once = lambda body: (calls.append(1), inner(body))[1]
    with pytest.raises(PolicyError, match=rf"127\.0\.0\.1:{port}.*3 attempts.*unreachable"):
        asyncio.run(policy.act(make_request()))
    assert len(calls) == 3


def test_constrained_model_policy_writes_only_what_the_step_offers(sampler, spm_tokenizer):
    from rollout.core import Element
    from rollout.policies.constrain import OutputGrammar, step_strings

    class Spy:
        def __init__(self, inner):
            self.inner, self.cfg, self.got = inner, inner.cfg, []

        def generate(self, prompts, params, constraints=None, row_seeds=None):
            self.got.append(constraints)
            return self.inner.generate(prompts, params, constraints, row_seeds)

    base = make_request(instruction="search for [red running shoes]")
    els = (
        Element(id="1", role="textbox", name="Search"),
        Element(id="2", role="combobox", name="size", options=("S", "M")),
    )
    req = dataclasses.replace(base, observation=dataclasses.replace(base.observation, elements=els))
    params = SamplingParams(temperature=1.0, max_tokens=40, seed=3)  # a random model: sampled text has brackets
    outs = {}
    for constrain in (False, True):
        spy = Spy(sampler)
        policy = ModelPolicy(
            spy,
            spm_tokenizer,
            prompt=PromptConfig(budget_tokens=BUDGET, system_prompt=SYS),
            params=params,
            constrain=constrain,
            stop_after_command=False,
        )
        outs[constrain] = [asyncio.run(policy.act(dataclasses.replace(req, seed=s))).text for s in range(6)]
        assert (spy.got[0] is None) is (not constrain)
    grammar = OutputGrammar(step_strings(req))
    assert all(grammar.viable(t) for t in outs[True])
    assert not all(grammar.viable(t) for t in outs[False]), "the unconstrained model must break the grammar here"


def test_prompt_config_from_what_was_saved_and_overrides():
    """A model's saved prompt over the defaults, the caller's fields over both (None: not given), each field checked
    where the config is made."""
    saved = {
        "prompt_style": "compact",
        "budget_tokens": 512,
        "page_ids": "after",
        "keep_recent": 2,
        "page_cut": "text_first",
    }
    p = PromptConfig.from_saved(saved, budget_tokens=None, keep_recent=4, history_last=None)
    assert p == PromptConfig(512, SYSTEM_PROMPTS["compact"], page_ids="after", keep_recent=4, page_cut="text_first")
    assert PromptConfig.from_saved({}) == PromptConfig()  # nothing saved: the defaults, the full grammar
    assert PromptConfig.from_saved(saved, "full").system_prompt == SYSTEM_PROMPTS["full"]
    for bad, match in [
        (dict(page_ids="middle"), "page_ids='middle'"),
        (dict(keep_recent=-1), "keep_recent=-1"),
        (dict(page_cut="middle"), "page_cut='middle'"),
        (dict(thought_chars=-5), "thought_chars=-5"),
        (dict(budget_tokens=0), "budget_tokens=0"),
    ]:
        with pytest.raises(ValueError, match=match):
            PromptConfig(**bad)
    with pytest.raises(ValueError, match="prompt_style 'terse'"):
        PromptConfig.from_saved({"prompt_style": "terse"})
