"""The oracle's thought writers (rollout/policies/thoughts.py): the registry, and the built-in plain wording: plain
English, each element named as the prompt's page shows it under the run's page_ids, the decision and its reason
where the command is one of the task's decisions, nothing a command does not do, and every thought one the
valid-argument decoding accepts with its command (on the shop's own pages, tests/data/oracle_thoughts.json)."""

import asyncio
import functools
import json
import re

import pytest

from rollout.core import Command, Element, Observation, PolicyRequest, Task
from rollout.policies.thoughts import (
    THOUGHTS,
    element_ref,
    item_done,
    page_counted,
    page_first,
    page_lead,
    plain,
    register_thoughts,
    task_item,
    task_phrase,
    task_sort,
    thought_writer,
)
from thought_cases import PATH, command_of, observation_of, shop

TASK = "Search for [red mug], sort by price from low to high, and add the second item to the cart."
LINKS = (
    Element(id="2", role="textbox", name="Search", value=""),
    Element(id="6", role="link", name="Sort: Price low to high", href="http://shop/search?q=red+mug&sort=p"),
    Element(id="7", role="link", name="Sort: Rating", href="http://shop/search?q=red+mug&sort=rating"),
    *(
        Element(id=str(9 + j), role="link", name=f"Mug {j}", href=f"http://shop/item/{40 + j}?q=red+mug")
        for j in range(3)
    ),
    Element(id="12", role="combobox", name="color", value="black", options=("black", "red")),
    Element(id="13", role="button", name="Buy Now"),
)
PAGE = Observation(
    url="http://shop/search?q=red+mug&sort=price_asc", title="Search: red mug (sorted)", text="", elements=LINKS
)


@pytest.fixture(scope="module")
def golden():
    with open(PATH) as f:
        return json.load(f)


def test_unknown_wordings_are_named_and_a_recipe_registers_more(monkeypatch):
    monkeypatch.setattr("rollout.policies.thoughts.THOUGHTS", dict(THOUGHTS))
    with pytest.raises(
        ValueError,
        match=r"thoughts='nope': expected one of \[.*'plain'.*\]; a recipe registers more: "
        r"recipes.register_all\(\)",
    ):
        thought_writer("nope")
    register_thoughts("mine", plain)
    register_thoughts("mine", plain)  # again: a no-op
    assert thought_writer("mine") is plain
    with pytest.raises(ValueError, match=r"thoughts='plain' is registered already"):
        register_thoughts("plain", lambda *a, **k: "")


def test_the_recipe_registers_its_wording_with_its_setting_rules():
    import recipes
    from recipes.scratch_copy import thoughts
    from rollout.policies.thoughts import thoughts as registered

    recipes.register_all()
    assert registered("scratch_copy").write is thoughts.thought and registered("scratch_copy").setting_form
    assert not registered("plain").setting_form


def test_an_element_is_named_as_the_page_line_names_it():
    from rollout.policies.prompt import page_form

    el = LINKS[1]
    assert element_ref(el) == '[6] link "Sort: Price low to high"'
    assert element_ref(el, "after") == 'link "Sort: Price low to high"[6]'
    line = '[6] link "Sort: Price low to high" current'
    assert page_form(line, "after").startswith(element_ref(el, "after")) and line.startswith(element_ref(el))
    assert element_ref(Element("3", "button", 'Say "hi"')) == '[3] button "Say \\"hi\\""'  # quoted as the page


