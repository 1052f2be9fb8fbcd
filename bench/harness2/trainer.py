"""A Hugging Face ``Trainer`` program with debugtune's callback, as its docs show it: a small BERT built from a
config (no download) classifying token sequences, ``TrainingArguments`` for everything. The injections are the
ones a Trainer user makes: the learning rate argument, noisy labels in the dataset, layers frozen with
``requires_grad_(False)``, a re-initialisation at the wrong scale."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.harness2.outcome import Outcome

_VOCAB, _LENGTH = 24, 16


class _Tokens(torch.utils.data.Dataset):
    """Label 1 when token 3 occurs more often than token 7; ``noise`` of the labels flipped, fixed per example."""

    def __init__(self, n: int, seed: int, noise: float) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(1, _VOCAB, (n, _LENGTH), generator=g)
        y = ((self.x == 3).sum(1) > (self.x == 7).sum(1)).long()
        self.y = torch.where(torch.rand(n, generator=g) < noise, 1 - y, y)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "attention_mask": torch.ones(_LENGTH, dtype=torch.long), "labels": self.y[i]}


def bert_classifier(run_dir: Path, seed: int = 0, *, lr: float = 5e-4, label_noise: float = 0.0,
                    freeze_encoder: bool = False, init_scale: float = 1.0, steps: int = 160) -> Outcome:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    from debugtune.integrations.hf import DebugtuneCallback

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=_LENGTH, num_labels=2,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config)
    if init_scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(init_scale)
    if freeze_encoder:
        for p in model.bert.parameters():
            p.requires_grad_(False)
    losses: list[float] = []

    class _Losses(TrainerCallback):  # the program's own record, independent of the probe
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(output_dir=scratch, max_steps=steps, per_device_train_batch_size=32,
                                 learning_rate=lr, logging_steps=4, report_to=[], save_strategy="no",
                                 use_cpu=True, disable_tqdm=True, seed=seed, dataloader_num_workers=0)
        Trainer(model=model, args=args, train_dataset=_Tokens(4096, seed, label_noise),
                callbacks=[DebugtuneCallback(run_dir), _Losses()]).train()
    return Outcome(losses)
