"""Fine-tune a small text classifier with the Trainer.

    python run_classification.py
"""

import logging

import torch
from torch import nn
from torch.utils.data import Dataset

from trainer import Trainer, TrainingArguments

VOCAB, PAD_ID, NUM_LABELS = 500, 0, 3


class SyntheticSentiment(Dataset):
    """Token sequences of varying length; the label depends on which marker tokens occur."""

    def __init__(self, size=512, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.examples = []
        for _ in range(size):
            length = int(torch.randint(6, 40, (1,), generator=g))
            ids = torch.randint(10, VOCAB, (length,), generator=g)
            label = int(torch.randint(0, NUM_LABELS, (1,), generator=g))
            ids[torch.randint(0, length, (3,), generator=g)] = 1 + label  # marker tokens 1..3
            self.examples.append((ids, label))

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        ids, label = self.examples[i]
        return {"input_ids": ids, "labels": label}


def collate(features):
    longest = max(len(f["input_ids"]) for f in features)
    input_ids = torch.full((len(features), longest), PAD_ID, dtype=torch.long)
    for row, f in enumerate(features):
        input_ids[row, : len(f["input_ids"])] = f["input_ids"]
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != PAD_ID).long(),
        "labels": torch.tensor([f["labels"] for f in features]),
    }


class BagOfEmbeddingsClassifier(nn.Module):
    def __init__(self, vocab=VOCAB, dim=128, num_labels=NUM_LABELS):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.ffn = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, num_labels))

    def forward(self, input_ids, attention_mask, labels=None):
        mask = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.ffn(pooled)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = TrainingArguments(output_dir="outputs/sentiment", max_steps=60, logging_steps=10)
    trainer = Trainer(
        BagOfEmbeddingsClassifier(), args, train_dataset=SyntheticSentiment(), data_collator=collate
    )
    trainer.train()


if __name__ == "__main__":
    main()
