"""The demo on real engines (``ascend-fleet dev --real --engines vllm``): its fleet fitted to what can run.

Each replica's leader is one real ``vllm serve`` of the tiny model, about 3 GiB, and the dev cluster runs at
most ``--max-real-engines`` of them (default 2). The story needs a scale-up, a restart and a scale-down, so
at least two engines; a fleet that would grow past the limit is shortened to start one replica below it.
"""

from __future__ import annotations

import copy

# A scale-up needs a second replica beside the first.
MIN_ENGINES = 2


class TooFewEngines(ValueError):
    """The story cannot be told with this many real engines; the message says what would fit."""


def fit_story(doc: dict, limit: int) -> tuple[dict, str | None]:
    """``doc`` with its replicas fitted to ``limit`` real engines, and a line saying what changed (None: nothing).

    The fleet starts at ``min(data, limit - 1)`` replicas and may grow to ``limit``; rules, windows and
    cooldowns stay as written. Raises :class:`TooFewEngines` when ``limit`` leaves no room for a scale-up.
    """
    name = doc["metadata"]["name"]
    if limit < MIN_ENGINES:
        raise TooFewEngines(
            f"the demo's story needs a scale-up, so at least {MIN_ENGINES} real engines at once (about 3 GiB "
            f"each, 6 GiB for two): run it with --max-real-engines {MIN_ENGINES}, not {limit}"
        )
    spec = doc.get("spec") or {}
    data = int((spec.get("parallelism") or {}).get("data", 1))
    top = int((spec.get("autoscaling") or {}).get("maxReplicas", data))
    if top <= limit:
        return doc, None
    fitted = copy.deepcopy(doc)
    start = min(data, limit - 1)
    fitted["spec"].setdefault("parallelism", {})["data"] = start
    autoscaling = fitted["spec"].setdefault("autoscaling", {})
    autoscaling["maxReplicas"] = limit
    autoscaling["minReplicas"] = min(int(autoscaling.get("minReplicas", 1)), start)
    return fitted, (
        f"Real engines: at most {limit} run at once (about 3 GiB each), so {name} runs {start} to {limit} "
        f"replicas instead of {data} to {top} (--max-real-engines N allows more)."
    )
