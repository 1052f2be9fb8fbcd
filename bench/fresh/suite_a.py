"""Fresh benchmark suite A: three small PyTorch training programs with injected user mistakes.

The programs were written independently of the diagnoser (without reading its rules, cases or other
benchmarks) to test it on training code nobody tuned it against:

* ``vit_shapes``: a tiny vision transformer (4x4 patches, class token, two pre-norm encoder blocks) on
  synthetic 16x16 greyscale images of five pattern classes (horizontal, vertical and diagonal stripes,
  checkerboards, blobs), AdamW with a hand-written linear warm-up + cosine decay (LambdaLR), gradient
  clipping at 1.0;
* ``cnn_signals``: a 1-D CNN (Conv1d + BatchNorm1d + ReLU blocks, global average pooling) classifying
  synthetic three-channel sensor signals (class = frequency x phase relation between two channels, a third
  channel of drifting noise, raw channels on very different offsets and scales), SGD with momentum and
  StepLR;
* ``gru_tagger``: a bidirectional GRU tagging padded token sequences of varying length, each token's tag
  a function of the token and its left neighbour's word class, padding ignored with ``ignore_index=-100``,
  Adam.

Each program trains once with the probe attached (``debugtune.attach``) and returns its per-step loss.
``fault`` switches on one user mistake, written the way it would look in a user's code (see ``FAULTS``).
Data are generated in code from the seed, so the healthy and the faulty run of a seed see the same data.

Run ``python -m bench.fresh.suite_a`` to train every program healthy and with each fault once (seed 0).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import debugtune

Train = Callable[[Path, int, str | None], list[float]]

# Held-out accuracy of each program's latest run (filled by the training functions, printed by the check).
ACCURACY: dict[str, float] = {}


# --------------------------------------------------------------------------------------------------------------
# A shared training loop, as a user would write it
# --------------------------------------------------------------------------------------------------------------

@dataclass
class Job:
    """One configured training: model, optimiser, schedule, data and loss."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    steps: int
    next_batch: Callable[[], tuple[Tensor, ...]]
    compute_loss: Callable[[nn.Module, tuple[Tensor, ...]], Tensor]
    zero_grad_every: int = 1  # 0: never (the user forgot optimizer.zero_grad())
    clip: float | None = None


def _run(job: Job, run_dir: Path) -> list[float]:
    """Train ``job`` with the probe attached; the per-step task loss (NaN/inf kept as they are)."""
    losses: list[float] = []
    job.model.train()
    with debugtune.attach(job.model, job.optimizer, run_dir) as probe:
        for step in range(job.steps):
            batch = job.next_batch()
            loss = job.compute_loss(job.model, batch)
            if job.zero_grad_every and step % job.zero_grad_every == 0:
                job.optimizer.zero_grad()
            loss.backward()
            if job.clip is not None:
                nn.utils.clip_grad_norm_(job.model.parameters(), job.clip)
            job.optimizer.step()
            lr = job.scheduler.get_last_lr()[0]
            job.scheduler.step()
            losses.append(float(loss.item()))
            probe.log(loss=losses[-1], lr=lr)
    return losses


def _run_and_score(job: Job, run_dir: Path, name: str, predict: Callable[[], Tensor], y_test: Tensor) -> list[float]:
    """Train ``job``, then keep the model's held-out accuracy in ``ACCURACY[name]`` (the check prints it)."""
    losses = _run(job, run_dir)
    job.model.eval()
    with torch.no_grad():
        ACCURACY[name] = _accuracy(predict(), y_test)
    return losses


def _sampler(n: int, batch_size: int, gen: torch.Generator) -> Callable[[], Tensor]:
    """Random mini-batch indices into a training set of ``n`` examples (reshuffled every epoch)."""
    order: list[Tensor] = []

    def next_indices() -> Tensor:
        if not order or order[0].numel() < batch_size:
            order[:] = [torch.randperm(n, generator=gen)]
        idx, order[0] = order[0][:batch_size], order[0][batch_size:]
        return idx

    return next_indices


def _pairs(x: Tensor, y: Tensor, batch_size: int, seed: int) -> Callable[[], tuple[Tensor, Tensor]]:
    """Mini-batches of (inputs, labels) drawn by `_sampler` from its own generator (seed + 1)."""
    indices = _sampler(len(x), batch_size, torch.Generator().manual_seed(seed + 1))

    def next_batch() -> tuple[Tensor, Tensor]:
        idx = indices()
        return x[idx], y[idx]

    return next_batch