@pytest.mark.parametrize(
    "page_ids,ref", [("before", lambda i, r, n: f'[{i}] {r} "{n}"'), ("after", lambda i, r, n: f'{r} "{n}"[{i}]')]
)
def test_plain_thoughts_of_each_command(page_ids, ref):
    def t(cmd, instruction=TASK, obs=PAGE):
        return plain(cmd, obs, instruction, page_ids)

    assert t(Command("CLICK", "13")) == f"Click {ref(13, 'button', 'Buy Now')}."
    # text and options the task quotes: the task's words for them (a verb's words left out), else the bare action
    assert (
        t(Command("TYPE", "2", "red mug"))
        == f"The task asks for [red mug]: type it into {ref(2, 'textbox', 'Search')}."
    )
    assert t(Command("TYPE", "2", "blue mug")) == f"Type [blue mug] into {ref(2, 'textbox', 'Search')}."
    assert t(Command("SELECT", "12", "red")) == f"Set {ref(12, 'combobox', 'color')} to [red]."
    assert (
        t(Command("SELECT", "12", "red"), "Buy [a mug] with color [red].")
        == f"The task asks for the color [red]: set {ref(12, 'combobox', 'color')} to [red]."
    )
    assert t(Command("CLEAR", "2")) == f"Clear {ref(2, 'textbox', 'Search')}."
    assert t(Command("SCROLL", arg="DOWN")) == "Scroll down to see more."
    assert t(Command("GOTO", arg="http://shop/cart")) == "Open http://shop/cart."
    assert t(Command("GO_BACK")) == "Go back to the previous page."
    assert t(Command("STOP", arg="")) == "The task is complete."
    assert t(Command("TYPE", "9", "x"), obs=None) == "Type [x] into element 9."  # a malformed output's: no page
    # the decisions: the task's sort, and the result at the task's rank, each with the task's words for it
    assert (
        t(Command("CLICK", "6"))
        == f"Sort by price from low to high, as the task asks: click {ref(6, 'link', 'Sort: Price low to high')}."
    )
    assert (
        t(Command("CLICK", "10"))
        == f"The task asks for the second item, and {ref(10, 'link', 'Mug 1')} is the second result: click it."
    )
    # wrong clicks (the noisy oracle's mistakes) get the plain thought: no thought claims what its command does not do
    assert t(Command("CLICK", "7")) == f"Click {ref(7, 'link', 'Sort: Rating')}."  # another sort
    assert t(Command("CLICK", "11")) == f"Click {ref(11, 'link', 'Mug 2')}."  # another rank
    assert t(Command("CLICK", "6"), "Buy [a mug].") == f"Click {ref(6, 'link', 'Sort: Price low to high')}."
    assert t(Command("CLICK", "10"), "Buy [a mug].") == f"Click {ref(10, 'link', 'Mug 1')}."


def test_the_task_reading_helpers():
    assert task_sort(TASK) == "price from low to high" and task_sort("Buy [a mug].") == ""
    cart = (
        "Buy these items in one order: first item [Oak Mug] with size [L], color [red]; second item [Elm Tea] "
        "with size [L]; third item [Fir Pan]. Add them to the cart, then check out with full name [Ann Lee] and "
        "address [9 Bay Road, Milton] and place the order."
    )
    assert [task_phrase(a, cart) for a in ("Oak Mug", "Elm Tea", "Fir Pan", "Ann Lee", "9 Bay Road, Milton")] == [
        "first item",
        "second item",
        "third item",
        "full name",
        "address",
    ]
    # an option counts in the clause of the item whose page it is set on (the page's title), when the task quotes it
    assert (task_phrase("red", cart, "Oak Mug"), task_phrase("red", cart, "Elm Tea")) == ("color", None)
    assert task_phrase("L", cart, "Elm Tea") == "size" and task_phrase("L", cart, "A page it never names") == "size"
    assert task_phrase("Oak Mug", "i am looking for [Oak Mug] with size [L]") == ""  # a verb's words: none
    assert task_phrase("Oak", cart) is None and task_phrase("L", "Buy [a mug].") is None
    assert task_sort("Search for [x], sort by rating, and add the first item to the cart.") == "rating"
    assert task_item(TASK) == "the second item" and task_item("i am looking for [a mug]") == ""


def _plain_cases(golden):
    """The recorded cases with the page they were made on, their task and command."""
    pages = [observation_of(p) for p in golden["pages"]]
    for page, ins, name, el, arg, copy in golden["cases"]:
        if page is not None:
            yield pages[page], golden["instructions"][ins], command_of([name, el, arg]), copy


