"""The from-scratch copy model's oracle thoughts (the scratch_copy recipe's wording, recipes/scratch_copy/thoughts.py):
each repeats what the page and the task say in the order that lets a model copy the command's argument from them
(docs/method.md §1, the oracle's thoughts), and the valid-argument decoding accepts them."""

from rollout.core import Observation


def test_oracle_thought_repeats_the_page_line_and_the_task_option():
    from rollout.core import Command, Element
    from recipes.scratch_copy.thoughts import explain as _explain

    obs = Observation(
        url="http://shop/item/3",
        title="t",
        text="",
        elements=(
            Element(id="6", role="combobox", name="color", value="black", options=("black", "red")),
            Element(id="7", role="button", name="Buy Now"),
        ),
    )
    assert _explain(Command("SELECT", "6", "red"), obs) == 'Set combobox "color"[6] to color [red].'
    assert _explain(Command("CLICK", "7"), obs) == 'Click button "Buy Now"[7].'
    assert _explain(Command("TYPE", "9", "x"), obs) == "Type [x] into element 9."  # no such element on the page


def test_oracle_thought_leads_typed_text_with_the_words_the_task_puts_before_it():
    """The two tokens before a typed string's ``[`` are the task's, so a copy by induction starts at the right
    bracket (``Type item 2 [`` / ``Type second item [`` match only the second item's)."""
    from rollout.core import Command, Element
    from rollout.envs.shop.env import ShopEnv
    from recipes.scratch_copy.thoughts import explain as _explain, task_context

    box = Observation(
        url="http://shop/", title="t", text="", elements=(Element(id="2", role="textbox", name="Search"),)
    )
    for item_names, lead in (("number", "item 2"), ("ordinal", "second item")):
        task = next(
            t for t in ShopEnv(n_train=20, n_test=2, item_names=item_names).tasks("train") if t.family == "multi_cart"
        )
        second, name = task.goal["items"][1]["title"], task.goal["name"]
        assert (
            _explain(Command("TYPE", "2", second), box, task.instruction)
            == f'Type {lead} [{second}] into textbox "Search"[2].'
        )
    assert task_context(task.instruction, name) == "name"
    assert task_context("i am looking for [a mug] with color [red]", "a mug") == "for"
    assert task_context("i am looking for [a mug]", "a cup") == ""  # not in the task: no lead
    assert task_context("[a mug] first", "a mug") == ""
    assert (
        _explain(Command("TYPE", "2", "a cup"), box, "Search for [a mug]") == 'Type [a cup] into textbox "Search"[2].'
    )


def test_oracle_sort_thought_leads_with_the_tasks_words_for_the_sort():
    from rollout.core import Command, Element
    from rollout.envs.shop.env import ShopEnv
    from recipes.scratch_copy.thoughts import explain as _explain
    from rollout.policies.thoughts import task_sort

    page = Observation(
        url="http://shop/search",
        title="t",
        text="",
        elements=(
            Element(id="6", role="link", name="Sort: Price low to high"),
            Element(id="7", role="link", name="Sort: Rating"),
            Element(id="9", role="link", name="Mug"),
        ),
    )
    tasks = [t for t in ShopEnv(n_train=30, n_test=2).tasks("train") if t.family == "procedure"]
    task = next(t for t in tasks if t.goal["sort"] == "price_asc")
    assert task_sort(task.instruction) == "price from low to high"
    assert (
        _explain(Command("CLICK", "6"), page, task.instruction) == "Click to sort by price from low to high [6]."
    )  # the sort's last word right before the id it decides
    assert task_sort("Search for [x], sort by rating, and add the first item to the cart.") == "rating"
    assert _explain(Command("CLICK", "9"), page, task.instruction) == 'Click link "Mug"[9].'  # not a sort link
    assert _explain(Command("CLICK", "7"), page, "Buy [a mug].") == 'Click link "Sort: Rating"[7].'  # no sort asked
    # another sort than the task's (the noisy oracle's wrong sort): the plain thought, not the task's sort before it
    assert _explain(Command("CLICK", "7"), page, task.instruction) == 'Click link "Sort: Rating"[7].'
    rating = next(t for t in tasks if t.goal["sort"] == "rating")
    assert _explain(Command("CLICK", "7"), page, rating.instruction) == "Click to sort by rating [7]."


