"""Graph convolutions: a 2-layer GCN on a stochastic-block-model graph, full batch, the standard recipe.

The graph: ``NODES`` nodes in ``CLASSES`` blocks, edges within a block with probability ``P_IN`` and
across with ``P_OUT`` (Holland et al. 1983); node features are sparse binary "words" whose rates
differ only a little between blocks, so the features alone classify poorly and the neighbourhood
carries the signal. The model and recipe are Kipf & Welling's (2017, "Semi-supervised classification
with graph convolutional networks", §5.2): two graph convolutions over the renormalised adjacency
D^-1/2 (A + I) D^-1/2, 16 hidden units, ReLU, dropout 0.5, Adam lr 1e-2, weight decay 5e-4, 200
epochs, 20 labelled nodes per class.

Its telemetry: every step is the whole graph (one batch, one step per epoch), the loss is computed on
80 labelled nodes out of 600, weight decay and dropout keep it well above zero, and Adam at 1e-2 on so
few examples moves the weights by a large fraction per step. Learning is measured on the unlabelled
test nodes: accuracy above a bar and above the features-only logistic regression's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios.common import probe_session, seed_everything

NODES, CLASSES, FEATURES = 600, 4, 200
P_IN, P_OUT = 0.04, 0.004
WORD_RATE, WORD_BOOST = 0.05, 1.0  # a block's own quarter of the words is twice as frequent
PER_CLASS, VAL = 20, 120
HIDDEN, DROPOUT, LR, WEIGHT_DECAY = 16, 0.5, 1e-2, 5e-4
STEPS = 200
MIN_STEPS = 150
# learned: test accuracy of at least 0.8 (chance 0.25) and 0.1 above the features-only baseline
ACCURACY_BAR, MARGIN_BAR = 0.8, 0.1


class SBMGraph:
    """The graph, features and split of one seed (tensors ready for full-batch training)."""

    def __init__(self, seed: int):
        rng = np.random.default_rng([seed, 1983])
        y = np.repeat(np.arange(CLASSES), NODES // CLASSES)
        rng.shuffle(y)
        same = y[:, None] == y[None, :]
        upper = np.triu(rng.random((NODES, NODES)) < np.where(same, P_IN, P_OUT), k=1)
        adj = (upper | upper.T).astype(np.float64) + np.eye(NODES)
        d = 1.0 / np.sqrt(adj.sum(axis=1))
        self.a_hat = torch.from_numpy((adj * d[:, None] * d[None, :]).astype(np.float32))
        rate = np.full((CLASSES, FEATURES), WORD_RATE)
        for c in range(CLASSES):
            rate[c, c * FEATURES // CLASSES:(c + 1) * FEATURES // CLASSES] *= 1.0 + WORD_BOOST
        x = (rng.random((NODES, FEATURES)) < rate[y]).astype(np.float32)
        x /= np.maximum(x.sum(axis=1, keepdims=True), 1.0)  # row-normalised features, as Kipf & Welling
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        order = rng.permutation(NODES)
        train = np.concatenate([order[y[order] == c][:PER_CLASS] for c in range(CLASSES)])
        rest = np.setdiff1d(order, train, assume_unique=True)
        rest = rest[rng.permutation(len(rest))]
        self.train, self.val, self.test = (torch.from_numpy(np.sort(i)) for i in (train, rest[:VAL], rest[VAL:]))
        self.edges = int(upper.sum())


class GraphConvolution(nn.Module):
    """H' = A_hat H W + b with Glorot-uniform W."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(inputs, outputs))
        self.bias = nn.Parameter(torch.zeros(outputs))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, h: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
        return a_hat @ (h @ self.weight) + self.bias


class GCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gc1 = GraphConvolution(FEATURES, HIDDEN)
        self.gc2 = GraphConvolution(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
        h = F.dropout(x, DROPOUT, self.training)
        h = F.relu(self.gc1(h, a_hat))
        h = F.dropout(h, DROPOUT, self.training)
        return self.gc2(h, a_hat)


def features_only_accuracy(g: SBMGraph) -> float:
    """Test accuracy of a logistic regression on the node features alone (the graph ignored)."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=500).fit(g.x[g.train].numpy(), g.y[g.train].numpy())
    return float(clf.score(g.x[g.test].numpy(), g.y[g.test].numpy()))


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("gcn_sbm", steps, STEPS)
    seed_everything(seed)
    g = SBMGraph(seed)
    model = GCN()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    losses, val_losses, val_accs = [], [], []
    meta = {"program": "gcn_sbm", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, run_id=run_id, meta=meta) as pr:
        for _ in range(n_steps):
            model.train()
            optimizer.zero_grad()
            out = model(g.x, g.a_hat)
            loss = F.cross_entropy(out[g.train], g.y[g.train])
            loss.backward()
            optimizer.step()
            model.eval()
            with torch.no_grad():
                out = model(g.x, g.a_hat)
                val_loss = F.cross_entropy(out[g.val], g.y[g.val]).item()
                val_acc = (out[g.val].argmax(1) == g.y[g.val]).float().mean().item()
            losses.append(loss.item())
            val_losses.append(val_loss)
            val_accs.append(val_acc)
            if pr is not None:
                pr.log(train_loss=losses[-1], val_loss=val_loss, val_acc=val_acc, epoch=len(losses))
    model.eval()
    with torch.no_grad():
        test_acc = (model(g.x, g.a_hat)[g.test].argmax(1) == g.y[g.test]).float().mean().item()
    baseline = features_only_accuracy(g)
    checks = [Check("test_accuracy", test_acc, ">=", ACCURACY_BAR),
              Check("margin_over_features", test_acc - baseline, ">=", MARGIN_BAR)]
    summary = verdict(checks, features_only_accuracy=baseline, edges=g.edges, chance_accuracy=1.0 / CLASSES,
                      final_val_accuracy=val_accs[-1])
    return as_series(loss=losses, val_loss=val_losses, val_accuracy=val_accs), summary
