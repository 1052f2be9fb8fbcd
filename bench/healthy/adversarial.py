"""Adversarial: a small GAN on 2-D data, trained with the DCGAN recipe, probed on either network.

The recipe (Radford et al. 2016, "Unsupervised representation learning with deep convolutional GANs",
§4: N(0, 0.02) weights, Adam lr 2e-4, beta1 0.5): the discriminator ends in a sigmoid and is trained
with BCE, with **two backward passes** (real batch, then the detached fake batch) accumulated before
its one optimizer step; the generator's step back-propagates through the discriminator, so the
discriminator's gradients are non-zero again when its next iteration begins. Neither loss is meant to
fall: at the game's balance the discriminator's loss hovers near 2 ln 2 and the generator's near ln 2
... and they trade blows on the way.

The data is 2-D (a mixture of three anisotropic Gaussians, or a curved "banana"). Learning is measured
on fresh samples: the generated mean and covariance close to the data's and the energy distance to the
data a small fraction of where it started (the untrained generator's output is almost a point), and a
discriminator that has not won (held-out accuracy away from 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios.common import probe_session, seed_everything

LATENT = 4
WIDTH = 32
BATCH = 128
LR = 1e-3
BETAS = (0.5, 0.999)
STEPS = 500
MIN_STEPS = 400
PROBED = {"discriminator": "disc", "generator": "gen"}  # the network the probe watches → name part
# the learning check: generated mean within 0.25 of the data's spread, covariance within 50% (both swing
# as the game goes on), the energy distance to the data at most a tenth of the untrained generator's,
# and a discriminator that still errs (held-out accuracy at most 0.85; 0.5 is the balance of the game)
MEAN_BAR, COV_BAR, ENERGY_BAR, D_ACC_BAR = 0.25, 0.5, 0.1, 0.85


def sample_data(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points of the 2-D data set ``kind`` ("mixture" or "banana"), float32 [n, 2]."""
    if kind == "mixture":
        centres = np.array([[-2.0, 0.0], [1.5, 1.5], [1.0, -2.0]])
        scales = np.array([[0.6, 0.25], [0.3, 0.5], [0.5, 0.4]])
        k = rng.integers(0, 3, size=n)
        x = centres[k] + rng.normal(size=(n, 2)) * scales[k]
    elif kind == "banana":
        u = rng.normal(size=n) * 1.2
        x = np.stack([u, 0.4 * u**2 - 0.8 + rng.normal(size=n) * 0.25], axis=1)
    else:
        raise ValueError(f"unknown 2-D data set {kind!r}; expected 'mixture' or 'banana'")
    return x.astype(np.float32)


def weights_init(m: nn.Module) -> None:
    """DCGAN's initialisation: weights N(0, 0.02), batch-norm scales N(1, 0.02), biases zero."""
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.02)
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.BatchNorm1d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def generator() -> nn.Module:
    """Batch norm after every hidden layer, none on the output (DCGAN §3)."""
    return nn.Sequential(nn.Linear(LATENT, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU(),
                         nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU(), nn.Linear(WIDTH, 2))


def discriminator() -> nn.Module:
    """LeakyReLU 0.2, batch norm on the hidden layers but not the input layer, a sigmoid at the end (DCGAN §3)."""
    return nn.Sequential(nn.Linear(2, WIDTH), nn.LeakyReLU(0.2), nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH),
                         nn.LeakyReLU(0.2), nn.Linear(WIDTH, 1), nn.Sigmoid())