def test_oracle_result_thought_leads_with_the_tasks_rank_and_names_the_id():
    from rollout.core import Command, Element
    from rollout.envs.shop.env import ShopEnv
    from recipes.scratch_copy.thoughts import explain as _explain
    from rollout.policies.thoughts import task_item

    page = Observation(
        url="http://shop/search",
        title="t",
        text="",
        elements=(
            Element(id="7", role="link", name="Sort: Rating", href="http://shop/search?q=x&sort=rating"),
            *(
                Element(id=str(9 + j), role="link", name=f"Mug {j}", href=f"http://shop/item/{40 + j}?q=x")
                for j in range(3)
            ),
        ),
    )
    task = next(t for t in ShopEnv(n_train=30, n_test=2).tasks("train") if t.family == "procedure")
    k = int(task.goal["position"])
    rank = ("first", "second", "third")[k - 1]
    assert task_item(task.instruction) == f"the {rank} item"
    right = str(8 + k)  # the k-th product link
    assert (
        _explain(Command("CLICK", right), page, task.instruction)
        == f"To add the {rank} item, click the {rank} result [{right}]."
    )  # the rank word two tokens before the id
    # another result (the noisy oracle's wrong click): the plain thought, never "the third result" before another id
    wrong = str(9 + k % 3)
    assert _explain(Command("CLICK", wrong), page, task.instruction) == f'Click link "Mug {k % 3}"[{wrong}].'
    assert _explain(Command("CLICK", "9"), page, "Buy [a mug].") == 'Click link "Mug 0"[9].'  # no rank asked
    assert task_item("i am looking for [a mug]") == ""


def test_oracle_thought_after_adding_an_item_copies_the_task_on_to_the_next_item_or_the_lists_end():
    """On the page that reports an added item, the thought is the heading's word and name and then the task's own
    text after that name: up to the next item's name when the command types it, to the list's end when the command
    clicks on; any other command, or a heading that names no item of the task, keeps the plain thought."""
    from rollout.core import Command, Element
    from rollout.envs.shop.env import ShopEnv
    from rollout.envs.shop.pages import LABELS_EN
    from rollout.policies.constrain import OutputGrammar, StepStrings, quoted_strings
    from recipes.scratch_copy.thoughts import done_context, explain as _explain

    task = next(
        t
        for t in ShopEnv(n_train=60, n_test=2).tasks("train")
        if t.family == "multi_cart" and len(t.goal["items"]) == 3
    )
    titles = [it["title"] for it in task.goal["items"]]
    elements = (Element(id="2", role="textbox", name="Search"), Element(id="5", role="link", name="View cart"))

    def added(title):
        heading = LABELS_EN["added"].format(title=title)
        return Observation(
            url="http://shop/added",
            title="Your cart",
            elements=elements,
            text=f'[2] textbox "Search" value=""\nheading "{heading}"\n[5] link "View cart"',
        )

    ins = task.instruction
    for k in (0, 1):  # item k added, item k + 1 typed: the task's text from after item k's name to item k + 1's
        start = ins.index(f"[{titles[k]}]") + len(titles[k]) + 1
        stop = ins.index(f"[{titles[k + 1]}]") + len(titles[k + 1]) + 2
        assert ins[start] == "]" and ins[stop - 1] == "]"
        thought = _explain(Command("TYPE", "2", titles[k + 1]), added(titles[k]), ins)
        assert thought == f'"Added {titles[k]}{ins[start:stop]} into textbox "Search"[2].'
        assert f"{('second', 'third')[k]} item [{titles[k + 1]}] into" in thought
    end = ins.index(f"[{titles[2]}]") + len(titles[2]) + 1
    stop = ins.index(". ", end) + 1
    assert (
        _explain(Command("CLICK", "5"), added(titles[2]), ins)
        == f'"Added {titles[2]}{ins[end:stop]} Click link "View cart"[5].'
    )
    # not what the task's text leads to: the plain thoughts
    assert (
        _explain(Command("TYPE", "2", titles[1]), added(titles[1]), ins)
        == f'Type second item [{titles[1]}] into textbox "Search"[2].'
    )
    assert _explain(Command("CLICK", "5"), added(titles[0]), ins) == 'Click link "View cart"[5].'
    assert (
        done_context(
            "Search for [a mug], then add the first item to the cart.", added("Red Mug"), Command("CLICK", "5")
        )
        == ""
    )  # the heading names no item of the task
    # brackets skip a full stop inside a value; a name that starts another name is not taken for it
    odd = "Buy these items in one order: first item [Kettle] with size [1.5 L]; second item [Kettle Pro]. Add them."
    assert (
        done_context(odd, added("Kettle"), Command("TYPE", "2", "Kettle Pro"))
        == '"Added Kettle] with size [1.5 L]; second item [Kettle Pro]'
    )
    assert done_context(odd, added("Kettle Pro"), Command("CLICK", "5")) == '"Added Kettle Pro].'
    # the older wording (item_names="number": "item 2 [..]", a saved model's tasks) keeps the plain thoughts
    plain = next(
        t for t in ShopEnv(n_train=60, n_test=2, item_names="number").tasks("train") if t.task_id == task.task_id
    ).instruction
    assert (
        _explain(Command("TYPE", "2", titles[1]), added(titles[0]), plain)
        == f'Type item 2 [{titles[1]}] into textbox "Search"[2].'
    )
    # the valid-argument decoding accepts both thoughts with their commands, prefix by prefix
    grammar = OutputGrammar(
        StepStrings(ids=frozenset({"2", "5"}), options={}, typed=quoted_strings(ins)), setting_form=True
    )
    for cmd, page in ((Command("TYPE", "2", titles[1]), added(titles[0])), (Command("CLICK", "5"), added(titles[2]))):
        out = f"Thought: {_explain(cmd, page, ins)}\nCommand: {cmd.render()}"
        assert grammar.complete(out) and all(grammar.viable(out[:i]) for i in range(len(out)))


