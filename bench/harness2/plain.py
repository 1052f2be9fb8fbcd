"""Plain PyTorch loops, each attached with ``debugtune.attach`` and logging only what such a loop logs (its loss;
the MoE its balancing term). Written from descriptions of programs users train, not from ``debugtune.scenarios``;
each knob is the injection a user's mistake amounts to (a skipped ``zero_grad``, a scaled init, a frozen body …)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import debugtune
from bench.harness2.outcome import Outcome, sgd_step

_ACTS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def regression_mlp(run_dir: Path, seed: int = 0, *, zero_grad_every: int = 1, gain: float = 1.0,
                   act: str = "relu", frozen_body: bool = False, lr: float = 0.05, steps: int = 250) -> Outcome:
    """A 3-hidden-layer regression MLP on SGD with momentum (MSE on a smooth target)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x = torch.randn(2048, 8, generator=g)
    y = torch.sin(x @ torch.randn(8, 1, generator=g)) + 0.1 * torch.randn(2048, 1, generator=g)
    layers: list[nn.Module] = []
    width = 8
    for _ in range(3):
        layers += [nn.Linear(width, 64), _ACTS[act]()]
        width = 64
    model = nn.Sequential(*layers, nn.Linear(64, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(gain)
    if frozen_body:
        for p in model[:-1].parameters():
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    with debugtune.attach(model, opt, run_dir) as probe:
        for step in range(steps):
            i = torch.randint(0, 2048, (64,), generator=g)
            loss, _ = sgd_step(opt, step, zero_grad_every, lambda: F.mse_loss(model(x[i]), y[i]))  # noqa: B023
            probe.log(loss=loss)
            losses.append(loss)
    return Outcome(losses)


class _Encoder(nn.Module):
    def __init__(self, vocab: int, length: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.pos = nn.Parameter(torch.zeros(length, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(x) + self.pos).mean(1))


def encoder(run_dir: Path, seed: int = 0, *, zero_grad_every: int = 1, label_noise: float = 0.0, lr: float = 1e-3,
            steps: int = 200) -> Outcome:
    """A 2-layer Transformer encoder classifying token sequences (which of two tokens is more frequent), AdamW with
    ``clip_grad_norm_(1.0)``."""
    vocab, length = 20, 16
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = _Encoder(vocab, length)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    with debugtune.attach(model, opt, run_dir) as probe:
        for step in range(steps):
            x = torch.randint(1, vocab, (32, length), generator=g)
            y = ((x == 3).sum(1) > (x == 7).sum(1)).long()
            if label_noise:
                y = torch.where(torch.rand(32, generator=g) < label_noise, 1 - y, y)
            loss, _ = sgd_step(opt, step, zero_grad_every, lambda: F.cross_entropy(model(x), y),  # noqa: B023
                               model.parameters(), 1.0)
            probe.log(loss=loss)
            losses.append(loss)
    return Outcome(losses)


class _Router(nn.Module):
    def __init__(self, d: int, experts: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, experts)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(h)


class _MoE(nn.Module):
    """Top-k routing over expert MLPs with a switch-style balancing term (experts × Σ share · mean prob)."""

    def __init__(self, d: int, experts: int, k: int) -> None:
        super().__init__()
        self.k, self.n = k, experts
        self.inp, self.router, self.head = nn.Linear(10, d), _Router(d, experts), nn.Linear(d, 4)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d))
                                     for _ in range(experts))

    def forward(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.inp(v)
        probs = self.router(h).softmax(-1)
        w, idx = probs.topk(self.k, -1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(self.n):
            hit = idx == e
            rows = hit.any(-1)
            if rows.any():
                out[rows] += (w * hit).sum(-1)[rows, None] * self.experts[e](h[rows])
        share = F.one_hot(idx[:, 0], self.n).float().mean(0)
        return self.head(h + out), self.n * (share * probs.mean(0)).sum(), share


def moe_classifier(run_dir: Path, seed: int = 0, *, raw_inputs: bool = False, lr: float = 3e-3, aux: float = 0.1,
                   gate_bias: float = 0.0, steps: int = 250) -> Outcome:
    """A top-2 MoE classifier over 8 experts with its own router, Adam, the balancing term added to the loss.
    ``extra["expert_cv"]``: the coefficient of variation of the top-1 expert shares over the last fifth."""
    experts, k, d = 8, 2, 16
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    labels = torch.randint(0, 4, (4096,), generator=g)
    x = torch.randn(4, 10, generator=g)[labels] * 2 + torch.randn(4096, 10, generator=g)
    if raw_inputs:  # per-feature units spanning three decades, with offsets
        x = x * torch.logspace(0, 3, 10) + torch.linspace(50, 500, 10)
    model = _MoE(d, experts, k)
    if gate_bias:
        with torch.no_grad():
            model.router.proj.bias[:2] += gate_bias
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, shares = [], []
    with debugtune.attach(model, opt, run_dir) as probe:
        probe.watch_router(model.router, experts, k)
        for _ in range(steps):
            i = torch.randint(0, 4096, (64,), generator=g)
            logits, balance, share = model(x[i])
            loss = F.cross_entropy(logits, labels[i]) + aux * balance
            opt.zero_grad()
            loss.backward()
            opt.step()
            probe.log(loss=loss.item(), aux_loss=balance.item())
            losses.append(loss.item())
            shares.append(share.detach())
    last = torch.stack(shares[-steps // 5:]).mean(0)
    return Outcome(losses, extra={"expert_cv": float(last.std() / last.mean().clamp_min(1e-9))})


# -- healthy programs whose loss is not a supervised loss ----------------------------------------------------
def gan(run_dir: Path, seed: int = 0, *, probe_on: str = "discriminator", steps: int = 300) -> Outcome:
    """A small GAN on a 2-D Gaussian; the probe sits on the discriminator or the generator; both losses logged.
    Learned: the generated mean lies within 0.5 of the target's."""
    torch.manual_seed(seed)
    centre = torch.tensor([2.0, -1.0])
    gen = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    disc = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(gen.parameters(), 1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), 1e-3, betas=(0.5, 0.999))
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    watched, watched_opt = (disc, opt_d) if probe_on == "discriminator" else (gen, opt_g)
    losses = []
    with debugtune.attach(watched, watched_opt, run_dir) as probe:
        for _ in range(steps):
            fake = gen(torch.randn(64, 4))
            opt_d.zero_grad()
            d_loss = (F.binary_cross_entropy_with_logits(disc(centre + 0.3 * torch.randn(64, 2)), ones)
                      + F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros))
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
            g_loss.backward()
            opt_g.step()
            if probe_on == "discriminator":
                probe.log(loss=d_loss.item(), loss_G=g_loss.item())
            else:
                probe.log(loss_G=g_loss.item(), loss_D=d_loss.item())
            losses.append(d_loss.item())
    with torch.no_grad():
        gap = float((gen(torch.randn(512, 4)).mean(0) - centre).norm())
    return Outcome(losses, learned=gap < 0.5, extra={"mean_gap": gap})


def reinforce(run_dir: Path, seed: int = 0, *, episodes: int = 250) -> Outcome:
    """REINFORCE on a 5x5 grid (start at a corner, +1 at the opposite one, −0.01 a move); the logged loss is minus
    the episode's return. Learned: the mean return of the last 50 episodes beats the first 50 by 0.2."""
    torch.manual_seed(seed)
    policy = nn.Sequential(nn.Linear(25, 32), nn.Tanh(), nn.Linear(32, 4))
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    moves = [(0, 1), (1, 0), (0, -1), (-1, 0)]
    returns: list[float] = []
    with debugtune.attach(policy, opt, run_dir) as probe:
        for _ in range(episodes):
            cell, log_probs, rewards = 0, [], []
            for _ in range(30):
                dist = torch.distributions.Categorical(logits=policy(F.one_hot(torch.tensor(cell), 25).float()))
                action = dist.sample()
                log_probs.append(dist.log_prob(action))
                row, col = divmod(cell, 5)
                dr, dc = moves[int(action)]
                cell = min(max(row + dr, 0), 4) * 5 + min(max(col + dc, 0), 4)
                rewards.append(1.0 if cell == 24 else -0.01)
                if cell == 24:
                    break
            ret, discounted = 0.0, []
            for r in reversed(rewards):
                ret = r + 0.99 * ret
                discounted.insert(0, ret)
            surrogate = -(torch.stack(log_probs) * torch.tensor(discounted)).sum()
            opt.zero_grad()
            surrogate.backward()
            opt.step()
            returns.append(sum(rewards))
            probe.log(loss=-sum(rewards))
    first, last = sum(returns[:50]) / 50, sum(returns[-50:]) / 50
    return Outcome([-r for r in returns], learned=last > first + 0.2, extra={"first": first, "last": last})


def gcn(run_dir: Path, seed: int = 0, *, epochs: int = 200) -> Outcome:
    """A 2-layer GCN (Adam 0.01, weight decay, dropout 0.5) trained full-batch on a synthetic graph whose edges
    mostly join nodes of one class. Learned: held-out node accuracy above 0.8."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n, classes = 300, 3
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 16, generator=g) + 0.8 * F.one_hot(y, classes).float().repeat(1, 6)[:, :16]
    same = (y[:, None] == y[None, :]).float()
    adj = (torch.rand(n, n, generator=g) < 0.04).float() * same + (torch.rand(n, n, generator=g) < 0.005).float()
    adj = ((adj + adj.T) > 0).float() + torch.eye(n)
    deg = adj.sum(1)
    norm = adj / torch.sqrt(deg[:, None] * deg[None, :])
    l1, l2 = nn.Linear(16, 16), nn.Linear(16, classes)
    model = nn.ModuleList([l1, l2])
    train = torch.rand(n, generator=g) < 0.3
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def forward(training: bool) -> torch.Tensor:
        return norm @ l2(F.dropout(F.relu(norm @ l1(x)), 0.5, training))

    losses = []
    with debugtune.attach(model, opt, run_dir) as probe:
        for _ in range(epochs):
            opt.zero_grad()
            loss = F.cross_entropy(forward(True)[train], y[train])
            loss.backward()
            opt.step()
            probe.log(loss=loss.item())
            losses.append(loss.item())
    with torch.no_grad():
        acc = float((forward(False).argmax(1)[~train] == y[~train]).float().mean())
    return Outcome(losses, learned=acc > 0.8, extra={"accuracy": acc})


def contrastive(run_dir: Path, seed: int = 0, *, steps: int = 250) -> Outcome:
    """SimCLR-style InfoNCE (temperature 0.2) on two noisy views of points from 6 clusters; the loss stays far above
    zero by construction (its floor is set by the negatives). Learned: nearest-centroid accuracy of the embeddings
    above 0.9."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    centres = 3 * torch.randn(6, 12, generator=g)
    net = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 16))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    losses = []
    with debugtune.attach(net, opt, run_dir) as probe:
        for _ in range(steps):
            base = centres[torch.randint(0, 6, (128,), generator=g)] + torch.randn(128, 12, generator=g)
            a = F.normalize(net(base + 0.3 * torch.randn(128, 12, generator=g)), dim=1)
            b = F.normalize(net(base + 0.3 * torch.randn(128, 12, generator=g)), dim=1)
            logits = a @ b.T / 0.2
            loss = (F.cross_entropy(logits, torch.arange(128)) + F.cross_entropy(logits.T, torch.arange(128))) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()
            probe.log(loss=loss.item())
            losses.append(loss.item())
    with torch.no_grad():
        labels = torch.randint(0, 6, (600,), generator=g)
        emb = F.normalize(net(centres[labels] + torch.randn(600, 12, generator=g)), dim=1)
        cent = F.normalize(torch.stack([emb[labels == c].mean(0) for c in range(6)]), dim=1)
        acc = float(((emb @ cent.T).argmax(1) == labels).float().mean())
    return Outcome(losses, learned=acc > 0.9, extra={"accuracy": acc})