def _noisy_labels(y: Tensor, share: float, num_classes: int, seed: int) -> Tensor:
    """Replace ``share`` of the labels (those >= 0) by uniformly random classes: a badly annotated dataset."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    flip = (torch.rand(y.shape, generator=gen) < share) & (y >= 0)
    random = torch.randint(0, num_classes, y.shape, generator=gen)
    return torch.where(flip, random, y)


def _lr_factor(fault: str | None, high: float, low: float) -> float:
    return {"LearningRateTooHigh": high, "LearningRateTooLow": low}.get(fault or "", 1.0)


# --------------------------------------------------------------------------------------------------------------
# 1. vit_shapes: a tiny vision transformer on synthetic pattern images
# --------------------------------------------------------------------------------------------------------------

IMG, PATCH, VIT_CLASSES = 16, 4, 5


def _pattern_images(n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """``n`` 16x16 images with raw pixel values in 0..255 and their class (0-4)."""
    y = torch.randint(0, VIT_CLASSES, (n,), generator=gen)
    r = torch.arange(IMG, dtype=torch.float32)
    rows, cols = r.view(1, IMG, 1), r.view(1, 1, IMG)
    period = 3.0 + 3.0 * torch.rand(n, 1, 1, generator=gen)
    phase = 2 * math.pi * torch.rand(n, 1, 1, generator=gen)

    def wave(t: Tensor) -> Tensor:
        return torch.sin(2 * math.pi * t / period + phase)

    cy, cx = 4 + 8 * torch.rand(2, n, 1, 1, generator=gen)
    sigma = 1.5 + 2.0 * torch.rand(n, 1, 1, generator=gen)
    patterns = torch.stack([
        (wave(rows + 0 * cols) > 0).float(),                                  # horizontal stripes
        (wave(cols + 0 * rows) > 0).float(),                                  # vertical stripes
        (wave((rows + cols) / math.sqrt(2)) > 0).float(),                     # diagonal stripes
        ((wave(rows + 0 * cols) > 0) ^ (wave(cols + 0 * rows) > 0)).float(),  # checkerboard
        torch.exp(-((rows - cy) ** 2 + (cols - cx) ** 2) / (2 * sigma**2)),  # blob
    ], dim=1)
    shape = patterns[torch.arange(n), y]
    background = 20 + 60 * torch.rand(n, 1, 1, generator=gen)
    contrast = 60 + 80 * torch.rand(n, 1, 1, generator=gen)
    noise = 60 * torch.randn(n, IMG, IMG, generator=gen)
    return (background + contrast * shape + noise).clamp(0, 255), y


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: self-attention and an MLP, each with a residual connection."""

    def __init__(self, dim: int, heads: int, hidden: int, activation: type[nn.Module]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), activation(), nn.Linear(hidden, dim))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    def __init__(self, dim: int = 48, depth: int = 2, heads: int = 4, activation: type[nn.Module] = nn.GELU,
                 softmax_head: bool = False) -> None:
        super().__init__()
        patches = (IMG // PATCH) ** 2
        self.embed = nn.Linear(PATCH * PATCH, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, patches + 1, dim))
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, 2 * dim, activation) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Sequential(nn.Linear(dim, VIT_CLASSES))
        if softmax_head:
            self.head.append(nn.Softmax(dim=-1))

    def forward(self, images: Tensor) -> Tensor:
        b = images.shape[0]
        patches = images.unfold(1, PATCH, PATCH).unfold(2, PATCH, PATCH).reshape(b, -1, PATCH * PATCH)
        x = torch.cat([self.cls.expand(b, -1, -1), self.embed(patches)], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def _vit_init(model: TinyViT, fault: str | None) -> None:
    """The usual ViT init (truncated normal, std 0.02); the faults' users wrote their own."""
    nn.init.trunc_normal_(model.pos, std=0.02)
    nn.init.trunc_normal_(model.cls, std=0.02)
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            if fault == "BadWeightInit":
                nn.init.normal_(m.weight, std=1.0)  # "plain" N(0, 1): 50x the intended std
            elif fault == "SaturatingActivations" and ".mlp." in name:
                nn.init.normal_(m.weight, std=1.0)  # sigmoid MLP with a plain N(0, 1) init
            else:
                nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)