def test_oracle_thought_for_a_form_field_names_the_field_first_and_its_word_leads_the_value():
    """Checkout's fields: the field first, then the task's word for the value (the field label's last word) and the
    value; the search box keeps its plain thought; the valid-argument decoding accepts the thought prefix by prefix."""
    from rollout.core import Command, Element
    from rollout.envs.shop.env import ShopEnv
    from rollout.policies.constrain import OutputGrammar, StepStrings, quoted_strings
    from recipes.scratch_copy.thoughts import explain as _explain

    task = next(t for t in ShopEnv(n_train=20, n_test=2).tasks("train") if t.family == "multi_cart")
    name, addr = task.goal["name"], task.goal["address"]
    form = Observation(
        url="http://shop/checkout",
        title="Checkout",
        text="",
        elements=(
            Element(id="2", role="textbox", name="Search"),
            Element(id="5", role="textbox", name="Full name"),
            Element(id="6", role="textbox", name="Address"),
        ),
    )
    ins = task.instruction
    assert _explain(Command("TYPE", "5", name), form, ins) == f'Fill textbox "Full name"[5] with name [{name}].'
    assert _explain(Command("TYPE", "6", addr), form, ins) == f'Fill textbox "Address"[6] with address [{addr}].'
    # the value typed into the other field: the field's word is not the task's word before it, the plain thought
    assert _explain(Command("TYPE", "6", name), form, ins) == f'Type name [{name}] into textbox "Address"[6].'
    first = task.goal["items"][0]["title"]
    assert _explain(Command("TYPE", "2", first), form, ins) == f'Type first item [{first}] into textbox "Search"[2].'
    grammar = OutputGrammar(
        StepStrings(ids=frozenset({"2", "5", "6"}), options={}, typed=quoted_strings(ins)), setting_form=True
    )
    out = f"Thought: {_explain(Command('TYPE', '6', addr), form, ins)}\nCommand: TYPE [6] [{addr}]"
    assert grammar.complete(out) and all(grammar.viable(out[:i]) for i in range(len(out)))


