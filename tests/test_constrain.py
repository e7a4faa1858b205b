"""Valid-argument decoding: the output grammar on hand-worked outputs, token boundaries, and the policy end to end."""

import pytest

from rollout.commands import parse_output
from rollout.core import Element, HistoryItem, Observation, PolicyRequest, Task
from rollout.policies.constrain import (
    OutputGrammar,
    StepStrings,
    _piece_table,
    quoted_strings,
    step_strings,
    token_bounds,
)

STEP = StepStrings(
    ids=frozenset({"2", "3", "6", "7", "9"}),
    options={"6": ("XS", "S", "M"), "7": ("red", "blue")},
    typed=frozenset({"oil free face moisturizer", "Noah Rossi"}),
)


@pytest.mark.parametrize(
    "text,viable,complete",
    [
        ("Thought: Type for [oil", True, False),
        ("Thought: Type for [o lowm", False, False),  # a hop out of the quoted string
        (
            'Thought: Type [oil free face moisturizer] into textbox "Search"[2].\nCommand: TYPE [2] [oil free face '
            "moisturizer]",
            True,
            True,
        ),
        ("Thought: Click [8]", False, False),  # no element 8 on the page
        ("Thought: x\nCommand: CLICK 1", False, False),  # the id must be bracketed
        ("Thought: x\nCommand: CLICK [9]", True, True),
        ("Thought: x\nCommand: CLICK [9] [", False, False),  # CLICK takes one group
        ("Thought: x\nCommand: click [9]", False, False),  # verbs as the grammar writes them
        ("Thought: x\nCommand: SELECT [2]", False, False),  # element 2 has no options
        ("Thought: x\nCommand: SELECT [6] [L", False, False),  # no such option
        ("Thought: x\nCommand: SELECT [6] [red]", False, False),  # another combobox's option
        ("Thought: x\nCommand: SELECT [7] [red]", True, True),
        ("Thought: x\nCommand: TYPE [2] [Noah", True, False),
        ("Thought: x\nCommand: TYPE [2] [Noah Smith]", False, False),
        ("Thought: x\nCommand: STOP []", True, True),
        ("Thought: x\nCommand: STOP", True, True),
        ("Thought: x\nCommand: STOP [any answer at all]", True, True),  # STOP's answer is free text
        ("Thought: x\nCommand: GO_BACK", True, True),
        ("Thought: x\nCommand: GO_BACK [", False, False),
        ("Thought: x\nCommand: SCROLL [DOWN]", True, True),
        ("Thought: x\nCommand: CLICK [9]\n", True, True),
        ("Thought: x\nCommand: CLICK [9]\nanything after the line", False, False),
        ("Thought: x [Noah\nRossi]", False, False),  # a group never spans lines
        ('Thought: Click button "Buy Now"[9].\nCommand: CLICK [7]', False, False),  # not the element it named
        ('Thought: Click button "Buy Now"[9].\nCommand: CLICK [9]', True, True),
        ('Thought: Set combobox "size"[6] to size [M].\nCommand: SELECT [7] [red]', False, False),
        ('Thought: Set combobox "size"[6] to size [M].\nCommand: SELECT [6] [M]', True, True),
        # names no combobox
        ('Thought: Type [Noah Rossi] into textbox "Search"[2].\nCommand: SELECT [7] [red]', True, True),
    ],
)
def test_grammar_on_hand_worked_outputs(text, viable, complete):
    g = OutputGrammar(STEP)
    assert g.viable(text) is viable and g.complete(text) is complete
    if complete:
        parse_output(text)  # what the grammar completes, the harness's parser accepts


NAMED = StepStrings(ids=STEP.ids, options=STEP.options, typed=STEP.typed, names={"6": "size", "7": "color"})


@pytest.mark.parametrize(
    "text,viable",
    [
        ('Thought: Set combobox "size"[6] to si', True),
        ('Thought: Set combobox "size"[6] to color [', False),  # another option's name: its value's copy starts there
        ('Thought: Set combobox "size"[6] to size [M', True),
        ('Thought: Set combobox "size"[6] to size [red', False),  # the other combobox's option
        ('Thought: Set combobox "size"[6] to size [M].\nCommand: SELECT [6] [M]', True),
        ('Thought: Set combobox "wei', False),  # no combobox of that name on the page
        ('Thought: Set combobox "col', True),
        ('Thought: Click button "Buy Now"[9].\nCommand: CLICK [9]', True),  # names no combobox
        ('Thought: Set combobox "size"[6] to size [M].\nCommand: SELECT [6] [S', False),  # not the value it set
    ],
)
def test_a_setting_names_its_combobox_and_one_of_its_options(text, viable):
    """The scratch_copy wording's settings (``setting_form``)."""
    assert OutputGrammar(NAMED, setting_form=True).viable(text) is viable


