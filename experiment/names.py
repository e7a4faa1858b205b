"""Model names of a pipeline run: ``<method>[-r<round>][-s<seed>]`` and the labels Table 1 shows for them."""

from __future__ import annotations

DISPLAY = {
    "base": "base",
    "sft": "SFT",
    "kto": "KTO",
    "kto_tree": "KTO-Tree",
    "dpo": "DPO",
    "tgpo": "TGPO",
    "traj_dpo": "Trajectory DPO",
    "search_dpo": "DPO (search)",
    "judge_dpo": "DPO (judge)",
    "sft_more": "SFT (continued)",
}
# what the pipeline can train, in Table 1's order: each a training section of the pipeline config (configs/<method>.py),
# trained on round 1's tree dataset, except Agent Q's baselines: traj_dpo on trajectory pairs of the same episodes,
# search_dpo (DPO) on the node pairs of a search collection that SFT's model proposes in, and the computer-use
# recipe's judge_dpo (DPO) on DPO-1/2/3 pairs of SFT's samples at the successful episodes' steps (docs/method.md §9),
# and the control sft_more: SFT trained on from SFT for a preference stage's pass with the SFT loss alone, so a
# preference method's gain over SFT can be told apart from the extra pass of its SFT term (docs/method.md §7)
MODEL_KINDS = ("sft", "sft_more", "kto", "kto_tree", "dpo", "tgpo", "traj_dpo", "search_dpo", "judge_dpo")
# a kind whose training method is another's (else the kind itself)
SECTION_METHOD = {"search_dpo": "dpo", "judge_dpo": "dpo", "sft_more": "sft"}


def model_name(method: str, r: int = 1, seed: int | None = None) -> str:
    """``<method>[-r<round>][-s<seed>]`` (the seed only when the pipeline trains several)."""
    name = method if r == 1 else f"{method}-r{r}"
    return name if seed is None else f"{name}-s{seed}"


def first_phase(name: str) -> str:
    """The first phase's model of a two-phase SFT (``sft_continue``): ``<name>-first``, beside the SFT model."""
    return f"{name}-first"


def parse_name(name: str) -> tuple[str, int, int | None]:
    """(method, round, seed) of a model name."""
    rest, seed = name, None
    if "-s" in rest and rest.rsplit("-s", 1)[1].isdigit():
        rest, s = rest.rsplit("-s", 1)
        seed = int(s)
    method, r = rest, 1
    if "-r" in rest and rest.rsplit("-r", 1)[1].isdigit():
        method, rr = rest.rsplit("-r", 1)
        r = int(rr)
    return method, r, seed


def method_label(name: str) -> str:
    """The Table 1 row of a model: its method and round, seeds pooled ("TGPO", "TGPO (round 2)")."""
    method, r, _ = parse_name(name)
    return DISPLAY.get(method, method) + (f" (round {r})" if r > 1 else "")


def display_name(name: str) -> str:
    """A model's label for tables: its method's label, with the training seed when the name has one."""
    seed = parse_name(name)[2]
    return method_label(name) + (f" [seed {seed}]" if seed is not None else "")
