"""Suite C of the fresh bench: three small PyTorch training programs with a user's mistakes injected.

- ``char_lm``: a character-level causal transformer language model (tied input/output embeddings, causal
  attention, AdamW with linear warm-up and cosine decay) on text from a second-order Markov chain over 20
  symbols, trained with gradient accumulation (4 micro-batches per optimizer step, each loss divided by 4).
- ``resnet_bf16``: a pre-activation residual CNN with BatchNorm2d on synthetic 3x20x20 images whose class is a
  shape or texture drawn in a random colour, forward pass under ``torch.autocast("cpu", torch.bfloat16)``,
  SGD with Nesterov momentum and ``OneCycleLR``.
- ``distill``: a student MLP distilled from a fixed random teacher MLP on synthetic tabular inputs in mixed units
  (KL divergence at temperature 3, times T*T, plus a small cross-entropy on the teacher's argmax), Adam.

Every program generates its data from the seed, attaches the probe as a user would (``debugtune.attach``,
``probe.log(loss=...)`` once per optimizer step) and returns the per-step task losses. The mistakes (``FAULTS``)
are switched by the ``fault`` argument, in magnitudes chosen for this suite.

These programs were written independently of the diagnoser: from a brief naming the probe's public API and the
causes only, without reading the engine, the knowledge base, the scenarios or the other suites, and without
running the diagnoser on them. Magnitudes were judged on the task loss alone.

    OPENBLAS_NUM_THREADS=1 python -m bench.fresh.suite_c    # every program healthy and with every fault, seed 0
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import debugtune

# ----------------------------------------------------------------------------------------------------------------
# shared helpers


def _as_float(loss: torch.Tensor | float) -> float:
    """A loss as a Python float (NaN and inf kept)."""
    return float(loss.item() if isinstance(loss, torch.Tensor) else loss)


def _scale_weights(model: nn.Module, factor: float, kinds: tuple[type[nn.Module], ...]) -> None:
    """Multiply the weight of every module of the given kinds by ``factor`` (a bad initialisation)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, kinds):
                m.weight.mul_(factor)


# ----------------------------------------------------------------------------------------------------------------
# 1. character-level causal transformer LM with gradient accumulation

LM_VOCAB = 20
LM_CTX = 32
LM_DIM = 48
LM_HEADS = 4
LM_LAYERS = 2
LM_MICRO = 8          # sequences per micro-batch
LM_ACCUM = 4          # micro-batches per optimizer step
LM_STEPS = 200
LM_LR = 3e-3
LM_WARMUP = 20
LM_WORDS = 40         # words of the grammar
LM_EPOCH = 25         # optimizer steps per "epoch" (where the MissingZeroGrad loop zeroes)


def _grammar_text(rng: np.random.Generator, n: int) -> np.ndarray:
    """A symbol stream of "words" (symbol 0 is the space) whose order follows a sparse Markov chain over words."""
    words = [rng.integers(1, LM_VOCAB, size=int(rng.integers(2, 7))) for _ in range(LM_WORDS)]
    follow = rng.dirichlet(np.full(LM_WORDS, 0.1), size=LM_WORDS).cumsum(-1)
    out: list[int] = []
    w = 0
    while len(out) < n:
        out.extend(words[w].tolist())
        out.append(0)
        w = min(int(np.searchsorted(follow[w], rng.random())), LM_WORDS - 1)
    return np.array(out[:n], dtype=np.int64)


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, act: nn.Module):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = act
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class CharLM(nn.Module):
    """A GPT-style decoder whose output projection is the token embedding (tied weights)."""

    def __init__(self, act: Callable[[], nn.Module] = nn.GELU):
        super().__init__()
        self.tok = nn.Embedding(LM_VOCAB, LM_DIM)
        self.pos = nn.Parameter(torch.zeros(1, LM_CTX, LM_DIM))
        self.blocks = nn.ModuleList(_Block(LM_DIM, LM_HEADS, act()) for _ in range(LM_LAYERS))
        self.ln_f = nn.LayerNorm(LM_DIM)
        self._init()

    def _init(self) -> None:
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok.weight.t()