def test_a_combobox_set_on_this_page_is_not_named_again():
    task = Task("t", "shop", "webshop", "buy [mug] with size [M], color [red]", "/", 5, "test")
    page = Observation(
        "/item/1",
        "Mug",
        "",
        (
            Element("6", "combobox", "size", options=("S", "M")),
            Element("7", "combobox", "color", options=("red", "blue")),
            Element("9", "button", "Buy Now"),
        ),
    )

    def grammar(*commands, error=None):
        history = tuple(HistoryItem(c, "", error if i == len(commands) - 1 else None) for i, c in enumerate(commands))
        return OutputGrammar(step_strings(PolicyRequest(task, page, history, len(history), "t/0", 0)))

    # the trailing SELECTs set size on this page: only color is left to name
    g = grammar("CLICK [4]", "SELECT [6] [M]")
    assert not g.viable('Thought: Set combobox "size') and g.viable('Thought: Set combobox "color"[7] to color [red]')
    assert not grammar("CLICK [4]", "SELECT [6] [M]", "SELECT [7] [red]").viable('Thought: Set combobox "c')
    assert grammar("SELECT [6] [M]", "CLICK [4]").viable('Thought: Set combobox "size')  # a click left the page
    assert grammar("SELECT [6] [M]", error="element_not_found").viable('Thought: Set combobox "size')


ALL_SET = StepStrings(
    ids=STEP.ids,
    options=STEP.options,
    typed=STEP.typed,
    names={"6": "size", "7": "color"},
    set_here=frozenset({"size", "color"}),
)
NO_OPTIONS = StepStrings(ids=frozenset({"2", "9"}), options={}, typed=STEP.typed)


@pytest.mark.parametrize(
    "step,text,viable,complete",
    [
        (NAMED, "Thought: Set", True, False),
        (NAMED, 'Thought: Set combobox "si', True, False),
        (NAMED, "Thought: Set combobox l", False, False),  # a setting goes on to the quoted name
        (NAMED, "Thought: Setting", False, False),
        (NAMED, 'Thought: Set listbox "size"[6] to size [M].', True, False),  # the role word is the page's business
        (NAMED, 'Thought: Set combobox "size"[6] to size [M].\nCommand: CLICK [6]', False, False),  # sets: a SELECT
        (NAMED, 'Thought: Set combobox "size"[6] to size [M].\nCommand: S', True, False),
        (NAMED, 'Thought: Set combobox "size"[6] to size [M].\nCommand: SC', False, False),  # SCROLL is not a setting
        (NAMED, 'Thought: Set combobox "size"[6] to size [M].\nCommand: SELECT [6] [M]', True, True),
        (NAMED, 'Thought: Click button "Buy Now"[9].\nCommand: CLICK [9]', True, True),
        (ALL_SET, "Thought: Set", False, False),  # every combobox set here: no setting is left to start
        (ALL_SET, " Thought: Set", False, False),  # as the piece table decodes an output: a leading space
        (ALL_SET, "Thought: Se", True, False),  # not yet a setting
        (ALL_SET, 'Thought: Click button "Buy Now"[9].\nCommand: CLICK [9]', True, True),
        (NO_OPTIONS, "Thought: Set", False, False),  # nothing to set on the page
        (STEP, 'Thought: Set combobox ""[6] to [M].\nCommand: SELECT [6] [M]', True, True),  # unnamed: no name check
    ],
)
def test_a_thought_that_starts_with_set_is_a_setting_of_a_combobox_left_to_set(step, text, viable, complete):
    """The scratch_copy wording's settings (``setting_form``)."""
    g = OutputGrammar(step, setting_form=True)
    assert g.viable(text) is viable and g.complete(text) is complete


