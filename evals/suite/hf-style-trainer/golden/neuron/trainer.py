"""A minimal Trainer in the style of transformers.Trainer: arguments dataclass, AMP with
loss scaling, gradient clipping, linear warmup/decay, GPU memory in the logs."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from dataclasses import asdict, dataclass

import torch
from torch.utils.data import DataLoader

logger = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class TrainingArguments:
    output_dir: str
    device: str = "neuron"
    fp16: bool = True
    per_device_train_batch_size: int = 16
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_steps: int = 100
    max_grad_norm: float = 1.0
    logging_steps: int = 10
    save_final_model: bool = True
    resume_from_checkpoint: str | None = None
    seed: int = 42

    def __post_init__(self):
        if self.fp16 and not torch.accelerator.is_available():
            raise ValueError("fp16 mixed precision training requires a CUDA device")

    @property
    def n_gpu(self) -> int:
        return torch.accelerator.device_count()

    @property
    def train_batch_size(self) -> int:
        return self.per_device_train_batch_size * max(1, self.n_gpu)


class Trainer:
    def __init__(self, model, args: TrainingArguments, train_dataset, data_collator=None):
        self.args = args
        set_seed(args.seed)
        self.model = model.to(args.device)
        self.train_dataset = train_dataset
        self.data_collator = data_collator
        self.optimizer = self.create_optimizer()
        self.lr_scheduler = self.create_scheduler()
        self.global_step = 0
        self.log_history = []

    def create_optimizer(self):
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        groups = [
            {"params": decay, "weight_decay": self.args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=self.args.learning_rate)

    def create_scheduler(self):
        warmup = max(1, int(self.args.warmup_ratio * self.args.max_steps))
        total = self.args.max_steps

        def lr_lambda(step):
            if step < warmup:
                return (step + 1) / warmup
            return max(0.0, (total - step) / max(1, total - warmup))

        return torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)

    def get_train_dataloader(self):
        return DataLoader(
            self.train_dataset,
            batch_size=self.args.train_batch_size,
            shuffle=True,
            collate_fn=self.data_collator,
        )

    def _prepare_inputs(self, batch):
        return {k: v.to(self.args.device, non_blocking=True) for k, v in batch.items()}

    def training_step(self, batch) -> torch.Tensor:
        self.model.train()
        with torch.autocast("neuron", dtype=torch.bfloat16, enabled=self.args.fp16):
            outputs = self.model(**self._prepare_inputs(batch))
        loss = outputs["loss"]
        loss.backward()
        return loss.detach()

    def train(self):
        if self.args.resume_from_checkpoint:
            self._load_from_checkpoint(self.args.resume_from_checkpoint)
        torch.accelerator.memory.reset_peak_memory_stats()
        logger.info("***** Running training: %d steps, batch %d *****", self.args.max_steps, self.args.train_batch_size)
        tr_loss = torch.zeros((), device=self.args.device)
        start = time.time()
        while self.global_step < self.args.max_steps:
            for batch in self.get_train_dataloader():
                tr_loss += self.training_step(batch)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.global_step += 1
                if self.global_step % self.args.logging_steps == 0:
                    self.log({"loss": tr_loss.item() / self.args.logging_steps})
                    tr_loss.zero_()
                if self.global_step >= self.args.max_steps:
                    break
        self.log({"train_runtime": time.time() - start})
        if self.args.save_final_model:
            self.save_model()

    def log(self, logs):
        logs = dict(logs, step=self.global_step, learning_rate=self.lr_scheduler.get_last_lr()[0])
        logs["gpu_mem_alloc_mb"] = round(torch.accelerator.memory.memory_allocated() / 2**20, 1)
        logs["gpu_mem_peak_reserved_mb"] = round(torch.accelerator.memory.max_memory_reserved() / 2**20, 1)
        self.log_history.append(logs)
        logger.info(json.dumps(logs))

    def save_model(self):
        os.makedirs(self.args.output_dir, exist_ok=True)
        torch.save(self.model.state_dict(), os.path.join(self.args.output_dir, "pytorch_model.bin"))
        with open(os.path.join(self.args.output_dir, "training_args.json"), "w") as f:
            json.dump(asdict(self.args), f, indent=2)

    def _load_from_checkpoint(self, checkpoint_dir):
        state_dict = torch.load(os.path.join(checkpoint_dir, "pytorch_model.bin"), map_location="cpu")
        self.model.load_state_dict(state_dict)
        logger.info("Loaded weights from %s (%.1f M params)", checkpoint_dir, self.num_params() / 1e6)

    def num_params(self):
        return sum(p.numel() for p in self.model.parameters())


def steps_for(epochs: int, dataset_size: int, batch_size: int) -> int:
    return epochs * math.ceil(dataset_size / batch_size)