def _lm_batch(text: torch.Tensor, gen: torch.Generator, noise: float,
              noise_gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the stream: inputs and next-symbol targets (a share ``noise`` of targets random)."""
    start = torch.randint(0, len(text) - LM_CTX - 1, (LM_MICRO,), generator=gen)
    rows = start[:, None] + torch.arange(LM_CTX + 1)
    window = text[rows]
    x, y = window[:, :-1], window[:, 1:].clone()
    if noise:
        swap = torch.rand(y.shape, generator=noise_gen) < noise
        y[swap] = torch.randint(0, LM_VOCAB, (int(swap.sum()),), generator=noise_gen)
    return x, y


def _lm_loss(logits: torch.Tensor, y: torch.Tensor, fault: str | None) -> torch.Tensor:
    flat = logits.reshape(-1, LM_VOCAB)
    if fault == "softmax_before_ce":
        flat = flat.softmax(-1)          # "the model should output probabilities" before cross_entropy
    return F.cross_entropy(flat, y.reshape(-1))


def _lm_model(fault: str | None) -> CharLM:
    model = CharLM(act=nn.Sigmoid if fault == "sigmoid_mlp" else nn.GELU)
    if fault == "init_x40":
        _scale_weights(model, 40.0, (nn.Linear, nn.Embedding))   # std 0.8 instead of 0.02
    if fault == "freeze_all_but_head":
        model.requires_grad_(False)
        model.ln_f.requires_grad_(True)   # the only head of a tied model that is its own
    return model


def _lm_schedule(step: int) -> float:
    if step < LM_WARMUP:
        return (step + 1) / LM_WARMUP
    progress = (step - LM_WARMUP) / max(1, LM_STEPS - LM_WARMUP)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def train_char_lm(run_dir: Path, seed: int, fault: str | None) -> list[float]:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    text = torch.from_numpy(_grammar_text(np.random.default_rng(seed), 40_000))
    gen, noise_gen = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 2)
    model = _lm_model(fault)
    lr = {"lr_x100": LM_LR * 100, "lr_div1000": LM_LR / 1000}.get(fault or "", LM_LR)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lm_schedule)
    noise = 0.45 if fault == "target_noise_45" else 0.0
    losses: list[float] = []
    with debugtune.attach(model, optimizer, run_dir) as probe:
        for step in range(LM_STEPS):
            if fault != "zero_grad_per_epoch" or step % LM_EPOCH == 0:
                optimizer.zero_grad()
            total = 0.0
            for _ in range(LM_ACCUM):
                x, y = _lm_batch(text, gen, noise, noise_gen)
                loss = _lm_loss(model(x), y, fault)
                (loss / LM_ACCUM).backward()
                total += _as_float(loss) / LM_ACCUM
            optimizer.step()
            probe.log(loss=total, lr=scheduler.get_last_lr()[0])
            scheduler.step()
            losses.append(total)
    return losses


LM_FAULTS = {
    "lr_x100": "LearningRateTooHigh",
    "lr_div1000": "LearningRateTooLow",
    "zero_grad_per_epoch": "MissingZeroGrad",
    "freeze_all_but_head": "FrozenParameters",
    "init_x40": "BadWeightInit",
    "sigmoid_mlp": "SaturatingActivations",
    "target_noise_45": "LabelNoise",
    "softmax_before_ce": "LossActivationMismatch",
}


# ----------------------------------------------------------------------------------------------------------------
# 2. pre-activation residual CNN with BatchNorm2d, bfloat16 autocast, SGD + OneCycleLR

IMG = 20
IMG_CLASSES = 6
IMG_TRAIN = 2048
IMG_BATCH = 32
IMG_STEPS = 150
IMG_LR = 0.1


def _shape_mask(kind: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """A size x size mask: filled square, ring, plus, horizontal stripes, vertical stripes, checkerboard."""
    i, j = np.mgrid[:size, :size]
    phase = int(rng.integers(2))
    if kind == 0:
        return np.ones((size, size), bool)
    if kind == 1:
        return (i < 2) | (j < 2) | (i >= size - 2) | (j >= size - 2)
    if kind == 2:
        mid = size // 2
        return (abs(i - mid) <= 1) | (abs(j - mid) <= 1)
    if kind == 3:
        return (i + phase) % 3 == 0
    if kind == 4:
        return (j + phase) % 3 == 0
    return ((i // 2 + j // 2 + phase) % 2) == 0


def _images(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw 0-255 pixels: a dark noisy background and one shape in a random bright colour at a random place."""
    labels = rng.integers(IMG_CLASSES, size=n)
    bg = rng.uniform(0, 90, size=(n, 3, 1, 1))
    x = np.clip(bg + rng.normal(0, 18, size=(n, 3, IMG, IMG)), 0, 255)
    for k in range(n):
        size = int(rng.integers(8, 13))
        top, left = rng.integers(0, IMG - size + 1, size=2)
        colour = rng.uniform(130, 255, size=3)
        colour[rng.integers(3)] *= 0.4
        mask = _shape_mask(int(labels[k]), size, rng)
        patch = x[k, :, top:top + size, left:left + size]
        patch[:, mask] = colour[:, None] + rng.normal(0, 10, size=(3, int(mask.sum())))
    return np.clip(x, 0, 255).astype(np.float32), labels


class _PreActBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, act: Callable[[], nn.Module]):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.act1 = act()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.act2 = act()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.short = nn.Conv2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.bn1(x))
        skip = x if self.short is None else self.short(x)
        h = self.conv1(h)
        h = self.conv2(self.act2(self.bn2(h)))
        return h + skip