@pytest.mark.parametrize(
    "step,text",
    [
        (NAMED, 'Thought: Set combobox "size"[6] to color ['),  # another option's name
        (NAMED, "Thought: Set combobox l"),  # a setting that does not go on to a quoted name
        (NAMED, "Thought: Setting"),
        (NAMED, 'Thought: Set combobox "size"[6] to size [M].\nCommand: SC'),  # a setting, then not a SELECT
        (ALL_SET, "Thought: Set"),  # every combobox set here
        (NO_OPTIONS, "Thought: Set"),  # nothing to set on the page
    ],
)
def test_the_setting_form_rules_hold_only_for_a_wording_registered_with_them(step, text):
    """Without ``setting_form`` (the plain wording) a thought may start with ``Set`` and word a setting as it likes;
    the rules every wording keeps still hold."""
    assert not OutputGrammar(step, setting_form=True).viable(text)
    assert OutputGrammar(step).viable(text)


@pytest.mark.parametrize(
    "text,viable,complete",
    [
        # the element the thought names, its id before the role (page_ids "before") or after the name ("after")
        ('Thought: Click [9] button "Buy Now".\nCommand: CLICK [9]', True, True),
        ('Thought: Click [9] button "Buy Now".\nCommand: CLICK [7]', False, False),  # not the element it named
        ('Thought: Click button "Buy Now"[9].\nCommand: CLICK [7]', False, False),
        ('Thought: Set [6] combobox "size" to [M].\nCommand: SELECT [6] [M]', True, True),
        ('Thought: Set [6] combobox "size" to [M].\nCommand: SELECT [7] [red]', False, False),
        ('Thought: Set [6] combobox "size" to [M].\nCommand: SELECT [6] [S', False, False),  # not the value it set
        ('Thought: Set combobox "size"[6] to [M].\nCommand: SELECT [6] [S', False, False),
        ('Thought: Set combobox "size"[6] to [M].\nCommand: SELECT [6] [M]', True, True),
        ('Thought: Set [6] combobox "wei', False, False),  # no combobox of that name on the page
        (
            'Thought: The task asks for the second item, and [9] link "Mug" is the second result: click it.\n'
            "Command: CLICK [9]",
            True,
            True,
        ),
        ('Thought: Type [Noah Rossi] into [2] textbox "Search".\nCommand: TYPE [2] [Noah Rossi]', True, True),
        ('Thought: Type [Noah Rossi] into [2] textbox "Search".\nCommand: TYPE [3] [Noah Rossi]', False, False),
        ("Thought: Type [Noah Smith", False, False),  # a string the task does not quote
    ],
)
def test_plain_thoughts_keep_the_rules_of_every_wording(text, viable, complete):
    g = OutputGrammar(NAMED)
    assert g.viable(text) is viable and g.complete(text) is complete


def test_constraints_take_the_setting_form_from_the_registered_wording(spm_tokenizer):
    import recipes
    from rollout.policies.constrain import constraints_for

    recipes.get("scratch_copy").register()
    task = Task("t", "shop", "webshop", "buy [mug] with size [M]", "/", 5, "test")
    page = Observation("/item/1", "Mug", "", (Element("6", "combobox", "size", options=("S", "M")),))
    req = PolicyRequest(task, page, (), 0, "t/0", 0)
    eos = (spm_tokenizer.eos_token_id,)
    plain, copy = (
        constraints_for([req], spm_tokenizer, eos)[0].grammar,
        constraints_for([req], spm_tokenizer, eos, "scratch_copy")[0].grammar,
    )
    assert not plain.setting_form and copy.setting_form  # plain, the default
    assert plain.name_ids and not copy.name_ids  # the copy wording's id decides, not the name before it
    with pytest.raises(ValueError, match=r"thoughts='nope': expected one of \[.*'plain'.*\]; a recipe registers"):
        constraints_for([req], spm_tokenizer, eos, "nope")


def test_select_is_not_offered_on_a_page_without_options():
    g = OutputGrammar(StepStrings(ids=frozenset({"2"}), options={}, typed=frozenset()))
    assert not g.viable("Command: SELECT") and not g.viable("Command: SE")
    assert g.viable("Command: S")  # STOP, SCROLL


def test_quoted_strings_of_a_task():
    assert quoted_strings('Buy item 1 [red mug] with color [red]; type "hello world" then "".') == {
        "red mug",
        "red",
        "hello world",
    }
    g = OutputGrammar(StepStrings(ids=frozenset({"2"}), options={}, typed=frozenset()))
    assert g.complete("Command: TYPE [2] [whatever]")  # a task that quotes nothing leaves TYPE free