def test_option_value_has_the_same_tokens_in_task_thought_and_command(tmp_path):
    """The command's value can only be copied from the task or the thought when it is the same token sequence
    there: `color: red` tokenised the value as ``▁red``, the command's `[red]` as ``red``."""
    from rollout.core import Command, Element
    from rollout.envs.shop.tasks import _opt_phrase
    from recipes.scratch_copy.thoughts import explain as _explain
    from tgpo_jax.models.tokenizer import load_tokenizer, train_sentencepiece

    # a tokenizer whose merges make "\u2581red" a piece, as the one trained on collected episodes does
    words = ["red", "blue", "green", "black", "white", "size", "color", "oz", "pack"]
    corpus = [f"with color: {w}, and {w} [{w}] SELECT [6] [{w}]; the {w} one" for w in words] * 40
    spm_tokenizer = load_tokenizer(train_sentencepiece(corpus, str(tmp_path), vocab_size=340))

    class Catalog:
        option_label = staticmethod(str)

    obs = Observation(
        url="http://shop/item/3",
        title="t",
        text="",
        elements=(Element(id="6", role="combobox", name="color", value="black", options=("black", "red")),),
    )
    task = "i am looking for [a mug] with " + _opt_phrase(Catalog, {"color": "red", "size": "12 oz"}, False)
    thought = _explain(Command("SELECT", "6", "red"), obs)
    command = Command("SELECT", "6", "red").render()

    def value_pieces(text, value="red"):  # the pieces that cover the value's first occurrence in text
        pieces = spm_tokenizer.convert_ids_to_tokens(spm_tokenizer(text, add_special_tokens=False)["input_ids"])
        start = "".join(pieces).replace("\u2581", " ").index(value)
        out, pos = [], 0
        for p in pieces:
            if pos + len(p) > start and pos < start + len(value):
                out.append(p)
            pos += len(p)
        return out

    assert task.endswith("with color [red], size [12 oz]")
    assert value_pieces(task) == value_pieces(thought) == value_pieces(command)
    assert value_pieces("i am looking for [a mug] with color: red") != value_pieces(command)  # the old phrasing


def test_oracle_thought_of_a_sorting_task_first_copies_the_results_title():
    """On a task that sorts, the sort click and the result click start with the results page's title, whose end
    (``(sorted)`` or not) is then the token right before the decision to sort or to open a result; a page whose title
    does not carry the task's query, a wrong click and a task without a sort keep the plain thoughts."""
    from rollout.core import Command, Element
    from recipes.scratch_copy.thoughts import explain as _explain

    task = "Search for [red mug], sort by price from low to high, and add the second item to the cart."
    links = (
        Element(id="6", role="link", name="Sort: Price low to high", href="http://shop/search?q=red+mug"),
        *(
            Element(id=str(9 + j), role="link", name=f"Mug {j}", href=f"http://shop/item/{40 + j}?q=red+mug")
            for j in range(3)
        ),
    )
    before = Observation(url="http://shop/search?q=red+mug", title="Search: red mug", text="", elements=links)
    after = Observation(
        url="http://shop/search?q=red+mug&sort=price_asc", title="Search: red mug (sorted)", text="", elements=links
    )
    assert (
        _explain(Command("CLICK", "6"), before, task) == "Search: red mug. Click to sort by price from low to high [6]."
    )
    assert (
        _explain(Command("CLICK", "10"), after, task)
        == "Search: red mug (sorted). To add the second item, click the second result [10]."
    )
    assert _explain(Command("CLICK", "11"), after, task) == 'Click link "Mug 2"[11].'  # not the task's rank
    other = Observation(url="http://shop/search?q=mug", title="Search: mug", text="", elements=links)
    assert _explain(Command("CLICK", "6"), other, task) == "Click to sort by price from low to high [6]."
    assert _explain(Command("CLICK", "10"), after, "i am looking for [red mug]") == 'Click link "Mug 1"[10].'