class PreActResNet(nn.Module):
    """stem conv -> 3 pre-activation residual blocks -> BN, activation, global average pool -> linear."""

    def __init__(self, act: Callable[[], nn.Module] = nn.ReLU, width: int = 16):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1)
        self.layer1 = _PreActBlock(width, width, 1, act)
        self.layer2 = _PreActBlock(width, 2 * width, 2, act)
        self.layer3 = _PreActBlock(2 * width, 2 * width, 1, act)
        self.bn = nn.BatchNorm2d(2 * width)
        self.act = act()
        self.fc = nn.Linear(2 * width, IMG_CLASSES)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer3(self.layer2(self.layer1(self.stem(x))))
        h = self.act(self.bn(h)).mean(dim=(2, 3))
        return self.fc(h)


def _cnn_model(fault: str | None) -> PreActResNet:
    model = PreActResNet(act=nn.Sigmoid if fault == "sigmoid_blocks" else nn.ReLU)
    if fault == "init_x12":
        _scale_weights(model, 12.0, (nn.Conv2d, nn.Linear))
    if fault == "bn_bias_minus6":
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):      # every BatchNorm feeds a ReLU
                    m.bias.fill_(-6.0)
    return model


def _cnn_loss(logits: torch.Tensor, y: torch.Tensor, fault: str | None) -> torch.Tensor:
    if fault == "sigmoid_before_ce":
        logits = torch.sigmoid(logits)           # a sigmoid output layer fed to cross_entropy
    return F.cross_entropy(logits.float(), y)


def train_resnet_bf16(run_dir: Path, seed: int, fault: str | None) -> list[float]:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    raw, labels_np = _images(np.random.default_rng(seed), IMG_TRAIN)
    x_all = torch.from_numpy(raw)
    if fault != "raw_pixels":
        mean, std = x_all.mean(dim=(0, 2, 3), keepdim=True), x_all.std(dim=(0, 2, 3), keepdim=True)
        x_all = (x_all - mean) / std
    y_all = torch.from_numpy(labels_np)
    gen = torch.Generator().manual_seed(seed + 1)
    if fault == "label_noise_50":
        noise_gen = torch.Generator().manual_seed(seed + 2)
        swap = torch.rand(len(y_all), generator=noise_gen) < 0.5
        y_all[swap] = torch.randint(0, IMG_CLASSES, (int(swap.sum()),), generator=noise_gen)
    model = _cnn_model(fault)
    max_lr = {"lr_x50": IMG_LR * 50, "lr_div1000": IMG_LR / 1000}.get(fault or "", IMG_LR)
    params = model.fc.parameters() if fault == "only_fc_in_optimizer" else model.parameters()
    optimizer = torch.optim.SGD(params, lr=max_lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=IMG_STEPS)
    losses: list[float] = []
    with debugtune.attach(model, optimizer, run_dir) as probe:
        for _ in range(IMG_STEPS):
            idx = torch.randint(0, IMG_TRAIN, (IMG_BATCH,), generator=gen)
            if fault != "no_zero_grad":
                optimizer.zero_grad()
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = _cnn_loss(model(x_all[idx]), y_all[idx], fault)
            loss.backward()
            optimizer.step()
            probe.log(loss=_as_float(loss), lr=scheduler.get_last_lr()[0])
            scheduler.step()
            losses.append(_as_float(loss))
    return losses


