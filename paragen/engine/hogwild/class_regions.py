"""What several rows of a group read alike, gathered once for all of them (the torch attention).

A class is the rows that read the same unshifted non-own slots (a session's prompt and history:
its common region); its pieces are the long segments two or more of its rows read (the workers'
current steps). The slots every class's common region begins with (prompts that begin alike hold
the same blocks: ``cache.PromptHeads``) are the head, gathered once for the whole group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paragen.engine.attention import in_fp32
from paragen.engine.hogwild.layout import Key, Layout, gather_index, hide_future, is_piece
from paragen.engine.hogwild.view import RowView, Tables, shift_tables, turned_back_each

# Classes whose common regions begin with this many slots alike or more read them as one head, gathered
# once for the whole group, in groups that attend in fp32 only: there the gather's cast is saved, in
# bf16 only the gather, which the head's extra operators outweigh (docs/hogwild.md).
HEAD_MIN = 16


@dataclass(slots=True)
class ClassRegions:
    """What several rows of a group read alike, gathered once per class of rows (a session's workers).

    A class is the rows that read the same unshifted non-own slots (the session's prompt and
    history: the common region, P slots, scored by each row's query at its own position). Its
    pieces are the long segments two or more of its rows read wherever their views hold them (the
    workers' current steps): gathered once, scored by each row's query turned back by that row's
    shift of the piece. Softmax still runs per row over all of its view, so the result is the plain
    attention; only the gathers and matmuls are shared (without pieces, a session of W workers would
    gather every current step W times a pass).
    """

    gather: torch.Tensor  # [2 * kv_heads * C * (P + pieces)]: each class's slots by region, padded
    head: int  # H: the slots every class's common region begins with, gathered once for the group
    head_gather: torch.Tensor  # [2 * kv_heads * H]
    width: int  # P: the rest of the common region
    pieces: tuple[tuple[int, int], ...]  # per piece k: where its slots start after P, how many
    cos: torch.Tensor  # [C * R, T, K, 1, D] each place's queries turned back by its shift of piece k
    sin: torch.Tensor
    num_classes: int  # C
    per_class: int  # R: the most rows a class has (fewer are padded with row 0's queries)
    sources: torch.Tensor  # [C * R]: the row whose queries fill each class place
    places: torch.Tensor  # [B]: each row's place (class * R + index in class)

    @property
    def total(self) -> int:
        """S: the head, the rest of the common region and every piece."""
        return self.head + self.width + sum(width for _, width in self.pieces)


def find_classes(commons: list[list[int]]) -> list[list[int]] | None:
    """Rows grouped by the unshifted non-own slots they read; None when no two rows share them."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for i, common in enumerate(commons):
        classes.setdefault(tuple(common), []).append(i)
    if max(len(rows) for rows in classes.values()) < 2 or not any(classes):
        return None
    return list(classes.values())


def shared_pieces(rows: list[RowView], classes: list[list[int]]) -> list[list[tuple[Key, list[int]]]]:
    """Per class: the segments two or more of its rows read outside the common region, longest first."""
    out = []
    for members in classes:
        slots_of: dict[Key, list[int]] = {}
        count: dict[Key, int] = {}
        for i in members:
            last = len(rows[i].slots) - 1
            for j, (slots, shift) in enumerate(zip(rows[i].slots, rows[i].shifts, strict=True)):
                if is_piece(slots, shift, j == last):
                    key = (slots[0], len(slots))
                    slots_of[key] = list(slots)
                    count[key] = count.get(key, 0) + 1
        shared = [(key, slots) for key, slots in slots_of.items() if count[key] > 1]
        out.append(sorted(shared, key=lambda piece: -len(piece[1])))
    return out


def class_regions(
    commons: list[list[int]],
    classes: list[list[int]],
    pieces: list[list[tuple[Key, list[int]]]],
    layouts: list[Layout],
    heads: torch.Tensor,
    queries: Tables,
    tables: Tables,
) -> ClassRegions:
    """The class regions of a group: slots, gather index, places and each place's piece rotations."""
    num_tokens = len(layouts) * queries[0].shape[1]
    head = _head([commons[rows[0]] for rows in classes]) if in_fp32(num_tokens, tables[0].device) else 0
    head_slots = torch.tensor(commons[classes[0][0]][:head], dtype=torch.long)
    commons = [common[head:] for common in commons]
    width, per_class = max(len(c) for c in commons), max(len(rows) for rows in classes)
    num_pieces = max(len(p) for p in pieces)
    widths = [max(len(p[k][1]) for p in pieces if k < len(p)) for k in range(num_pieces)]
    starts = [sum(widths[:k]) for k in range(len(widths))]
    slots = torch.zeros(len(classes), width + sum(widths), dtype=torch.long)
    sources = torch.zeros(len(classes), per_class, dtype=torch.long)
    shifts = torch.zeros(len(classes) * per_class, len(widths), dtype=torch.long)  # 0: row 0's padding
    places = [0] * sum(len(rows) for rows in classes)
    for c, (rows, class_pieces) in enumerate(zip(classes, pieces, strict=True)):
        slots[c, : len(commons[rows[0]])] = torch.tensor(commons[rows[0]], dtype=torch.long)
        for (_, piece_slots), at in zip(class_pieces, starts, strict=False):
            slots[c, width + at : width + at + len(piece_slots)] = torch.tensor(piece_slots, dtype=torch.long)
        sources[c, : len(rows)] = torch.tensor(rows, dtype=torch.long)
        for r, row in enumerate(rows):
            places[row] = c * per_class + r
            for k, (key, _) in enumerate(class_pieces):
                shifts[places[row], k] = layouts[row].pieces.get(key, 0)
    device = tables[0].device
    sources = sources.view(-1).to(device)
    cos, sin = turned_back_each(
        queries[0][sources], queries[1][sources], shift_tables(tables, -shifts.to(device))
    )
    return ClassRegions(
        gather=gather_index(heads, slots, width, starts, widths).to(device),
        head=head,
        head_gather=(heads + head_slots.view(1, -1)).view(-1).to(device),
        width=width,
        pieces=tuple(zip(starts, widths, strict=True)),
        cos=cos,
        sin=sin,
        num_classes=len(classes),
        per_class=per_class,
        sources=sources,
        places=torch.tensor(places, device=device),
    )


def _head(commons: list[list[int]]) -> int:
    """How many slots every class's common region begins with alike (0 below HEAD_MIN or for one class)."""
    if len(commons) < 2:
        return 0
    low, high = min(commons), max(commons)  # what all share, the first and last in order share
    head = next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))
    return head if head >= HEAD_MIN else 0


def show_class(
    visible: torch.Tensor, lay: Layout, regions: ClassRegions, pieces: list[tuple[Key, list[int]]]
) -> None:
    """What a row reads of its class's regions ([T, S]): its common slots, the pieces in its view."""
    visible[:, : len(lay.common)] = True  # the head, then the rest of the common region
    for (key, slots), (start, _) in zip(pieces, regions.pieces, strict=False):  # a class may have fewer
        if key in lay.pieces:
            at = regions.head + regions.width + start
            visible[:, at : at + len(slots)] = True
            if key == lay.own_key:
                hide_future(visible, at, len(slots))