def _warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return factor


def _accuracy(logits: Tensor, y: Tensor) -> float:
    keep = y >= 0
    return float((logits.argmax(-1)[keep] == y[keep]).float().mean())


def train_vit(run_dir: Path, seed: int, fault: str | None = None) -> list[float]:
    steps, batch_size, base_lr = 240, 64, 2e-3
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    raw_train, y_train = _pattern_images(3000, gen)
    raw_test, y_test = _pattern_images(500, gen)
    scaled = raw_train / 255.0
    mean, std = scaled.mean(), scaled.std()

    def preprocess(raw: Tensor) -> Tensor:
        return raw if fault == "UnnormalizedInputs" else (raw / 255.0 - mean) / std

    if fault == "LabelNoise":
        y_train = _noisy_labels(y_train, 0.4, VIT_CLASSES, seed)
    activation = nn.Sigmoid if fault == "SaturatingActivations" else nn.GELU
    model = TinyViT(activation=activation, softmax_head=fault == "LossActivationMismatch")
    _vit_init(model, fault)
    if fault == "FrozenParameters":  # "fine-tune only the head"
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("head."))
    lr = base_lr * _lr_factor(fault, high=100.0, low=1e-3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(20, steps))
    next_batch = _pairs(preprocess(raw_train), y_train, batch_size, seed)

    def compute_loss(m: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        return F.cross_entropy(m(batch[0]), batch[1])

    job = Job(model, optimizer, scheduler, steps, next_batch, compute_loss, clip=1.0,
              zero_grad_every=0 if fault == "MissingZeroGrad" else 1)
    return _run_and_score(job, run_dir, "vit_shapes", lambda: model(preprocess(raw_test)), y_test)


# --------------------------------------------------------------------------------------------------------------
# 2. cnn_signals: a 1-D CNN on synthetic multichannel sensor signals
# --------------------------------------------------------------------------------------------------------------

SIG_LEN, SIG_CLASSES = 128, 6
SIG_OFFSET = torch.tensor([0.0, 300.0, -80.0]).view(1, 3, 1)  # raw sensor units of the three channels
SIG_SCALE = torch.tensor([1.0, 20.0, 5.0]).view(1, 3, 1)


def _sensor_signals(n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """``n`` raw three-channel signals and their class: 3 base frequencies x (in phase, in anti-phase)."""
    y = torch.randint(0, SIG_CLASSES, (n,), generator=gen)
    freq = torch.tensor([3.0, 5.0, 8.0])[y // 2].view(n, 1) + 0.4 * torch.randn(n, 1, generator=gen)
    shift = math.pi * (y % 2).float().view(n, 1)  # channel 1 follows channel 0 in phase or in anti-phase
    t = torch.linspace(0, 1, SIG_LEN).view(1, SIG_LEN)
    phase = 2 * math.pi * torch.rand(n, 1, generator=gen)
    amp = 0.6 + 0.8 * torch.rand(n, 2, 1, generator=gen)
    ch0 = amp[:, 0] * torch.sin(2 * math.pi * freq * t + phase)
    ch1 = amp[:, 1] * torch.sin(2 * math.pi * freq * t + phase + shift + 0.3 * torch.randn(n, 1, generator=gen))
    drift = torch.cumsum(0.15 * torch.randn(n, SIG_LEN, generator=gen), dim=1)
    clean = torch.stack([ch0, ch1, drift], dim=1)
    noisy = clean + 1.0 * torch.randn(n, 3, SIG_LEN, generator=gen)
    baseline = 3.0 * torch.randn(n, 3, 1, generator=gen)  # per-recording baseline wander
    return SIG_OFFSET + SIG_SCALE * (noisy + baseline), y


class SignalCNN(nn.Module):
    def __init__(self, activation: type[nn.Module] = nn.ReLU, widths: tuple[int, ...] = (16, 32, 32),
                 kernels: tuple[int, ...] = (7, 5, 3)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for i, (c_out, k) in enumerate(zip(widths, kernels, strict=True)):
            layers += [nn.Conv1d(c_in, c_out, k, padding=k // 2), nn.BatchNorm1d(c_out), activation()]
            if i < len(widths) - 1:
                layers.append(nn.MaxPool1d(2))
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(c_in, SIG_CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))


def _cnn_user_init(model: SignalCNN, fault: str | None) -> None:
    for m in model.modules():
        if fault == "BadWeightInit" and isinstance(m, nn.Conv1d | nn.Linear):
            nn.init.normal_(m.weight, std=2.0)  # far above He's sqrt(2 / fan_in) = 0.1-0.36
        if fault == "DyingReLU" and isinstance(m, nn.BatchNorm1d):
            nn.init.constant_(m.bias, -4.0)  # shift before every ReLU: nearly all units start (and stay) dead


def train_cnn(run_dir: Path, seed: int, fault: str | None = None) -> list[float]:
    steps, batch_size, base_lr = 250, 32, 0.05
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    raw_train, y_train = _sensor_signals(2400, gen)
    raw_test, y_test = _sensor_signals(600, gen)
    centred = raw_train - raw_train.mean(dim=2, keepdim=True)
    channel_std = centred.std(dim=(0, 2), keepdim=True)

    def preprocess(raw: Tensor) -> Tensor:  # remove each recording's baseline, scale channels to unit std
        return raw if fault == "UnnormalizedInputs" else (raw - raw.mean(dim=2, keepdim=True)) / channel_std

    if fault == "LabelNoise":
        y_train = _noisy_labels(y_train, 0.55, SIG_CLASSES, seed)
    model = SignalCNN(activation=nn.Sigmoid if fault == "SaturatingActivations" else nn.ReLU)
    _cnn_user_init(model, fault)
    params = model.head.parameters() if fault == "FrozenParameters" else model.parameters()
    lr = base_lr * _lr_factor(fault, high=60.0, low=1 / 2000)
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.3)
    next_batch = _pairs(preprocess(raw_train), y_train, batch_size, seed)

    def compute_loss(m: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        logits = m(batch[0])
        if fault == "LossActivationMismatch":
            logits = F.softmax(logits, dim=1)  # "probabilities" handed to cross_entropy, which softmaxes again
        return F.cross_entropy(logits, batch[1])

    # MissingZeroGrad: gradients cleared only every 20 steps (a half-written gradient accumulation)
    job = Job(model, optimizer, scheduler, steps, next_batch, compute_loss,
              zero_grad_every=20 if fault == "MissingZeroGrad" else 1)
    return _run_and_score(job, run_dir, "cnn_signals", lambda: model(preprocess(raw_test)), y_test)


# --------------------------------------------------------------------------------------------------------------
# 3. gru_tagger: a bidirectional GRU tagging padded token sequences
# --------------------------------------------------------------------------------------------------------------

VOCAB, WORD_CLASSES, TAGS, PAD = 24, 4, 6, 0


def _tag_rules(seed: int) -> tuple[Tensor, Tensor]:
    """The hidden grammar: each word's class, and the tag of (left neighbour's class or start, the word)."""
    gen = torch.Generator().manual_seed(seed + 7)
    word_class = torch.cat([torch.tensor([-1]), torch.randint(0, WORD_CLASSES, (VOCAB - 1,), generator=gen)])
    table = torch.randint(0, TAGS, (WORD_CLASSES + 1, VOCAB), generator=gen)
    return word_class, table


def _tagged_sentences(n: int, gen: torch.Generator, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """``n`` padded sentences (ids 1..VOCAB-1, PAD after the end), their lengths and tags (-100 on padding)."""
    word_class, table = _tag_rules(seed)
    lengths = torch.randint(6, 25, (n,), generator=gen)
    max_len = int(lengths.max())
    tokens = torch.randint(1, VOCAB, (n, max_len), generator=gen)
    valid = torch.arange(max_len).view(1, -1) < lengths.view(-1, 1)
    tokens = torch.where(valid, tokens, PAD)
    cls = word_class[tokens].clamp(min=0)
    left = torch.cat([torch.full((n, 1), WORD_CLASSES), cls[:, :-1]], dim=1)  # WORD_CLASSES: sentence start
    tags = torch.where(valid, table[left, tokens], -100)
    return tokens, lengths, tags


class GRUTagger(nn.Module):
    def __init__(self, emb: int = 32, hidden: int = 48, activation: type[nn.Module] = nn.ReLU,
                 sigmoid_out: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, emb, padding_idx=PAD)
        self.gru = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.hidden = nn.Linear(2 * hidden, 64)
        self.act = activation()
        self.out = nn.Linear(64, TAGS)
        self.sigmoid_out = sigmoid_out

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                                   enforce_sorted=False)
        states, _ = self.gru(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=tokens.shape[1])
        scores = self.out(self.act(self.hidden(states)))
        return torch.sigmoid(scores) if self.sigmoid_out else scores  # sigmoid: "per-tag scores in [0, 1]"


def _tagger_model(fault: str | None) -> GRUTagger:
    model = GRUTagger(activation=nn.Sigmoid if fault == "SaturatingActivations" else nn.ReLU,
                      sigmoid_out=fault == "LossActivationMismatch")
    with torch.no_grad():
        if fault == "BadWeightInit":
            for p in model.parameters():
                p.mul_(12.0)  # "stronger init": every weight x12 after construction
        elif fault == "SaturatingActivations":
            nn.init.normal_(model.hidden.weight, std=1.0)  # sigmoid hidden layer with a plain N(0, 1) init
        elif fault == "DyingReLU":
            nn.init.constant_(model.hidden.bias, -3.0)  # every hidden pre-activation far below zero
    if fault == "FrozenParameters":  # "keep the encoder fixed, train the classifier"
        model.embed.requires_grad_(False)
        model.gru.requires_grad_(False)
    return model


def train_tagger(run_dir: Path, seed: int, fault: str | None = None) -> list[float]:
    steps, batch_size, base_lr = 250, 32, 3e-3
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    tokens, lengths, tags = _tagged_sentences(3000, gen, seed)
    test_tokens, test_lengths, test_tags = _tagged_sentences(500, gen, seed)
    if fault == "LabelNoise":
        tags = _noisy_labels(tags, 0.35, TAGS, seed)
    model = _tagger_model(fault)
    lr = base_lr * _lr_factor(fault, high=200.0, low=1 / 500)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)  # constant rate
    criterion = nn.CrossEntropyLoss(ignore_index=-100)
    indices = _sampler(len(tokens), batch_size, torch.Generator().manual_seed(seed + 1))

    def next_batch() -> tuple[Tensor, Tensor, Tensor]:
        idx = indices()
        width = int(lengths[idx].max())
        return tokens[idx, :width], lengths[idx], tags[idx, :width]

    def compute_loss(m: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        scores = m(batch[0], batch[1])
        return criterion(scores.reshape(-1, TAGS), batch[2].reshape(-1))

    job = Job(model, optimizer, scheduler, steps, next_batch, compute_loss,
              zero_grad_every=0 if fault == "MissingZeroGrad" else 1)
    return _run_and_score(job, run_dir, "gru_tagger", lambda: model(test_tokens, test_lengths), test_tags)


# --------------------------------------------------------------------------------------------------------------
# The runner's interface
# --------------------------------------------------------------------------------------------------------------

_COMMON = ("LearningRateTooHigh", "LearningRateTooLow", "MissingZeroGrad", "FrozenParameters", "BadWeightInit",
           "SaturatingActivations", "LabelNoise", "LossActivationMismatch")

PROGRAMS: dict[str, Train] = {"vit_shapes": train_vit, "cnn_signals": train_cnn, "gru_tagger": train_tagger}

# Fault key -> cause. The ViT has no ReLU (GELU), the tagger's inputs are token ids (nothing to normalise).
FAULTS: dict[str, dict[str, str]] = {
    "vit_shapes": {k: k for k in (*_COMMON, "UnnormalizedInputs")},
    "cnn_signals": {k: k for k in (*_COMMON, "DyingReLU", "UnnormalizedInputs")},
    "gru_tagger": {k: k for k in (*_COMMON, "DyingReLU")},
}


def _check(seed: int = 0) -> None:
    """Train every program healthy and with each fault once; print first / final loss, accuracy and time."""
    print(f"{'program':12} {'fault':24} {'first':>9} {'last10%':>9} {'acc':>6} {'sec':>6}")
    for name, train in PROGRAMS.items():
        for fault in (None, *FAULTS[name]):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                losses = train(Path(tmp) / "run", seed, fault)
                seconds = time.perf_counter() - start
            tail = float(torch.tensor(losses[-max(1, len(losses) // 10):]).median())
            print(f"{name:12} {fault or 'healthy':24} {losses[0]:9.4g} {tail:9.4g} "
                  f"{ACCURACY.get(name, float('nan')):6.3f} {seconds:6.1f}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    torch.set_num_threads(1)
    _check()
