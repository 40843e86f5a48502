"""The authors' decision rules, transcribed for differential tests, independently of paragen's code.

Each function restates what one reference implementation does, read from its source; the tests
feed the same inputs to it and to paragen and ask for the same decision. Where the source is
named below, the behaviour (not the text) is what is reproduced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# -- DeepConf (facebookresearch/deepconf: deepconf/utils.py, deepconf/wrapper.py) -------------------


def deepconf_token_confs(top_rows: Sequence[Sequence[float]]) -> list[float]:
    """Per token: minus the mean of its top-k log-probabilities, rounded to 3 decimals."""
    return [round(-float(np.mean(row)), 3) for row in top_rows if row]


def deepconf_compute_confidence(
    top: Sequence[Sequence[tuple[int, float]]], sampled: Sequence[tuple[int, float]]
) -> list[float]:
    """``compute_confidence`` over vLLM's per-token logprobs dicts: each dict holds the top-k
    (token, log-probability) pairs and the sampled token's, one entry when the sampled token is
    among the top k; minus the mean of all its values, rounded to 3 decimals."""
    confs = []
    for row, (token, logprob) in zip(top, sampled, strict=True):
        entries = {**dict(row), token: logprob}
        confs.append(round(-float(np.mean(list(entries.values()))), 3))
    return confs


def deepconf_processor_conf(top: Sequence[float]) -> float:
    """The online logits processor's token confidence: minus the sum of the top-k log-probabilities
    (``torch.topk`` of the distribution) over k; the sampled token plays no part."""
    return -sum(top) / len(top)


def deepconf_sliding_means(confs: Sequence[float], group: int) -> list[float]:
    """The online path's group confidences: each full window's mean, rounded to 3 decimals; a
    trace shorter than a window is one group, its plain mean; no tokens at all is [0]."""
    if len(confs) < group:
        return [sum(confs) / len(confs)] if confs else [0]
    return [round(sum(confs[i : i + group]) / group, 3) for i in range(len(confs) - group + 1)]


def deepconf_window_score(confs: Sequence[float], group: int, bottom: float) -> float:
    """The offline analysis' window score: the mean of the bottom ``bottom`` share of windows
    (at least one), or the lowest window for ``bottom == -1``; the plain mean when short."""
    if not confs:
        return 0.0
    if len(confs) < group:
        return float(np.mean(confs))
    means = [sum(confs[i : i + group]) / group for i in range(len(confs) - group + 1)]
    if bottom == -1:
        return min(means)
    count = max(1, int(len(means) * bottom))
    return min(means) if count == 1 else float(np.mean(np.partition(means, count - 1)[:count]))


def deepconf_weighted_vote(answers: Sequence[str], weights: Sequence[float]) -> str | None:
    """Sum the weights per answer string; the largest sum wins, the first seen among equals."""
    totals: dict[str, float] = {}
    for answer, weight in zip(answers, weights, strict=True):
        totals[answer] = totals.get(answer, 0.0) + float(weight)
    return max(totals, key=lambda a: totals[a]) if totals else None


def deepconf_offline(
    answers: Sequence[str | None], confs: Sequence[Sequence[float]], top_percent: float, group: int
) -> tuple[str | None, list[int]]:
    """Offline DeepConf: only traces with an answer; keep those whose lowest-window score is at or
    above ``np.percentile(scores, (1 - top_percent) * 100)``; vote weighted by that score.
    Returns the winner and the kept trace indices."""
    valid = [i for i, a in enumerate(answers) if a]
    if not valid:
        return None, []
    scores = [deepconf_window_score(confs[i], group, -1) for i in valid]
    threshold = np.percentile(scores, (1 - top_percent) * 100)
    kept = [i for i, s in zip(valid, scores, strict=True) if s >= threshold]
    kept_scores = [s for s in scores if s >= threshold]
    return deepconf_weighted_vote([str(answers[i]) for i in kept], kept_scores), kept


def deepconf_online(
    warmup: Sequence[tuple[str | None, Sequence[float]]],
    final: Sequence[tuple[str | None, Sequence[float]]],
    keep_percent: float,
    group: int,
) -> tuple[str | None, float, int]:
    """Online DeepConf: the bar is the (100 - keep)th percentile of the warm-up's lowest group
    confidences; a trace votes (weight: its lowest group confidence) when it has an answer and its
    lowest group confidence reaches the bar, warm-up and final alike (a final trace the
    processor stopped falls below the bar by construction). Returns (winner, bar, voters)."""
    lowest = [min(deepconf_sliding_means(c, group)) for _, c in warmup]
    bar = float(np.percentile(lowest, 100 - keep_percent))
    votes: list[tuple[str, float]] = []
    for answer, confs in [*warmup, *final]:
        low = min(deepconf_sliding_means(confs, group))
        if low >= bar and answer:
            votes.append((answer, low))
    winner = deepconf_weighted_vote([a for a, _ in votes], [w for _, w in votes])
    return winner, bar, len(votes)


# -- Dynasor-CoT (hao-ai-lab/Dynasor: dynasor/cot.py, dynasor/core/entropy.py) ----------------------

DYNASOR_UNCERTAIN = ("wait", "hold", "but", "okay", "no", "hmm")


def dynasor_obtain_answer(probe: str) -> str:
    """The probe's text before its first ``}`` that closes no ``{``; "" when there is none."""
    depth = 0
    for i, char in enumerate(probe):
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return probe[:i]
            depth -= 1
    return ""


