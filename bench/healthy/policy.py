"""Policy gradient: REINFORCE on a cart-pole written in numpy, sixteen episodes per update.

The environment is the classic cart-pole (Barto, Sutton & Anderson 1983; the constants of Gym's
CartPole-v1: g 9.8, cart 1.0 kg, pole 0.1 kg, half-length 0.5 m, force 10 N, tau 0.02 s, fail beyond
12 degrees or 2.4 m), vectorised over a batch of episodes and capped at ``HORIZON`` steps. The update
is Williams' REINFORCE (1992) with discounted returns-to-go normalised over the batch as the baseline.

Its telemetry is not a falling objective: the surrogate loss -sum(log pi(a|s) * advantage) has mean
near zero by construction of the baseline and its scale follows the advantages, so it wanders while
the return climbs; the forward passes of the rollout run without gradient, and each update's one
backward covers up to 960 states. Learning is measured by the program: the final policy's mean
return against a uniformly random policy's on the same starting states.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios.common import probe_session, seed_everything

GRAVITY, M_CART, M_POLE, HALF_LEN, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_MAX, X_MAX = 12 * 2 * np.pi / 360, 2.4
TOTAL_MASS, POLE_ML = M_CART + M_POLE, M_POLE * HALF_LEN
HORIZON = 60
EPISODES = 16
GAMMA = 0.99
LR = 3e-3
STEPS = 200
MIN_STEPS = 150
# learned when the final policy's mean return is at least twice the random policy's (the cap is about 2.8 times)
RETURN_RATIO_BAR = 2.0


class CartPole:
    """A batch of cart-poles; ``step`` returns (reward 1 while alive, alive mask after the step)."""

    def __init__(self, n: int, rng: np.random.Generator):
        self.x, self.x_dot, self.theta, self.theta_dot = rng.uniform(-0.05, 0.05, size=(4, n))
        self.alive = np.ones(n, dtype=bool)

    def observe(self) -> np.ndarray:
        return np.stack([self.x, self.x_dot, self.theta, self.theta_dot], axis=1).astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        force = FORCE * (2.0 * action - 1.0)
        cos, sin = np.cos(self.theta), np.sin(self.theta)
        temp = (force + POLE_ML * self.theta_dot**2 * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LEN * (4.0 / 3.0 - M_POLE * cos**2 / TOTAL_MASS))
        x_acc = temp - POLE_ML * theta_acc * cos / TOTAL_MASS
        self.x = self.x + TAU * self.x_dot
        self.x_dot = self.x_dot + TAU * x_acc
        self.theta = self.theta + TAU * self.theta_dot
        self.theta_dot = self.theta_dot + TAU * theta_acc
        reward = self.alive.astype(np.float64)
        self.alive &= (np.abs(self.x) <= X_MAX) & (np.abs(self.theta) <= THETA_MAX)
        return reward, self.alive


def policy_net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))


def rollout(policy: nn.Module | None, n: int, seed_rng: np.random.Generator,
            act_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episodes under ``policy`` (uniform actions when None): observations [T, n, 4], actions [T, n] and
    rewards [T, n] (1 while the episode was alive at the step, so ``rewards > 0`` marks the valid steps)."""
    env = CartPole(n, seed_rng)
    obs, acts, rews = [], [], []
    for _ in range(HORIZON):
        o = env.observe()
        if policy is None:
            a = act_rng.integers(0, 2, size=n)
        else:
            with torch.no_grad():
                p1 = torch.softmax(policy(torch.from_numpy(o)), dim=-1)[:, 1].numpy()
            a = (act_rng.random(n) < p1).astype(np.int64)
        r, alive = env.step(a)
        obs.append(o)
        acts.append(a)
        rews.append(r)
        if not alive.any():
            break
    return np.stack(obs), np.stack(acts), np.stack(rews)


def returns_to_go(rews: np.ndarray) -> np.ndarray:
    out = np.zeros_like(rews)
    acc = np.zeros(rews.shape[1])
    for t in range(len(rews) - 1, -1, -1):
        acc = rews[t] + GAMMA * acc
        out[t] = acc
    return out


def mean_return(policy: nn.Module | None, seed: int) -> float:
    """Mean undiscounted return of 64 episodes from fixed starting states (the same for every policy)."""
    _, _, rews = rollout(policy, 64, np.random.default_rng([seed, 11]), np.random.default_rng([seed, 12]))
    return float(rews.sum(axis=0).mean())


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("reinforce_cartpole", steps, STEPS)
    seed_everything(seed)
    policy = policy_net()
    optimizer = torch.optim.Adam(policy.parameters(), lr=LR)
    env_rng, act_rng = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])
    random_return = mean_return(None, seed)
    losses, returns, entropies = [], [], []
    meta = {"program": "reinforce_cartpole", "parameters": sum(p.numel() for p in policy.parameters())}
    with probe_session(policy, optimizer, run_dir, probe, run_id=run_id, meta=meta) as pr:
        for _ in range(n_steps):
            obs, acts, rews = rollout(policy, EPISODES, env_rng, act_rng)
            g = returns_to_go(rews)
            valid = rews > 0
            adv = (g - g[valid].mean()) / (g[valid].std() + 1e-8)
            logp = torch.log_softmax(policy(torch.from_numpy(obs[valid])), dim=-1)
            chosen = logp.gather(1, torch.from_numpy(acts[valid]).unsqueeze(1)).squeeze(1)
            loss = -(chosen * torch.from_numpy(adv[valid].astype(np.float32))).sum() / EPISODES
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            episode_return = float(rews.sum(axis=0).mean())
            entropy = (-(logp.exp() * logp).sum(dim=1).mean()).item()
            losses.append(loss.item())
            returns.append(episode_return)
            entropies.append(entropy)
            if pr is not None:
                pr.log(loss=losses[-1], reward=episode_return, entropy=entropy, lr=LR)
    final_return = mean_return(policy, seed)
    checks = [Check("return_ratio", final_return / random_return, ">=", RETURN_RATIO_BAR)]
    summary = verdict(checks, final_return=final_return, random_return=random_return, horizon=HORIZON,
                      first_return=returns[0])
    return as_series(loss=losses, reward=returns, entropy=entropies), summary
