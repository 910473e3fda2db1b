import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Config:
    seed: int = 0
    num_threads: int = 1
    n_train: int = 2000
    n_val: int = 500
    noise: float = 0.1
    hidden: list = field(default_factory=lambda: [64, 64])
    dropout: float = 0.0
    batch_size: int = 64
    epochs: int = 10
    lr: float = 1e-3
    weight_decay: float = 0.0
    patience: int = 3
    out_dir: str = "runs/default"

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls(**json.load(f))

    def save(self, path):
        Path(path).write_text(json.dumps(asdict(self), indent=2))