def test_token_boundaries_keep_a_copy_in_the_strings_own_tokens(spm_tokenizer):
    pieces = _piece_table(spm_tokenizer)
    split = token_bounds(spm_tokenizer, pieces)
    s = "search for shoes"
    ids = spm_tokenizer.encode("x [" + s + "]", add_special_tokens=False)
    # independently: where the string's own tokens end, from the decoded prefixes of its encoding
    want = set()
    for n in range(1, len(ids) + 1):
        k = len(spm_tokenizer.decode(ids[:n]).lstrip(" ")) - len("x [")
        if 0 < k <= len(s):
            want.add(k)
    assert split(s) == frozenset(want | {0, len(s)})
    assert len(split(s)) < len(s) + 1, "the test needs a multi-letter token inside the string"
    inner = next(k for k in range(1, len(s)) if k not in split(s))  # a cut inside one of the string's tokens
    g = OutputGrammar(StepStrings(ids=frozenset(), options={}, typed=frozenset({s})), split)
    first = min(k for k in split(s) if k > 0)
    assert g.viable("Thought: [" + s[:first]) and g.viable("Thought: [" + s + "]")
    assert not g.viable("Thought: [" + s[:inner])


SORTS = (
    "URL: /search?q=mug\nTitle: Search: mug\n"
    '[5] link "Sort: Relevance"\n[6] link "Sort: Price low to high"\n[7] link "Sort: Price high to low"\n'
    '[9] link "Mug \\"Oak\\""\ntext "$3.10"\n[12] button "Go"\n[13] button "Go"\n'
)


def test_element_refs_map_each_role_and_name_to_its_ids():
    from rollout.policies.prompt import element_refs, page_form

    assert element_refs(SORTS) == {
        'link "Sort: Relevance"': {"5"},
        'link "Sort: Price low to high"': {"6"},
        'link "Sort: Price high to low"': {"7"},
        'link "Mug \\"Oak\\""': {"9"},
        'button "Go"': {"12", "13"},  # a repeated button: either id
    }
    assert element_refs(page_form(SORTS, "after")) == element_refs(SORTS)  # the ids after the names


@pytest.mark.parametrize(
    "text,viable,complete",
    [
        # the id after a role and name is that element's (the sort link beside it is not)
        ('Thought: Sort as the task asks: click link "Sort: Price low to high"[6', True, False),
        ('Thought: Sort as the task asks: click link "Sort: Price low to high"[7', False, False),
        ('Thought: Sort as the task asks: click link "Sort: Price low to high"[6].\nCommand: CLICK [6]', True, True),
        ('Thought: Click link "Sort: Price high to low"[7].\nCommand: CLICK [7]', True, True),
        ('Thought: Click link "Mug \\"Oak\\""[9].\nCommand: CLICK [9]', True, True),  # an escaped quote in the name
        ('Thought: Click link "Mug \\"Oak\\""[5', False, False),
        ('Thought: Click button "Go"[13].\nCommand: CLICK [13]', True, True),  # either of a repeated button
        ('Thought: Click button "Go"[1', True, False),  # an open group: a prefix of 12 and 13
        ('Thought: Click button "Go"[5', False, False),
        # a role and name the page does not show: the id is left to the other rules
        ('Thought: Click link "Sort: Price"[7].\nCommand: CLICK [7]', True, True),
        # ids before the role: not this rule's
        ('Thought: Click [7] link "Sort: Price low to high".\nCommand: CLICK [7]', True, True),
    ],
)
def test_an_id_after_an_elements_name_is_that_elements(text, viable, complete):
    task = Task("t", "shop", "procedure", "Search for [mug], sort by price from low to high", "/", 5, "test")
    ids = ("5", "6", "7", "9", "12", "13")
    page = Observation("/search?q=mug", "Search: mug", SORTS, tuple(Element(i, "link", "x") for i in ids))
    strings = step_strings(PolicyRequest(task, page, (), 0, "t/0", 0))
    g = OutputGrammar(strings)
    assert g.viable(text) is viable and g.complete(text) is complete
    # without ``name_ids`` (the copy wording) an id after a name is any page id: every case here stays viable
    assert OutputGrammar(strings, name_ids=False).viable(text)