@pytest.mark.parametrize("page_ids", ["before", "after"])
def test_plain_thoughts_on_the_shops_pages_say_no_more_than_their_command(golden, page_ids):
    """On every recorded case: the element as the page names it, the typed text or option as the command writes it
    (with the task's words for it where the task quotes it), the decision only where the copy wording made it too
    (the same decisions), and none of the copy wording's circuit-only forms (the task's lead word glued before typed
    text, an id after a name or rank word, the title copied first, the task copied on after an added item)."""
    n = {"sort": 0, "rank": 0, "asked": 0}
    for obs, ins, cmd, copy in _plain_cases(golden):
        thought = plain(cmd, obs, ins, page_ids)
        el = obs.by_id(cmd.id) if cmd.id else None
        if el is not None:
            assert element_ref(el, page_ids) in thought
        if cmd.name in ("TYPE", "SELECT"):
            assert f" [{cmd.arg}]" in thought
            asked = thought.startswith("The task asks for ")
            assert asked == (task_phrase(cmd.arg, ins, obs.title if cmd.name == "SELECT" else "") is not None)
            n["asked"] += asked
        sort = thought.startswith("Sort by ")
        rank = cmd.name == "CLICK" and thought.startswith("The task asks for ")
        assert sort == ("Click to sort by" in copy) and rank == ("click the" in copy and "result [" in copy)
        n["sort"] += sort
        n["rank"] += rank
        assert not thought.startswith(obs.title) and '"Added' not in thought and "result [" not in thought
        assert not re.search(r"^(Type|Set) \w+ \[|\w\[\d+\]|(item \d+|\w+ item) \[\d+\]", thought), thought
    assert n["sort"] > 5 and n["rank"] > 5 and n["asked"] > 20


@pytest.mark.parametrize("page_ids", ["before", "after"])
def test_the_decoding_accepts_every_plain_thought_with_its_command(golden, page_ids):
    """Each recorded command on its page, with the plain thought, is a complete output under the valid-argument
    decoding of a plain-worded run (prefix by prefix for the runs' own commands), and the same thought before a
    command on another element is refused: the decoding finds the thought's element in either place of its id."""
    from rollout.policies.constrain import OutputGrammar, quoted_strings, step_strings

    ran = set()  # the runs' own commands, by page
    for ep in golden["episodes"]:
        for s in ep["steps"]:
            m = re.search(r"\nCommand: (.*)$", s["output"])
            if m:
                ran.add((s["page"], m.group(1)))
    pages = [observation_of(p) for p in golden["pages"]]
    checked = 0
    for page, ins, name, el, arg, _ in golden["cases"]:
        if page is None:
            continue
        obs, instruction, cmd = pages[page], golden["instructions"][ins], command_of([name, el, arg])
        if cmd.name == "TYPE" and cmd.arg not in quoted_strings(instruction):
            continue  # the Chinese tasks quote with “…”, which the decoding does not read as a task's string
        task = Task("t", "shop", "webshop", instruction, "/", 1, "train")
        grammar = OutputGrammar(step_strings(PolicyRequest(task, obs, (), 0, "t/0", 0)))
        thought = f"Thought: {plain(cmd, obs, instruction, page_ids)}\nCommand: "
        assert grammar.complete(thought + cmd.render()), thought + cmd.render()
        other = next((e.id for e in obs.elements if e.id != cmd.id and (cmd.name != "SELECT" or e.options)), None)
        if cmd.id and other is not None:
            wrong = Command(cmd.name, other, cmd.arg if cmd.name == "TYPE" else None)
            assert not grammar.viable(thought + wrong.render())
        if (page, cmd.render()) in ran:
            checked += 1
            out = thought + cmd.render()
            assert all(grammar.viable(out[:i]) for i in range(len(out))), out
    assert checked > 50


