"""A variational autoencoder on the 8x8 digits: a Bernoulli decoder on logits, a 6-D Gaussian latent.

Kingma & Welling (2014, "Auto-encoding variational Bayes", appendix B): the loss is the negative ELBO,
reconstruction cross-entropy summed over the 64 pixels (intensities scaled to 0..1) plus the KL
divergence of the diagonal-Gaussian posterior from N(0, I), averaged over the batch, with one
reparameterised sample per image; Adam lr 3e-3.

Its telemetry: the loss is a sum of two terms that move against each other (the KL rises from zero
while the reconstruction falls), it is in nats per image (tens, not ~1), its floor is the data's
entropy, never zero, and the sampling noise of the latent makes every step noisy. Learning is
measured on held-out digits: the negative ELBO falls well below its start and the reconstruction beats
the best constant image (the per-pixel training mean), both above the entropy of the grey levels, with
the latent in use (a KL of a few nats).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios import tabular
from debugtune.scenarios.common import probe_session, seed_everything

LATENT, HIDDEN = 6, 128
BATCH = 64
LR = 3e-3
STEPS = 400
MIN_STEPS = 300
# learned: held-out negative ELBO at most 70% of its start; reconstruction cross-entropy above its floor (the
# entropy of the grey levels themselves) at most 3/4 of the best constant image's; a KL of at least 2 nats
# (a collapsed posterior has KL near 0)
ELBO_RATIO_BAR, RECON_RATIO_BAR, KL_BAR = 0.7, 0.75, 2.0


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU())
        self.mu = nn.Linear(HIDDEN, LATENT)
        self.logvar = nn.Linear(HIDDEN, LATENT)
        self.dec = nn.Sequential(nn.Linear(LATENT, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 64))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def elbo_terms(model: VAE, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reconstruction cross-entropy, KL), each summed over pixels / latents and averaged over the batch."""
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / len(x)
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / len(x)
    return recon, kl


def held_out(model: VAE, x: torch.Tensor, seed: int) -> tuple[float, float]:
    """(reconstruction, KL) on ``x`` with a fixed latent sample (the torch RNG is restored afterwards)."""
    state = torch.get_rng_state()
    torch.manual_seed(seed + 99)
    try:
        with torch.no_grad():
            recon, kl = elbo_terms(model, x)
    finally:
        torch.set_rng_state(state)
    return recon.item(), kl.item()


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("vae_digits", steps, STEPS)
    seed_everything(seed)
    data = tabular.load("digits", raw_scale=1.0 / 16.0)
    x_train, x_test = torch.from_numpy(data.x_train), torch.from_numpy(data.x_test)
    mean_image = x_train.mean(0, keepdim=True).clamp(1e-4, 1 - 1e-4)
    floor = F.binary_cross_entropy(x_test.clamp(1e-6, 1 - 1e-6), x_test, reduction="sum").item() / len(x_test)
    constant = F.binary_cross_entropy(mean_image.expand_as(x_test), x_test, reduction="sum").item() / len(x_test)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler = tabular.BatchSampler(len(x_train), BATCH, seed)
    start = sum(held_out(model, x_test, seed))
    losses, recons, kls = [], [], []
    meta = {"program": "vae_digits", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, activations=True, run_id=run_id, meta=meta) as pr:
        for step in range(n_steps):
            x = x_train[torch.from_numpy(sampler.next())]
            recon, kl = elbo_terms(model, x)
            loss = recon + kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            recons.append(recon.item())
            kls.append(kl.item())
            if pr is not None:
                metrics = {"train_loss": losses[-1], "recon_loss": recons[-1], "kl_loss": kls[-1]}
                if step % 50 == 0 or step == n_steps - 1:
                    metrics["val_loss"] = sum(held_out(model, x_test, seed))
                pr.log(**metrics)
    recon_end, kl_end = held_out(model, x_test, seed)
    checks = [Check("elbo_ratio", (recon_end + kl_end) / start, "<=", ELBO_RATIO_BAR),
              Check("recon_excess_ratio", (recon_end - floor) / (constant - floor), "<=", RECON_RATIO_BAR),
              Check("kl_nats", kl_end, ">=", KL_BAR)]
    summary = verdict(checks, start_neg_elbo=start, final_neg_elbo=recon_end + kl_end,
                      constant_image_recon=constant, recon_floor=floor)
    return as_series(loss=losses, recon=recons, kl=kls), summary