CNN_FAULTS = {
    "lr_x50": "LearningRateTooHigh",
    "lr_div1000": "LearningRateTooLow",
    "no_zero_grad": "MissingZeroGrad",
    "only_fc_in_optimizer": "FrozenParameters",
    "init_x12": "BadWeightInit",
    "sigmoid_blocks": "SaturatingActivations",
    "bn_bias_minus6": "DyingReLU",
    "label_noise_50": "LabelNoise",
    "raw_pixels": "UnnormalizedInputs",
    "sigmoid_before_ce": "LossActivationMismatch",
}


# ----------------------------------------------------------------------------------------------------------------
# 3. knowledge distillation from a fixed random teacher

KD_FEATURES = 20
KD_CLASSES = 10
KD_POOL = 4096
KD_BATCH = 64
KD_STEPS = 300
KD_LR = 2e-3
KD_T = 3.0
KD_HARD = 0.2         # weight of the hard-label cross-entropy


def _teacher(gen: torch.Generator) -> nn.Module:
    """A fixed random MLP on standardised features whose logits spread over a few units."""
    teacher = nn.Sequential(nn.Linear(KD_FEATURES, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                            nn.Linear(128, KD_CLASSES))
    with torch.no_grad():
        for m in teacher:
            if isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * math.sqrt(2.0 / m.in_features))
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
        teacher[-1].weight.mul_(3.0)
    return teacher.requires_grad_(False).eval()


def _kd_data(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw features in mixed units and offsets, their standardised form, and the teacher's logits."""
    z = torch.randn(KD_POOL, KD_FEATURES, generator=gen)
    unit = 10 ** (torch.rand(KD_FEATURES, generator=gen) * 4 - 1)         # 0.1 .. 1000
    offset = torch.randn(KD_FEATURES, generator=gen) * 300
    raw = z * unit + offset
    standard = (raw - raw.mean(0)) / raw.std(0)
    with torch.no_grad():
        logits = _teacher(gen)(standard)
    return raw, standard, logits


class Student(nn.Module):
    def __init__(self, act: Callable[[], nn.Module] = nn.ReLU, probabilities: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(KD_FEATURES, 64)
        self.act1 = act()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = act()
        self.out = nn.Linear(64, KD_CLASSES)
        self.probabilities = probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))
        return logits.softmax(-1) if self.probabilities else logits


def _student(fault: str | None) -> Student:
    model = Student(act=nn.Sigmoid if fault == "sigmoid_hidden" else nn.ReLU, probabilities=fault == "softmax_output")
    if fault == "init_std_1":
        with torch.no_grad():
            for m in (model.fc1, model.fc2, model.out):
                nn.init.normal_(m.weight, std=1.0)
    if fault == "hidden_bias_minus10":
        with torch.no_grad():
            model.fc1.bias.fill_(-10.0)
            model.fc2.bias.fill_(-10.0)
    return model


def _kd_loss(student: torch.Tensor, teacher: torch.Tensor, hard: torch.Tensor) -> torch.Tensor:
    soft = F.kl_div(F.log_softmax(student / KD_T, -1), F.softmax(teacher / KD_T, -1), reduction="batchmean")
    return soft * KD_T * KD_T + KD_HARD * F.cross_entropy(student, hard)


