"""Hand-made episode records in the recording format (rollout/episode_format.py), for tests that write episodes."""

CHECK = {"success": False, "score": 0.0, "progress": "", "done": False}


def step_record(t: int, url: str = "/", command: str | None = "CLICK [1]", **fields) -> dict:
    """Step ``t`` on page ``url`` with ``command`` (None: an output that did not parse); ``fields`` override."""
    return {
        "step": t,
        "url": url,
        "norm_url": url,
        "title": "Page",
        "observation": f"URL: {url}",
        "check": CHECK,
        "output": f"Thought: go\nCommand: {command}" if command else "garbage",
        "thought": "go" if command else "",
        "command": command,
        "command_name": command.split(" ")[0] if command else None,
        "target": None,
        "format_ok": command is not None,
        "error": None,
        "effect": None,
        **fields,
    }


def summary_record(task_id: str, run: int, status: str, steps: int = 1, **fields) -> dict:
    """The summary of run ``run`` of ``task_id`` ending in ``status``; ``fields`` override."""
    errored = status == "errored"
    return {
        "task_id": task_id,
        "run": run,
        "env": "shop",
        "family": "webshop",
        "split": "train",
        "status": status,
        "success": status == "success",
        "score": float(status == "success"),
        "steps": steps,
        "end_reason": "error" if errored else "stop",
        "final": None
        if errored
        else {"url": "/", "norm_url": "/", "title": "Page", "observation": "URL: /", "check": CHECK},
        "error": {"type": "BrowserCrashed", "message": "gone"} if errored else None,
        **fields,
    }
