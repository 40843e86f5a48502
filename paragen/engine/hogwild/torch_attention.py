"""Attention over a view of segments whose keys are stored rotated at their own positions (Hogwild!).

A row's view is an ordered list of segments; segment ``s`` sits at offset ``o_s`` (the summed
lengths of the segments before it). Its keys are stored rotated at ``b_s + j`` (``b_s``, its base:
the offset it had in the view that first wrote it, or where the history it was folded into ends).
RoPE is relative, so a query at view position ``p`` scores the key stored at ``b_s + j`` as a
plain forward over the flattened view would (key at ``o_s + j``) once the query is rotated to
``p - (o_s - b_s)`` instead of ``p``: the shift can move to the query side. A row's slots fall in
regions by how they are read:

- unshifted (the prompt, the history and the headers before it, in the layouts that keep them at
  the head of every view): scored by the query at its own position. Those that several rows of a
  session read alike are their class's common region (``class_regions.py``), gathered once for
  all of them; the slots every class's common region begins with (prompts that begin alike hold
  the same blocks: ``cache.PromptHeads``) are the head, gathered once for the whole group and
  scored by every row's query in one matmul (in groups that attend in fp32: ``HEAD_MIN``);
- long segments several rows of a class read (the workers' current steps, each read by every
  worker at a shift of its own): the class's pieces, gathered once, scored by each row's query
  rotated back by that row's shift of the piece (not gathered W times for a W-worker session);
- short shifted segments (under ``SHORT_SEGMENT`` slots: the headers between steps): their few
  keys are rotated by their shifts after the gather and scored with the unshifted ones;
- the other long shifted segments (one row's own, in the interleaved layout): keys as stored,
  scored by the query rotated once per distinct shift. A row's k-th shift's slots sit at the same
  place in every row of the group (its "piece"), so each shift costs one score matmul over its own
  slots. Rotating those keys instead would take four elementwise passes over every current step,
  every pass and layer: more than the matmuls.

The gathered keys are laid out region by region, each one contiguous matrix per KV head and row
or class (see :func:`paragen.engine.hogwild.layout.gather_index`), then one softmax over the whole
view and one value matmul per kind of region. Which slot goes to which region, and the batch's
gather index, masks and rotations: ``groups.py``.

The view is gathered slot by slot (not in whole blocks), densely: a 3-token header costs 3 slots.
"""

from __future__ import annotations

import torch

from paragen.engine.attention import Attend, in_fp32
from paragen.engine.hogwild.class_regions import ClassRegions
from paragen.engine.hogwild.groups import RowGroup


def _mask5(g: RowGroup) -> torch.Tensor:
    return g.mask.view(1, g.num_rows, g.num_new, 1, -1)  # [1, B, T, 1, L] against [kv_heads, B, T, group, L]


