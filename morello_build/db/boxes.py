"""Boxes of the synthesis DB (store.py): shape ranges and lower memory limits answered by one decision,
and how boxes of one key, decision and upper limits merge without claiming an unsynthesized shape."""

from __future__ import annotations


# A box is [alo, ahi, blo, bhi, clo, chi, llo, vlo, rlo, nlo, nhi, points]: shape coordinate ranges, the
# lower memory limits (the upper ones are the group's), the range of cost per volume, specs merged.
def covers(a, b) -> bool:
    """Whether box a answers every point of box b (same decision and upper limits assumed)."""
    return all(a[2 * d] <= b[2 * d] and b[2 * d + 1] <= a[2 * d + 1] for d in range(3)) and all(
        a[i] <= b[i] for i in (6, 7, 8)
    )


def union(a, b):
    """One box answering exactly the shapes of a and b, if their shapes form a box (equal in two dims,
    touching or overlapping in the third): lower limits are the larger of the two (every program fits),
    costs the union of their ranges. None if the shapes do not form a box."""
    diff = [d for d in range(3) if (a[2 * d], a[2 * d + 1]) != (b[2 * d], b[2 * d + 1])]
    if len(diff) > 1:
        return None
    out = list(a)
    if diff:
        d = diff[0]
        if a[2 * d] > b[2 * d + 1] + 1 or b[2 * d] > a[2 * d + 1] + 1:
            return None
        out[2 * d], out[2 * d + 1] = min(a[2 * d], b[2 * d]), max(a[2 * d + 1], b[2 * d + 1])
        out[11] = a[11] + b[11]
    else:
        out[11] = max(a[11], b[11])  # the same shapes twice: the same specs
    for i in (6, 7, 8):
        out[i] = max(a[i], b[i])
    out[9], out[10] = min(a[9], b[9]), max(a[10], b[10])
    return out


def merge_boxes(boxes: list) -> list:
    """Merge boxes (see above) of one key, decision and upper limits whose shapes share a face or
    coincide. The merged shapes are exactly the union of the inputs': no unsynthesized shape is claimed."""
    boxes = [list(b) for b in boxes]
    changed = True
    while changed and len(boxes) > 1:
        changed = False
        for d in range(3):
            others = [i for i in range(6) if i // 2 != d]
            boxes.sort(key=lambda b: ([b[i] for i in others], b[2 * d]))
            out = [boxes[0]]
            for b in boxes[1:]:
                merged = union(out[-1], b) if all(out[-1][i] == b[i] for i in others) else None
                if merged is not None:
                    out[-1] = merged
                    changed = True
                else:
                    out.append(b)
            boxes = out
    return boxes