def test_the_noisy_oracle_decides_alike_whatever_its_wording(golden):
    """Replayed on the recorded pages with the plain wording, the noisy oracle gives the recorded commands: a
    wording changes what the thought says, never what the oracle does."""
    from rollout.commands import parse_output
    from rollout.core import ActionError
    from rollout.policies.oracle import OracleNoise, OraclePolicy

    envs = functools.lru_cache(maxsize=None)(shop)
    for ep in golden["episodes"]:
        env = envs(ep["item_names"], ep["locale"])
        task = next(t for t in env.tasks("train") if t.task_id == ep["task_id"])
        noise = OracleNoise(**golden["noise"]) if ep["noisy"] else OracleNoise()
        policy = OraclePolicy(env, noise, seed=ep["seed"], page_ids="after")
        for step, s in enumerate(ep["steps"]):
            obs = observation_of(golden["pages"][s["page"]])
            out = asyncio.run(policy.act(PolicyRequest(task, obs, (), step, ep["key"], ep["seed"]))).text
            assert out.split("\nCommand:")[1:] == s["output"].split("\nCommand:")[1:], (ep["task_id"], step)
            try:
                thought, cmd = parse_output(out)
            except ActionError:  # a malformed output (its thought is still the plain writer's, of no page)
                continue
            fixed = ("Going back", "Let me look", "I think the task")  # the policy's own words for its detours
            if not thought.startswith(fixed):
                assert thought == plain(cmd, obs, task.instruction, "after")


def test_page_first_writes_the_pages_state_before_the_plain_thought(golden):
    """``page_first``: the page's title, its first heading only where the title does not say it (an escaped quote
    read back), then the plain thought; on every recorded case the decoding accepts it with its command, and the
    shop's state marks (a sorted list, an added item) stand before the decision."""
    from rollout.policies.constrain import OutputGrammar, quoted_strings, step_strings

    cart = Observation(
        "http://shop/cart", "Your cart", 'heading "Added \\"Oak\\" Tea to your cart"\n[5] link "Checkout"', ()
    )
    assert page_lead(cart) == 'Page "Your cart", heading "Added "Oak" Tea to your cart".'
    item = Observation("http://shop/item/3", "Oak Tea", 'heading "Oak Tea"\nheading "Features"', ())
    assert page_lead(item) == 'Page "Oak Tea".' and page_lead(None) == ""
    assert page_first(Command("CLICK", "10"), PAGE, TASK, "after") == (
        'Page "Search: red mug (sorted)". The task asks for the second item, and link "Mug 1"[10] is the second '
        "result: click it."
    )
    pages = [observation_of(p) for p in golden["pages"]]
    marks = {"sorted": 0, "added": 0}
    for page, ins, name, el, arg, _ in golden["cases"]:
        if page is None:
            continue
        obs, instruction, cmd = pages[page], golden["instructions"][ins], command_of([name, el, arg])
        thought = page_first(cmd, obs, instruction, "after")
        assert thought == f"{page_lead(obs)} {plain(cmd, obs, instruction, 'after')}"
        assert thought.startswith(f'Page "{obs.title}"')
        marks["sorted"] += thought.startswith('Page "Search:') and "(sorted)" in thought.split(". ")[0]
        marks["added"] += ', heading "Added ' in thought
        if cmd.name == "TYPE" and cmd.arg not in quoted_strings(instruction):
            continue
        task = Task("t", "shop", "webshop", instruction, "/", 1, "train")
        grammar = OutputGrammar(step_strings(PolicyRequest(task, obs, (), 0, "t/0", 0)), page_lead=True)
        assert grammar.complete(f"Thought: {thought}\nCommand: {cmd.render()}"), thought
    assert marks["sorted"] > 3 and marks["added"] > 3, marks