def _mixed_targets(logits: torch.Tensor, gen: torch.Generator, share: float) -> torch.Tensor:
    """The teacher's logits with those of a share of the examples taken from random other examples."""
    logits = logits.clone()
    swap = torch.nonzero(torch.rand(len(logits), generator=gen) < share).flatten()
    logits[swap] = logits[torch.randint(0, len(logits), (len(swap),), generator=gen)]
    return logits


def train_distill(run_dir: Path, seed: int, fault: str | None) -> list[float]:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    raw, standard, teacher_logits = _kd_data(gen)
    inputs = raw if fault == "raw_features" else standard
    if fault == "swapped_targets_50":
        teacher_logits = _mixed_targets(teacher_logits, torch.Generator().manual_seed(seed + 2), 0.5)
    hard = teacher_logits.argmax(-1)
    model = _student(fault)
    lr = {"lr_x200": KD_LR * 200, "lr_div1000": KD_LR / 1000}.get(fault or "", KD_LR)
    params = model.out.parameters() if fault == "freeze_hidden" else model.parameters()
    if fault == "freeze_hidden":
        model.fc1.requires_grad_(False)
        model.fc2.requires_grad_(False)
    optimizer = torch.optim.Adam(params, lr=lr)
    losses: list[float] = []
    with debugtune.attach(model, optimizer, run_dir) as probe:
        for _ in range(KD_STEPS):
            idx = torch.randint(0, KD_POOL, (KD_BATCH,), generator=gen)
            if fault != "no_zero_grad":
                optimizer.zero_grad()
            loss = _kd_loss(model(inputs[idx]), teacher_logits[idx], hard[idx])
            loss.backward()
            optimizer.step()
            probe.log(loss=_as_float(loss))
            losses.append(_as_float(loss))
    return losses


KD_FAULTS = {
    "lr_x200": "LearningRateTooHigh",
    "lr_div1000": "LearningRateTooLow",
    "no_zero_grad": "MissingZeroGrad",
    "freeze_hidden": "FrozenParameters",
    "init_std_1": "BadWeightInit",
    "sigmoid_hidden": "SaturatingActivations",
    "hidden_bias_minus10": "DyingReLU",
    "swapped_targets_50": "LabelNoise",
    "raw_features": "UnnormalizedInputs",
    "softmax_output": "LossActivationMismatch",
}


# ----------------------------------------------------------------------------------------------------------------

PROGRAMS: dict[str, Callable[[Path, int, str | None], list[float]]] = {
    "char_lm": train_char_lm,
    "resnet_bf16": train_resnet_bf16,
    "distill": train_distill,
}
FAULTS: dict[str, dict[str, str]] = {"char_lm": LM_FAULTS, "resnet_bf16": CNN_FAULTS, "distill": KD_FAULTS}


def _late(losses: list[float]) -> float:
    """Median of the last 10 % of the steps (NaN where any of them is NaN)."""
    tail = losses[-max(1, len(losses) // 10):]
    return float("nan") if any(math.isnan(v) for v in tail) else statistics.median(tail)


def _harmed(end: float, twin_first: float, twin_end: float) -> bool:
    """The runner's criterion as the brief states it; a NaN or infinite end counts as harm."""
    if not math.isfinite(end):
        return True
    return end > 1.5 * twin_end and end > twin_end + 0.1 * (twin_first - twin_end)


def _check(names: list[str]) -> None:
    print(f"{'program':<12} {'fault':<22} {'first':>9} {'late':>9} {'secs':>6}  harmed")
    for name in names:
        twin: tuple[float, float] | None = None
        for fault in [None, *FAULTS[name]]:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                losses = PROGRAMS[name](Path(tmp) / "run", 0, fault)
                secs = time.perf_counter() - t0
            first, late = losses[0], _late(losses)
            verdict = "" if twin is None else str(_harmed(late, *twin))
            twin = twin or (first, late)
            print(f"{name:<12} {fault or 'healthy':<22} {first:9.4g} {late:9.4g} {secs:6.1f}  {verdict}", flush=True)


if __name__ == "__main__":
    _check(sys.argv[1:] or list(PROGRAMS))
