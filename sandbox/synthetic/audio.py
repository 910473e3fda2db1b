"""``torchaudio.datasets`` stand-ins: label-dependent tones, shaped like the real items."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from . import data

SPEECH_LABELS = [
    "backward",
    "bed",
    "bird",
    "cat",
    "dog",
    "down",
    "eight",
    "five",
    "follow",
    "forward",
    "four",
    "go",
    "happy",
    "house",
    "learn",
    "left",
    "marvin",
    "nine",
    "no",
    "off",
    "on",
    "one",
    "right",
    "seven",
    "sheila",
    "six",
    "stop",
    "three",
    "tree",
    "two",
    "up",
    "visual",
    "wow",
    "yes",
    "zero",
]


class SPEECHCOMMANDS(Dataset):
    """Items: (waveform [1, 16000] float32, 16000, label, speaker_id, utterance_number)."""

    sample_rate = 16000

    def __init__(self, root: Any = None, *_: Any, subset: str | None = None, **__: Any) -> None:
        train = subset in (None, "training")
        n = data.size_for(train)
        gen = data.generator("torchaudio", "SPEECHCOMMANDS", subset or "all")
        self._targets = data.labels(n, len(SPEECH_LABELS), gen)
        self._waves = data.waveforms(n, self.sample_rate, self._targets, self.sample_rate, gen)
        data.record("torchaudio", "SPEECHCOMMANDS", n, split=subset or "all")

    def __len__(self) -> int:
        return len(self._targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, str, str, int]:
        label = SPEECH_LABELS[int(self._targets[i])]
        return self._waves[i], self.sample_rate, label, f"speaker{i % 16:02d}", i % 5


class YESNO(Dataset):
    """Items: (waveform [1, 16000] float32, 8000, eight 0/1 labels)."""

    sample_rate = 8000
    size = 60  # the real corpus has 60 recordings

    def __init__(self, root: Any = None, *_: Any, **__: Any) -> None:
        gen = data.generator("torchaudio", "YESNO")
        self._labels = torch.randint(0, 2, (self.size, 8), generator=gen)
        first = self._labels[:, 0]
        self._waves = data.waveforms(self.size, 16000, first, self.sample_rate, gen)
        data.record("torchaudio", "YESNO", self.size)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, list[int]]:
        return self._waves[i], self.sample_rate, self._labels[i].tolist()


DATASETS = {"SPEECHCOMMANDS": SPEECHCOMMANDS, "YESNO": YESNO}