def test_page_counted_counts_the_results_up_to_the_asked_rank(golden):
    """``page_counted``: a click on the result at the task's rank lists the results up to it, each with its ordinal,
    the clicked one last; on a page that reports a task's item done, that item's place in the task's list comes
    first (``item_done``); any other thought is ``page_first``'s; the decoding accepts each with its command."""
    from rollout.policies.constrain import OutputGrammar, quoted_strings, step_strings

    assert page_counted(Command("CLICK", "10"), PAGE, TASK, "after") == (
        'Page "Search: red mug (sorted)". The task asks for the second item; the results are first link "Mug 0"[9], '
        'second link "Mug 1"[10]: click it.'
    )
    assert page_counted(Command("CLICK", "11"), PAGE, TASK, "after") == page_first(
        Command("CLICK", "11"), PAGE, TASK, "after"
    )  # not the asked rank: no count
    three = "Buy these items in one order: first item [Oak Tea]; second item [Red Mug] with size [M]; third item [Mug]."
    added = Observation(
        "http://shop/added", "Your cart", 'heading "Added Red Mug to your cart"\n[5] link "View cart"', ()
    )
    assert item_done(added, three) == "[Red Mug] was the second item."  # the longest name it mentions, not "Mug"
    last = Observation("http://shop/added", "Your cart", 'heading "Added Mug to your cart"', ())
    assert item_done(last, three) == "[Mug] was the third item, the last."
    own = Observation("http://shop/item/4", "Red Mug", 'heading "Red Mug"', ())
    assert item_done(own, three) == "" and item_done(added, TASK) == ""
    assert page_counted(Command("TYPE", "2", "Mug"), added, three, "after") == (
        'Page "Your cart", heading "Added Red Mug to your cart". [Red Mug] was the second item. The task asks for '
        "the third item [Mug]: type it into element 2."
    )
    pages = [observation_of(p) for p in golden["pages"]]
    counted = done = 0
    for page, ins, name, el, arg, _ in golden["cases"]:
        if page is None:
            continue
        obs, instruction, cmd = pages[page], golden["instructions"][ins], command_of([name, el, arg])
        thought = page_counted(cmd, obs, instruction, "after")
        done += bool(item_done(obs, instruction))
        if thought != page_first(cmd, obs, instruction, "after") and not item_done(obs, instruction):
            counted += 1
            ref = element_ref(obs.by_id(cmd.id), "after")
            assert thought.endswith(f"{ref}: click it.") and thought.count("link ") >= 1, thought
        if cmd.name == "TYPE" and cmd.arg not in quoted_strings(instruction):
            continue
        task = Task("t", "shop", "webshop", instruction, "/", 1, "train")
        grammar = OutputGrammar(step_strings(PolicyRequest(task, obs, (), 0, "t/0", 0)), page_lead=True)
        assert grammar.complete(f"Thought: {thought}\nCommand: {cmd.render()}"), thought
    assert counted > 5 and done > 20


def test_the_decoding_holds_a_page_first_thought_to_the_pages_lead():
    """With ``page_lead`` (the page-first wordings' switch) a thought opens with this page's lead, prefix by prefix;
    another page's title, or the lead written twice, is refused; without the switch any opening passes."""
    from rollout.policies.constrain import OutputGrammar, step_strings
    from rollout.policies.thoughts import thoughts

    assert thoughts("page_first").page_lead and thoughts("page_counted").page_lead and not thoughts("plain").page_lead
    empty = Observation("http://shop/search?q=", "Search:", "", LINKS)
    task = Task("t", "shop", "procedure", TASK, "/", 1, "train")
    lead = page_lead(empty)
    assert lead == 'Page "Search:".'
    held = OutputGrammar(step_strings(PolicyRequest(task, empty, (), 0, "t/0", 0)), page_lead=True)
    free = OutputGrammar(step_strings(PolicyRequest(task, empty, (), 0, "t/0", 0)))
    right = f'Thought: {lead} Click link "Sort: Rating"[7].\nCommand: CLICK [7]'
    assert all(held.viable(right[:i]) for i in range(len(right) + 1)) and held.complete(right)
    for wrong in ('Thought: Page "Search: Page', 'Thought: Page "Search: red mug".', "Thought: Click"):
        assert not held.viable(wrong) and free.viable(wrong), wrong