def _turns(g: RowGroup, work: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The class places' query rotations for their shared pieces, in the work dtype."""
    return None if g.regions is None else (g.regions.cos.to(work), g.regions.sin.to(work))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    swapped = x.view(*x.shape[:-1], 2, -1).flip(-2).view(x.shape)
    return (x * cos).addcmul_(swapped, sin)


def attention(
    groups: list[RowGroup],
    *,
    num_tokens: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    scale: float,
    dtype: torch.dtype,
) -> Attend:
    """Every group's queries against their views; the output rows follow the forward's token order."""
    nq, nkv, d = num_heads, num_kv_heads, head_dim
    group = nq // nkv
    device = groups[0].gather.device
    works = [torch.float32 if in_fp32(g.num_rows * g.num_new, device) else dtype for g in groups]
    prepared = [
        (
            g,
            w,
            g.cos.to(w),
            g.sin.to(w),
            g.key_cos.to(w),
            g.key_sin.to(w),
            _Tail(g, w, nkv, group),
            _mask5(g),
            _turns(g, w),
        )
        for g, w in zip(groups, works, strict=True)
    ]

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(num_tokens, nq * d, dtype=dtype, device=device)
        for g, work, cos, sin, key_cos, key_sin, tail, mask, turns in prepared:
            b, t = g.num_rows, g.num_new
            raw = qkv[g.start : g.start + b * t, :nq].to(work).view(b, t, nq, d)
            q_heads = _rotate(raw, cos, sin).view(b, t, nkv, group, d).permute(2, 0, 1, 3, 4)
            q_rows = q_heads.reshape(nkv * b, t * group, d)  # [kv_heads * B, T * group, D]
            flat = kv.view(-1, d).index_select(0, g.gather).to(work)  # regions: see _gather
            keys = flat[: nkv * b * g.tail_from].view(nkv * b, g.tail_from, d)
            if key_cos.shape[1]:  # short shifted segments' keys, rotated to their places in the view
                turned = keys[:, g.turned_from :].view(nkv, b, -1, d)
                turned.copy_(_rotate(turned, key_cos, key_sin))
            scores = torch.bmm(q_rows, keys.transpose(1, 2))
            if tail.width:
                scores = torch.cat((scores, *tail.scores(raw, flat)), dim=-1)
            values = flat[-nkv * b * (g.tail_from + tail.width) :].view(nkv * b, -1, d)
            scores = scores.view(nkv, b, t, group, -1)
            classes = None
            if g.regions is not None and turns is not None:
                classes = _ClassAttention(g.regions, kv, work, q_heads, raw, turns)
                scores = torch.cat((classes.scores(), scores), dim=-1)
            if scale != 1.0:
                scores.mul_(scale)
            scores.add_(mask)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(work)
            rest = probs if classes is None else probs[..., classes.regions.total :]
            rest = rest.reshape(nkv * b, t * group, -1)
            heads_out = torch.bmm(rest, values).view(nkv, b, t, group, d)
            if classes is not None:
                heads_out += classes.values(probs[..., : classes.regions.total])
            out[g.start : g.start + b * t].view(b, t, nkv, group, d).copy_(heads_out.permute(1, 2, 0, 3, 4))
        return out

    return attend


class _Tail:
    """A group's scores of its long shifted segments: per shift index, its rotated queries and its piece."""

    def __init__(self, g: RowGroup, work: torch.dtype, nkv: int, group: int) -> None:
        b, t, num_shifts = g.tail_cos.shape[:3]
        self.width = sum(width for _, width in g.pieces)
        self.tail_from = g.tail_from
        self.pieces = [(k, start, width) for k, (start, width) in enumerate(g.pieces) if width]
        self.cos, self.sin = g.tail_cos.to(work), g.tail_sin.to(work)
        self.shape = (b, t, num_shifts, nkv, group)

    def scores(self, raw: torch.Tensor, flat: torch.Tensor) -> list[torch.Tensor]:
        """[kv_heads * B, T * group, width] per piece, from ``raw`` queries [B, T, heads, D] (not
        rotated yet) and the gathered rows (``flat``: each piece's keys as stored, see _gather)."""
        b, t, num_shifts, nkv, group = self.shape
        d = raw.shape[-1]
        rotated = _rotate(raw.unsqueeze(2), self.cos, self.sin)  # [B, T, S, heads, D]
        rows = rotated.view(b, t, num_shifts, nkv, group, d).permute(2, 3, 0, 1, 4, 5)
        rows = rows.reshape(num_shifts, nkv * b, t * group, d)
        out = []
        for k, start, width in self.pieces:
            at = nkv * b * (self.tail_from + start)
            keys = flat[at : at + nkv * b * width].view(nkv * b, width, d)
            out.append(torch.bmm(rows[k], keys.transpose(1, 2)))
        return out


class _ClassAttention:
    """One layer's class regions of a group (``ClassRegions``): the head gathered once and scored
    by every row's query in one matmul; each class's keys gathered once, its common region scored by
    its rows' queries stacked, each piece by their queries turned back by each row's shift of it."""

    def __init__(
        self,
        regions: ClassRegions,
        kv: torch.Tensor,
        work: torch.dtype,
        q_heads: torch.Tensor,
        raw: torch.Tensor,
        turns: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        self.regions = regions
        self.shape = q_heads.shape  # [kv_heads, B, T, group, D]
        nkv, _, t, group, d = self.shape
        c = regions.num_classes
        self.flat = (
            kv.view(-1, d).index_select(0, regions.gather).to(work)
        )  # regions: see layout.gather_index
        self.head = kv.view(-1, d).index_select(0, regions.head_gather).to(work)  # [2 * kv_heads * H, D]
        self.q_heads = q_heads
        queries = q_heads.reshape(nkv, -1, d * t * group).index_select(1, regions.sources)
        self.queries = queries.view(nkv * c, -1, d)  # [kv_heads * C, R * T * group, D]
        self.raw, self.turns = raw, turns  # [B, T, heads, D] not rotated yet; each place's rotations

    def scores(self) -> torch.Tensor:
        """[kv_heads, B, T, group, S]: every row's scores against its class's regions."""
        nkv, b, t, group, d = self.shape
        regions = self.regions
        c, r, p = regions.num_classes, regions.per_class, regions.width
        common = self.flat[: nkv * c * p].view(nkv * c, p, d)  # the common region after the head
        parts = [torch.bmm(self.queries, common.transpose(1, 2))]  # [kv*C, R*T*group, P]
        if regions.pieces:
            turned = _rotate(self.raw.index_select(0, regions.sources).unsqueeze(2), *self.turns)
            rows = turned.view(c * r, t, -1, nkv, group, d).permute(2, 3, 0, 1, 4, 5)
            rows = rows.reshape(len(regions.pieces), nkv * c, r * t * group, d)
            for k, (start, width) in enumerate(regions.pieces):
                at = nkv * c * (p + start)
                keys = self.flat[at : at + nkv * c * width].view(nkv * c, width, d)
                parts.append(torch.bmm(rows[k], keys.transpose(1, 2)))
        scores = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        per_place = scores.view(nkv, -1, t * group * (regions.total - regions.head))
        by_row = per_place.index_select(1, regions.places).view(nkv, b, t, group, -1)
        if not regions.head:
            return by_row
        keys = self.head[: nkv * regions.head].view(nkv, regions.head, d)
        head = torch.bmm(self.q_heads.reshape(nkv, -1, d), keys.transpose(1, 2))  # every row at once
        return torch.cat((head.view(nkv, b, t, group, -1), by_row), dim=-1)

    def values(self, probs: torch.Tensor) -> torch.Tensor:
        """The class regions' share of every row's output, from its probabilities [kv, B, T, group, S]."""
        nkv, b, t, group, d = self.shape
        regions = self.regions
        c, h, s = regions.num_classes, regions.head, regions.total - regions.head
        placed = probs.new_zeros(nkv, c * regions.per_class, t * group * s)
        placed.index_copy_(1, regions.places, probs[..., h:].reshape(nkv, b, -1))
        values = self.flat[nkv * c * s :].view(nkv * c, s, d)
        out = torch.bmm(placed.view(nkv * c, -1, s), values)  # [kv*C, R*T*group, D]
        per_place = out.view(nkv, -1, t * group * d)
        by_row = per_place.index_select(1, regions.places).view(nkv, b, t, group, d)
        if h:
            head_values = self.head[nkv * h :].view(nkv, h, d)
            by_row += torch.bmm(probs[..., :h].reshape(nkv, -1, h), head_values).view(nkv, b, t, group, d)
        return by_row
