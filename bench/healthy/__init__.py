"""Healthy-only program families whose telemetry does not look like a steadily falling objective.

Each program trains for real on CPU, seeded and deterministic, with the live probe attached the way a
user attaches it, and proves it learned by a measure of its own (``summary["learned"]`` and
``summary["why"]``). They exist to measure and fit false positives: a diagnosis named on any of them
is wrong. ``HEALTHY`` holds them by name; ``family`` groups programs for leave-one-family-out. Bench code, not
part of the shipped package: importing this package registers them as programs of the scenario table
(``debugtune.scenarios.programs.register_healthy``) for the fault benchmark's matrix.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from bench.healthy import (
    adaptive,
    adversarial,
    contrastive,
    embeddings,
    graph,
    policy,
    recurrent,
    residual,
    variational,
)
from bench.healthy.base import Check, HealthyProgram, Series, Summary, verdict
from debugtune.scenarios.programs import register_healthy

__all__ = ["HEALTHY", "Check", "HealthyProgram", "Series", "Summary", "verdict"]


def _program(name: str, family: str, module: Any, loss_metric: str, description: str, **variant: str) -> HealthyProgram:
    train = partial(module.train, **variant) if variant else module.train
    return HealthyProgram(name, family, description, train, module.STEPS, module.MIN_STEPS, loss_metric)


HEALTHY: dict[str, HealthyProgram] = {p.name: p for p in (
    _program("gan_disc_mixture", "adversarial", adversarial, "loss",
             "MLP GAN on a 2-D three-Gaussian mixture, DCGAN recipe (N(0,0.02), batch norm, Adam 1e-3 beta1 0.5, "
             "two D backward passes per step); the probe on the discriminator", probed="discriminator", data="mixture"),
    _program("gan_gen_banana", "adversarial", adversarial, "train_loss",
             "the same GAN on a 2-D banana distribution; the probe on the generator (activations on)",
             probed="generator", data="banana"),
    _program("reinforce_cartpole", "policy_gradient", policy, "loss",
             "REINFORCE on a numpy cart-pole (16 episodes of up to 60 steps per update), normalised "
             "returns-to-go, Adam 3e-3; logs the surrogate loss and the reward"),
    _program("simclr_digits", "contrastive", contrastive, "train_loss",
             "NT-Xent (temperature 0.5) on two augmented views of the 8x8 digits, MLP encoder + projection, "
             "Adam 1e-3, activations on"),
    _program("skipgram_topics", "embeddings", embeddings, "train_loss",
             "skip-gram with 5 negative samples on a synthetic 10-topic corpus of 1,200 words, two "
             "nn.Embedding tables, plain SGD 0.025 with linear decay, summed loss"),
    _program("gcn_sbm", "graph", graph, "train_loss",
             "2-layer GCN (16 hidden, dropout 0.5) on a 600-node 4-block SBM graph, full batch, Adam 1e-2, "
             "weight decay 5e-4, 20 labels per class"),
    _program("adadelta_cnn", "adaptive_optimizer", adaptive, "loss",
             "2-conv CNN on the 8x8 digits with Adadelta lr 1.0 (rho 0.9) and exponential decay 0.998, "
             "activations on"),
    _program("vae_digits", "variational", variational, "train_loss",
             "VAE (64-128-6, Bernoulli decoder on logits) on the 8x8 digits, negative ELBO, Adam 3e-3, "
             "activations on"),
    _program("gru_adding", "recurrent_regression", recurrent, "loss",
             "GRU (32) on the adding problem of length 20, MSE, Adam 1e-2, gradient clipping at norm 1"),
    _program("resnet_shapes", "residual_bn", residual, "train_loss",
             "tiny ResNet (stem + 2 basic blocks, batch norm) on synthetic 12x12 shapes, SGD 0.1 Nesterov, "
             "weight decay 5e-4, cosine annealing"),
)}

register_healthy(HEALTHY.values())