def sample_figures(real: np.ndarray, fake: np.ndarray) -> tuple[float, float, float]:
    """(mean distance over the data's spread, relative Frobenius distance of the covariances, energy distance
    (Szekely & Rizzo 2013) on the first 1,500 points of each)."""
    from scipy.spatial.distance import cdist

    spread = float(np.sqrt(np.trace(np.cov(real.T))))
    mean_err = float(np.linalg.norm(fake.mean(0) - real.mean(0))) / spread
    c_real, c_fake = np.cov(real.T), np.cov(fake.T)
    cov_err = float(np.linalg.norm(c_fake - c_real) / np.linalg.norm(c_real))
    r, f = real[:1500], fake[:1500]
    energy = float(2 * cdist(r, f).mean() - cdist(r, r).mean() - cdist(f, f).mean())
    return mean_err, cov_err, energy


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None, steps: int | None = None, *,
          probed: str = "discriminator", data: str = "mixture") -> tuple[Series, Summary]:
    """Train the GAN; the probe watches ``probed`` ("discriminator" or "generator") with its own optimizer."""
    if probed not in PROBED:
        raise ValueError(f"probed must be one of {', '.join(PROBED)}, got {probed!r}")
    name = f"gan_{PROBED[probed]}_{data}"
    n_steps = resolve_steps(name, steps, STEPS)
    seed_everything(seed)
    rng = np.random.default_rng([seed, 5150])
    net_g, net_d = generator(), discriminator()
    net_g.apply(weights_init)
    net_d.apply(weights_init)
    opt_g = torch.optim.Adam(net_g.parameters(), lr=LR, betas=BETAS)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=LR, betas=BETAS)
    criterion = nn.BCELoss()
    real_label, fake_label = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)
    held_real = sample_data(data, 4000, np.random.default_rng([seed, 77]))
    held_noise = torch.from_numpy(np.random.default_rng([seed, 78]).normal(size=(4000, LATENT)).astype(np.float32))
    net_g.eval()
    with torch.no_grad():
        start_mean, start_cov, start_energy = sample_figures(held_real, net_g(held_noise).numpy())
    net_g.train()
    model, optimizer = (net_d, opt_d) if probed == "discriminator" else (net_g, opt_g)
    loss_d, loss_g, d_x, d_g_z = [], [], [], []
    meta = {"program": name, "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, activations=probed == "generator", run_id=run_id,
                       meta=meta) as pr:
        for _ in range(n_steps):
            real = torch.from_numpy(sample_data(data, BATCH, rng))
            noise = torch.from_numpy(rng.normal(size=(BATCH, LATENT)).astype(np.float32))
            # (1) discriminator: maximise log D(x) + log(1 - D(G(z))), two backward passes, one step
            net_d.zero_grad()
            out_real = net_d(real)
            err_real = criterion(out_real, real_label)
            err_real.backward()
            fake = net_g(noise)
            out_fake = net_d(fake.detach())
            err_fake = criterion(out_fake, fake_label)
            err_fake.backward()
            err_d = err_real + err_fake
            opt_d.step()
            # (2) generator: maximise log D(G(z)) (through the discriminator, whose grads accumulate)
            net_g.zero_grad()
            out = net_d(fake)
            err_g = criterion(out, real_label)
            err_g.backward()
            opt_g.step()
            loss_d.append(err_d.item())
            loss_g.append(err_g.item())
            d_x.append(out_real.mean().item())
            d_g_z.append(out_fake.mean().item())
            if pr is not None:
                if probed == "discriminator":
                    pr.log(loss=loss_d[-1], loss_G=loss_g[-1], D_x=d_x[-1], D_G_z=d_g_z[-1], lr=LR)
                else:
                    pr.log(train_loss=loss_g[-1], d_loss=loss_d[-1], lr=LR)
    net_g.eval()
    net_d.eval()
    with torch.no_grad():
        fake = net_g(held_noise).numpy()
        judged = net_d(torch.from_numpy(np.concatenate([held_real, fake]))).squeeze(1).numpy()
    mean_err, cov_err, energy = sample_figures(held_real, fake)
    d_acc = float(np.mean(np.concatenate([judged[:4000] > 0.5, judged[4000:] <= 0.5])))
    checks = [Check("mean_error", mean_err, "<=", MEAN_BAR), Check("cov_error", cov_err, "<=", COV_BAR),
              Check("energy_ratio", energy / start_energy, "<=", ENERGY_BAR),
              Check("d_accuracy", d_acc, "<=", D_ACC_BAR)]
    summary = verdict(checks, start_mean_error=start_mean, start_cov_error=start_cov, energy_distance=energy,
                      final_loss_d=float(np.mean(loss_d[-50:])), final_loss_g=float(np.mean(loss_g[-50:])))
    own = loss_d if probed == "discriminator" else loss_g
    return as_series(loss=own, loss_d=loss_d, loss_g=loss_g, d_x=d_x, d_g_z=d_g_z), summary
