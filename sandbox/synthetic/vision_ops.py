"""torchvision's ``nms`` (and ``qnms``) in pure PyTorch, for a torchvision whose compiled
operators do not load.

The torchvision wheels on PyPI are CUDA builds: their ``_C.so`` needs the CUDA torch
libraries and does not load with a CPU-only torch. torchvision then imports without its
operators, except that ``torchvision/_meta_registrations.py`` registers fake kernels for
``torchvision::nms`` and ``qnms`` unconditionally, and that fails the whole ``import torchvision``
(``operator torchvision::nms does not exist``). Defining ``nms`` here, before that line
runs, makes torchvision importable: models, transforms, datasets and utils are Python.
Detection code that calls ``nms`` gets the same greedy suppression torchvision computes;
the other operators (``roi_align``, ``deform_conv2d``, ...) stay missing and fail where
they are called, saying so.
"""

from __future__ import annotations

from typing import Any

import torch

from .data import record

ARGUMENTS = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
_LIBRARY: list[Any] = []  # the torch.library fragment, kept alive once defined


def nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes kept, by decreasing score: a box is dropped when its IoU with
    a kept, higher-scoring box exceeds ``iou_threshold`` (torchvision.ops.nms)."""
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = scores.detach().to("cpu").argsort(descending=True, stable=True)
    boxes = dets.detach().to("cpu", torch.float64)[order]
    wh = (boxes[:, 2:] - boxes[:, :2]).clamp(min=0)
    area = wh[:, 0] * wh[:, 1]
    top_left = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    bottom_right = torch.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    overlap = (bottom_right - top_left).clamp(min=0)
    inter = overlap[..., 0] * overlap[..., 1]
    iou = inter / (area[:, None] + area[None, :] - inter)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)].to(dets.device)


def qnms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """``nms`` of quantized boxes and scores."""
    return nms(dets.dequantize(), scores.dequantize(), iou_threshold)


# the operators _meta_registrations.py registers without asking whether they exist
OPERATORS = {"nms": nms, "qnms": qnms}


def define() -> None:
    """Register the operators above (once), for every device."""
    if _LIBRARY:
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for name, kernel in OPERATORS.items():
        library.define(name + ARGUMENTS)
        library.impl(name, kernel, "CompositeExplicitAutograd")
    _LIBRARY.append(library)
    record(
        "torchvision",
        "operators",
        0,
        standin="nms in pure PyTorch: torchvision's compiled operators do not load here",
    )