def skipgram(run_dir: Path, seed: int = 0, *, steps: int = 600, lr: float = 3.2) -> Outcome:
    """Skip-gram with negative sampling as word2vec trains it: centre vectors uniform in ±0.5/dim, context vectors
    zero, plain SGD decayed linearly to zero from word2vec's 0.025 per pair (3.2 on the mean over a batch of 128
    pairs). The corpus: 8 topics of 12 words, each window drawn
    from one topic. Both tables grow from near zero, so their update/weight ratio starts near 1.
    Learned: same-topic words are more similar (cosine of the centre vectors) than other pairs by 0.15."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    topics, per, dim, neg = 8, 12, 24, 5
    vocab = topics * per
    centre, context = nn.Embedding(vocab, dim), nn.Embedding(vocab, dim)
    with torch.no_grad():
        centre.weight.uniform_(-0.5 / dim, 0.5 / dim)
        context.weight.zero_()
    model = nn.ModuleDict({"centre": centre, "context": context})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(1.0 - s / steps, 1e-4))
    losses = []
    with debugtune.attach(model, opt, run_dir) as probe:
        for _ in range(steps):
            topic = torch.randint(0, topics, (128,), generator=g) * per
            words = topic + torch.randint(0, per, (128,), generator=g)
            near = topic + torch.randint(0, per, (128,), generator=g)
            far = torch.randint(0, vocab, (128, neg), generator=g)
            c = centre(words)
            pos = (c * context(near)).sum(-1)
            negs = torch.einsum("bd,bkd->bk", c, context(far))
            loss = -(F.logsigmoid(pos) + F.logsigmoid(-negs).sum(-1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            probe.log(loss=loss.item())
            losses.append(loss.item())
    with torch.no_grad():
        e = F.normalize(centre.weight, dim=1)
        sim = e @ e.T
        topic_of, other = torch.arange(vocab) // per, ~torch.eye(vocab, dtype=torch.bool)
        same = (topic_of[:, None] == topic_of[None, :]) & other
        gap = float(sim[same].mean() - sim[~same & other].mean())
    return Outcome(losses, learned=gap > 0.15, extra={"similarity_gap": gap})


class _Excite(nn.Module):
    """Squeeze-excitation over features: a bottleneck whose sigmoid re-weights the features that flow past it."""

    def __init__(self, width: int):
        super().__init__()
        self.squeeze, self.excite, self.gate = nn.Linear(width, width // 4), nn.Linear(width // 4, width), nn.Sigmoid()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * self.gate(self.excite(F.relu(self.squeeze(h))))


class _GatedBlock(nn.Module):
    """A GLU feed-forward (value times a sigmoid gate) with squeeze-excitation and a residual connection."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.value, self.gate_in = nn.Linear(width, 2 * width), nn.Linear(width, 2 * width)
        self.gate, self.out, self.se = nn.Sigmoid(), nn.Linear(2 * width, width), _Excite(width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.norm(h)
        return h + self.se(self.out(self.value(z) * self.gate(self.gate_in(z))))


def gated_mlp(run_dir: Path, seed: int = 0, *, steps: int = 300) -> Outcome:
    """A tabular classifier of gated residual blocks (GLU feed-forward, squeeze-excitation), AdamW 1e-3: its sigmoid
    modules are gates that sit near 0 or 1 once trained, not hidden activations. Learned: held-out accuracy above
    0.7 on 5 classes of a noisy non-linear teacher (chance 0.2; the three seeds reach 0.79-0.83)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    w1, w2 = torch.randn(24, 32, generator=g), torch.randn(32, 5, generator=g)

    def data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, 24, generator=g)
        return x, (torch.tanh(x @ w1 / 5) @ w2 + 0.2 * torch.randn(n, 5, generator=g)).argmax(1)

    x, y = data(4096)
    model = nn.Sequential(nn.Linear(24, 64), _GatedBlock(64), _GatedBlock(64), nn.LayerNorm(64), nn.Linear(64, 5))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    with debugtune.attach(model, opt, run_dir) as probe:
        for _ in range(steps):
            i = torch.randint(0, x.shape[0], (128,), generator=g)
            loss = F.cross_entropy(model(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            probe.log(loss=loss.item())
            losses.append(loss.item())
    tx, ty = data(1024)
    with torch.no_grad():
        acc = float((model(tx).argmax(1) == ty).float().mean())
    return Outcome(losses, learned=acc > 0.7, extra={"accuracy": acc})
