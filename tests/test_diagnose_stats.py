"""The shared statistics the detectors stand on (`engine.diagnose.stats`), on series whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from debugtune.engine.diagnose.stats import dominant_period


@pytest.mark.parametrize("seed", range(6))
def test_a_slow_wave_whose_phase_wanders_is_found_at_its_period(seed):
    """A 128-step wave (a data mixture that swings) whose phase drifts a little, under per-step noise: the ACF
    stays near its plateau over the wave's first quarter, and noise makes local peaks there (lags 4-9) that the
    highest-peak rule took for the period on 18 of 20 seeds. The period is taken after the ACF first falls below
    zero (the shape of the chain scenario's loss, docs/tune.md, fifth attempt)."""
    rng = np.random.default_rng(seed)
    t = np.arange(2700)
    wave = 0.085 * np.sin(2 * np.pi * t / 128 + np.cumsum(rng.normal(0.0, 0.03, t.size)))
    period, peak = dominant_period(wave + rng.normal(0.0, 0.05, t.size), 4, 675)
    assert 120 <= period <= 136 and peak > 0.3


def test_a_short_period_is_still_found_and_noise_has_none_above_chance():
    rng = np.random.default_rng(0)
    t = np.arange(600)
    period, peak = dominant_period(np.sin(2 * np.pi * t / 12) + 0.3 * rng.standard_normal(t.size), 4, 150)
    assert period == 12 and peak > 0.6
    _, noise_peak = dominant_period(rng.standard_normal(600), 4, 150)
    assert noise_peak < 0.2