def dynasor_stop_index(probes: Sequence[str], window: int, equal: Callable[[str, str], bool]) -> int | None:
    """After which probe (0-based) the client loop ends the trace, or None: the last ``window``
    answers form one equivalence class (each compared with the class representatives), none is
    empty, and none of their responses holds an uncertain word (as a substring, lower-cased)."""
    answers: list[str] = []
    for i, probe in enumerate(probes):
        answers.append(dynasor_obtain_answer(probe))
        last, texts = answers[-window:], probes[max(0, i + 1 - window) : i + 1]
        classes: list[str] = []
        for answer in last:
            if not any(equal(answer, rep) for rep in classes):
                classes.append(answer)
        certain = [not any(w in t.lower() for w in DYNASOR_UNCERTAIN) for t in texts]
        if len(classes) == 1 and sum(a != "" for a in last) == window and sum(certain) == window:
            return i
    return None


# -- FFS-k (Aradhye2002/art_of_tts: evaluation/evaluate_vanilla.py) ------------------------------------


def ffs_k(data: Sequence[tuple[int, str]], k: int) -> tuple[int, list[int]]:
    """(cutoff, voters): the k-th smallest length among answered samples, or the longest of all
    samples when fewer than k answered; every answered sample no longer than the cutoff votes."""
    valid = sorted(length for length, pred in data if pred != "NO_ANSWER")
    cutoff = valid[k - 1] if len(valid) >= k else max(length for length, _ in data)
    return cutoff, [i for i, (length, pred) in enumerate(data) if pred != "NO_ANSWER" and length <= cutoff]


# -- Beam search (huggingface/search-and-learn: sal/search/beam_search.py) ----------------------------


def beam_duplicates(active: Sequence[int], n: int) -> list[int]:
    """The active beams repeated in turn until there are exactly ``n`` of them."""
    repeats = n // len(active) + 1
    return (list(active) * repeats)[:n]


def beam_survivors(scores: Sequence[float], width: int) -> set[int]:
    """The active beams kept: ``np.argsort(np.array(agg_scores).flatten())[-width:]``.

    numpy's default argsort promises no order among equal scores (numpy 2's SIMD sorts vary it by
    CPU); the order taken is a stable sort's, the one numpy 1's insertion sort gave arrays this
    small and that numpy still gives a run of equal scores: of equal beams the later survive.
    """
    return {int(i) for i in np.argsort(np.array(scores).flatten(), kind="stable")[-width:]}


def beam_list(active: Sequence[int], n: int) -> list[int]:
    """The beam list of a depth: ``(active_beams * repeats)[:n]``, entry by entry (which kept beam
    each proposal continues, in list order)."""
    return beam_duplicates(active, n)


def weighted_largest_sum(
    answers: Sequence[str], scores: Sequence[float], canonical: Callable[[str], str]
) -> str:
    """``find_answer_with_largest_sum`` (sal/utils/math.py): scores summed per canonical form, in
    sample order; the first canonical form with the largest sum wins, returned as first written.
    An unanswered solution's answer is "" (``extract_answer``), which forms a group like any."""
    groups: dict[str, float] = {}
    first: dict[str, str] = {}
    for answer, score in zip(answers, scores, strict=True):
        form = canonical(answer)
        groups[form] = groups.get(form, 0.0) + score
        first.setdefault(form, answer)
    return first[max(groups, key=lambda form: groups[form])]


# -- RSA (HyperPotatoNeo/RSA: eval_loop.py evaluate_k_answers_math, rewards/math.py) ----------------


def rsa_majority(extracted: Sequence[str], is_equiv: Callable[[str, str], bool]) -> str:
    """Greedy clusters in population order: each answer joins the first cluster whose
    representative (its first answer) it equals, ``is_equiv(answer, rep)``; the first cluster with
    the most answers wins, its representative returned. An unanswered response's answer is ""."""
    clusters: list[list[str]] = []
    for answer in extracted:
        for cluster in clusters:
            if is_equiv(answer, cluster[0]):
                cluster.append(answer)
                break
        else:
            clusters.append([answer])
    return max(clusters, key=len)[0]


def rsa_is_equiv(str1: str, str2: str) -> bool:
    """``rewards/math.py is_equiv``: each wrapped in $...$ unless it holds a $, parsed by
    math-verify, ``verify(gold=parse(str2), pred=parse(str1))``."""
    from math_verify import parse, verify

    str1 = str1 if "$" in str1 else f"${str1}$"
    str2 = str2 if "$" in str2 else f"${str2}$"
    return bool(
        verify(parse(str2, parsing_timeout=None), parse(str1, parsing_timeout=None), timeout_seconds=None)
    )


# -- FFS-k's vote (art_of_tts: evaluation/evaluate_vanilla.py) ------------------------------------------


def ffs_vote(preds: Sequence[str]) -> str:
    """``pred_dict`` in sample order, then ``max(pred_dict, key=...)``: the first answer with the
    most votes in sample order; answers compared as written."""
    counts: dict[str, int] = {}
    for pred in preds:
        counts[pred] = counts.get(pred, 0) + 1
    return max(counts, key=lambda pred: counts[pred])
