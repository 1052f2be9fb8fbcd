"""One paragraph per hypothesis: the findings of its chain in onset order, each with its numbers."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from debugtune.engine.infer.causal import CauseScore, SymptomEvidence
from debugtune.engine.infer.model import CausalModel
from debugtune.kg.records import Finding


def _g(ev: Mapping[str, float | str | bool], key: str, default: float = float("nan")) -> float:
    """A numeric evidence value (NaN when absent or categorical)."""
    value = ev.get(key, default)
    return default if isinstance(value, str) else float(value)


def _share_phrase(f: Finding, key: str, what: str) -> str:
    """", <what> would take back N% of the slowdown" from a what-if share (engine/diagnose/parallel_grid.py)."""
    share = _g(f.evidence, key)
    return f"; {what} would take back {share:.0%} of the {_g(f.evidence, 'slowdown'):.2f}x slowdown" \
        if share == share else ""


def _where(f: Finding) -> str:
    return f" in {f.entity}" if f.entity else ""


def _expert(f: Finding) -> str:
    e = f.evidence
    share = f" received {_g(e, 'token_share'):.0%} of tokens" if "token_share" in e else " took most tokens"
    return (f"expert {int(_g(e, 'expert', 0))}{share} from step {f.onset_step} to {f.end_step} (CV {_g(e, 'cv'):.2f}, "
            f"MaxVio {_g(e, 'maxvio'):.2f}, normalised entropy {_g(e, 'entropy'):.2f})")


def _router(f: Finding) -> str:
    e = f.evidence
    rel = f", {_g(e, 'relative_to_layers'):.1e} of the layers' median" if "relative_to_layers" in e else ""
    return f"the router gradient{_where(f)} fell to {_g(e, 'router_grad_norm'):.1e}{rel} at step {f.onset_step}"


def _oscillation(f: Finding) -> str:
    e = f.evidence
    if "period_steps" in e:
        return (f"the loss oscillates with period {_g(e, 'period_steps'):.0f} steps, amplitude "
                f"±{_g(e, 'amplitude'):.2f} ({_g(e, 'relative_amplitude'):.0%} of its level) from step {f.onset_step}")
    return (f"the loss bounces by ±{_g(e, 'amplitude'):.2f} ({_g(e, 'relative_amplitude'):.0%} of its level) "
            f"without a clean period from step {f.onset_step}")


def _spike(f: Finding) -> str:
    e = f.evidence
    n = int(_g(e, "spikes", 1))
    rec = _g(e, "recovery_steps")
    tail = f", recovering in {rec:.0f} steps" if rec == rec else ", without recovering"
    return (f"{n} loss spike{'s' if n > 1 else ''} from step {f.onset_step}, the largest "
            f"{_g(e, 'max_robust_z'):.0f}σ above the trailing median at step {int(_g(e, 'peak_step', f.onset_step))}"
            f" ({_g(e, 'baseline_loss'):.3g} → {_g(e, 'peak_loss'):.3g}){tail}")


def _explosion(f: Finding) -> str:
    e = f.evidence
    if e.get("rule") == "init_ratio":
        return (f"the gradients were {_g(e, 'peak_ratio'):.1f}× the weights' norm from the first step "
                f"(layer median), the scale at which one update rewrites the initialisation")
    if e.get("rule") == "first_last_ratio":
        return (f"the first layer's gradient ({f.entity}) reached {_g(e, 'peak_ratio'):.0f}× the last layer's "
                f"from step {f.onset_step}")
    return (f"the gradient norm reached {_g(e, 'peak_ratio'):.0f}× its early maximum ({_g(e, 'grad_norm_peak'):.3g}) "
            f"from step {f.onset_step}")


_DEAD_WHAT = {"act_in_dead_frac": "input units", "act_zero_frac": "activations", "grad_zero_frac": "gradient entries"}


def _dead(f: Finding) -> str:
    e = f.evidence
    key = next((k for k in _DEAD_WHAT if k in e), "grad_zero_frac")
    return (f"{_g(e, key):.0%} of {f.entity}'s {_DEAD_WHAT[key]} were zero from step {f.onset_step} "
            f"({int(_g(e, 'layers_affected', 1))} layer(s) above {_g(e, 'threshold'):.0%})")


def _batch_outlier(f: Finding) -> str:
    e = f.evidence
    head = f"the batch of step {int(_g(e, 'peak_step', f.onset_step))} "
    if "batch_distinct_frac" not in e:
        return head + (f"had inputs {_g(e, 'ratio'):.0f}× off the usual scale (std {_g(e, 'batch_std'):.3g} vs "
                       f"{_g(e, 'typical_std'):.3g})")
    usual = f"usually {_g(e, 'typical_distinct_frac'):.0%} of the ids other than the most frequent are distinct"
    if _g(e, "batch_distinct_frac") == 0:
        return head + f"was one token id repeated ({usual})"
    return head + (f"had {_g(e, 'ratio'):.0f}× fewer distinct token ids than usual "
                   f"({_g(e, 'batch_distinct_frac'):.1%}; {usual})")


def _dead_at_init(f: Finding) -> str:
    e = f.evidence
    return (f"at step {int(_g(e, 'first_step', 0))}, before any update, {_g(e, 'act_in_dead_frac_at_init'):.0%} of "
            f"{f.entity}'s input units were zero for every sample, and they stayed dead")


def _update_ratio(f: Finding) -> str:
    e = f.evidence
    side = "above" if f.symptom == "UpdateRatioTooHigh" else "below"
    return (f"the update/weight ratio was {_g(e, 'update_ratio_median'):.1e}, {side} the band "
            f"[{_g(e, 'band_low'):.0e}, {_g(e, 'band_high'):.0e}] from step {f.onset_step}")


_OUTPUT_KIND = {"softmax": "probabilities (rows summing to 1)", "relu": "rectified (non-negative, many exact zeros)",
                "sigmoid": "squashed into (0, 1)"}
_LOSS_SEEN = {"softmax_logits": "cross-entropy, which applies its own softmax",
              "sigmoid_logits": "BCEWithLogits, which applies its own sigmoid",
              "sigmoid_twice": "a sigmoid and then BCEWithLogits (a second sigmoid)",
              "sigmoid_softmax": "a sigmoid and then cross-entropy",
              "softmax_twice": "a softmax and then cross-entropy",
              "relu_softmax": "a ReLU and then cross-entropy", "relu_sigmoid": "a ReLU and then BCEWithLogits",
              "relu": "a ReLU before the loss (a zero gradient on every negative output)"}


def _underconfident(f: Finding) -> str:
    on_eval = f.evidence.get("accuracy_source") == "evaluation"
    text = (f"the {'evaluation ' if on_eval else ''}loss stayed at {_g(f.evidence, 'loss_end'):.3g} from step "
            f"{f.onset_step} while the {'evaluation ' if on_eval else ''}accuracy reached "
            f"{_g(f.evidence, 'accuracy_end'):.0%}, {_g(f.evidence, 'excess_nats'):.2f} nats above the "
            f"{_g(f.evidence, 'calibrated_loss_bound'):.3g} of a calibrated model")
    if on_eval:
        text += (f"; the training loss never fell below {_g(f.evidence, 'squashed_loss_floor'):.3g}, the least a "
                 f"softmax or sigmoid in front of the loss allows")
    return text


PHRASES: dict[str, Callable[[Finding], str]] = {
    "ExpertImbalance": _expert,
    "RouterGradVanishing": _router,
    "LossOscillation": _oscillation,
    "LossSpike": _spike,
    "GradientExplosion": _explosion,
    "DeadUnits": _dead,
    "UnitsDeadAtInit": _dead_at_init,
    "LabelErrorsAtRandom": lambda f: (f"where the labels contradict the model (which agrees with them "
                                      f"{_g(f.evidence, 'kappa'):.0%} beyond chance), they name a class ranked "
                                      f"{_g(f.evidence, 'error_rank'):.2f} of the way down the others: about "
                                      f"{_g(f.evidence, 'random_share_of_errors'):.0%} of them at random"),
    "OutputCannotReachTargets": lambda f: (
        f"{_g(f.evidence, 'bound_push'):.0%} of the output gradient pushes outputs past a bound of their range "
        f"(targets a sigmoid or ReLU at the end cannot reach)" if f.evidence.get("how") == "bound" else
        f"the gradient of {_g(f.evidence, 'gated_share'):.0%} more of the negative outputs than of the positive "
        f"ones is exactly zero (a ReLU or clamp between the output and the loss)"),
    "UpdateRatioAbnormal": _update_ratio,
    "UpdateRatioTooHigh": _update_ratio,
    "UpdateRatioTooLow": _update_ratio,
    "LossDivergence": lambda f: (f"the loss diverged from step {f.onset_step}, rising "
                                 f"{_g(f.evidence, 'relative_rise'):.0%} above its best "
                                 f"({_g(f.evidence, 'loss_min'):.3g} → {_g(f.evidence, 'loss_end'):.3g})"),
    "EarlyLossBlowup": lambda f: (f"within the first {_g(f.evidence, 'window_steps'):.0f} steps the smoothed loss "
                                  f"rose to {_g(f.evidence, 'max_ratio'):.3g} times its best so far (first "
                                  f"{_g(f.evidence, 'loss_first'):.3g}, peak "
                                  f"{_g(f.evidence, 'loss_peak'):.3g}): the first updates were too large"),
    "LossFitsClosely": lambda f: (f"the loss ended at {_g(f.evidence, 'loss_ratio'):.2g} of the untrained "
                                  f"model's ({_g(f.evidence, 'loss_untrained'):.3g} → "
                                  f"{_g(f.evidence, 'loss_end'):.3g}): the model fits its data"),
    "LossPlateau": lambda f: (f"the loss improved only {_g(f.evidence, 'relative_improvement'):.1%} over the run "
                              f"({_g(f.evidence, 'loss_start'):.3g} → {_g(f.evidence, 'loss_end'):.3g})"
                              + (f" at learning rate {_g(f.evidence, 'lr_median'):.1e}" if "lr_median" in f.evidence
                                 else "")),
    "NaNOrInf": lambda f: f"NaN/Inf values first appeared at step {f.onset_step}{_where(f)}",
    "UnderconfidentOutputs": _underconfident,
    "GradientVanishing": lambda f: (f"every layer's gradient norm was {_g(f.evidence, 'last_layer_norm'):.1e} or less "
                                    f"from step {f.onset_step} while the loss had not converged"
                                    if f.evidence.get("all_layers") else
                                    f"the first layer's gradient ({f.entity}) was "
                                    f"{_g(f.evidence, 'first_last_ratio'):.1e} of the last layer's from step "
                                    f"{f.onset_step}"),
    "GradNormSawtooth": lambda f: (f"the gradient norm climbed and reset every {int(_g(f.evidence, 'period_steps'))} "
                                   f"steps (rising on {_g(f.evidence, 'rising_share'):.0%} of the steps, "
                                   f"{_g(f.evidence, 'peak_to_trough'):.1f}× peak to trough)"),
    "GradNormDrift": lambda f: (f"the gradient norm grew {_g(f.evidence, 'growth'):.0f}× over the run "
                                f"({_g(f.evidence, 'grad_norm_start'):.3g} → {_g(f.evidence, 'grad_norm_end'):.3g})"),
    "ActivationSaturation": lambda f: (f"{_g(f.evidence, 'act_sat_frac', _g(f.evidence, 'act_in_sat_frac')):.0%} of "
                                       f"{f.entity}'s {'inputs' if 'act_in_sat_frac' in f.evidence else 'activations'}"
                                       f" were saturated from step {f.onset_step}"),
    "BoundedActivationsAttenuate": lambda f: (f"{int(_g(f.evidence, 'modules_affected'))} of "
                                              f"{int(_g(f.evidence, 'hidden_bounded'))} hidden bounded activations "
                                              f"(first {f.entity}) passed on a mean slope of "
                                              f"{_g(f.evidence, 'act_slope', _g(f.evidence, 'act_in_slope')):.2f} "
                                              f"from step {f.onset_step}"),
    "GradientNoiseDominated": lambda f: (f"consecutive gradients pointed in unrelated directions (mean cosine "
                                         f"{_g(f.evidence, 'grad_cos_mean'):+.2f}) before the loss had made half of "
                                         f"its progress"),
    "LearningRateTiny": lambda f: f"the learning rate never exceeded {_g(f.evidence, 'lr_peak'):.1e}",
    "ZeroUpdate": lambda f: (f"{int(_g(f.evidence, 'layers_frozen'))} of {int(_g(f.evidence, 'layers_total'))} layers "
                             f"(first {f.entity}) never changed"
                             + ("" if f.evidence.get("has_gradient", True) else ", and received no gradient")),
    "Overfitting": lambda f: (f"validation loss rose {_g(f.evidence, 'relative_rise'):.0%} above its minimum "
                              f"{_g(f.evidence, 'eval_loss_min'):.3g} from step {f.onset_step} while the training loss "
                              f"kept falling"),
    "BalanceLossNegligible": lambda f: (f"the logged loss bounds the balancing coefficient to "
                                        f"{_g(f.evidence, 'aux_coeff_bound'):.1e} or less from step {f.onset_step} "
                                        f"(the logged aux_loss is the raw balance loss)"
                                        if "aux_coeff_bound" in f.evidence else
                                        f"the load-balancing loss was {_g(f.evidence, 'aux_loss'):.1e}, "
                                        f"{_g(f.evidence, 'aux_share_of_loss'):.1e} of the training loss, from step "
                                        f"{f.onset_step} (no balancing pressure)"),
    "DeadExperts": lambda f: (f"{int(_g(f.evidence, 'dead_experts'))} of {int(_g(f.evidence, 'experts'))} experts got "
                              f"almost no tokens from step {f.onset_step}"),
    "TokenDropping": lambda f: (f"{_g(f.evidence, 'drop_fraction'):.1%} of token assignments were dropped from step "
                                f"{f.onset_step}"),
    "SlowRank": lambda f: (f"rank {int(_g(f.evidence, 'rank'))} was slow from step {f.onset_step} (spread "
                           f"{_g(f.evidence, 'spread'):.0%} across {int(_g(f.evidence, 'ranks'))} ranks, "
                           f"+{_g(f.evidence, 'excess_ms'):.1f} ms per step, outlier in "
                           f"{_g(f.evidence, 'vote_fraction'):.0%} of collectives)"),
    "SlowCompute": lambda f: (f"rank {int(_g(f.evidence, 'rank'))} computed {_g(f.evidence, 'compute_ratio'):.2f}x "
                              f"the median of its group ({f.evidence.get('group', '')}) from step {f.onset_step}"),
    "SlowPipelineStage": lambda f: (f"pipeline stage {int(_g(f.evidence, 'stage'))} (ranks "
                                    f"{f.evidence.get('ranks', '')}) computed {_g(f.evidence, 'stage_ratio'):.2f}x "
                                    f"the other stages from step "
                                    f"{f.onset_step}" + _share_phrase(f, "stage_share", "fixing that stage")),
    "ReplicaComputeVariation": lambda f: (f"per-step compute varied across {int(_g(f.evidence, 'replicas'))} "
                                          f"data-parallel replicas by CV {_g(f.evidence, 'replica_cv'):.2f}, every "
                                          f"stage of a replica alike (correlation {_g(f.evidence, 'coherence'):.2f}), "
                                          f"no replica slowest on more than "
                                          f"{_g(f.evidence, 'slowest_replica_share'):.0%} of the steps"
                                          + _share_phrase(f, "replica_share", "balancing the replicas")),
    "ComputeImbalance": lambda f: (f"compute time varied across ranks by CV {_g(f.evidence, 'compute_cv'):.2f} with "
                                   f"no rank slowest on more than {_g(f.evidence, 'slowest_rank_share'):.0%} of the "
                                   f"steps"),
    "DeviceIdle": lambda f: (f"the device{' of ' + f.entity if f.entity else ''} was idle "
                             f"{_g(f.evidence, 'idle_share'):.0%} of the step from step {f.onset_step}"
                             + (f" ({_g(f.evidence, 'host_wait_share'):.0%} of the step waiting on the host)"
                                if "host_wait_share" in f.evidence else "")),
    "HostBound": lambda f: (f"the host set the pace{' of ' + f.entity if f.entity else ''} from step {f.onset_step} "
                            f"({f.evidence.get('rule', '')})"),
    "DataLoaderWait": lambda f: (f"the data loader{' of ' + f.entity if f.entity else ''} waited "
                                 f"{_g(f.evidence, 'wait_ms'):.1f} ms per step from step {f.onset_step}"
                                 + (f" ({_g(f.evidence, 'share_of_step'):.0%} of the step)"
                                    if "share_of_step" in f.evidence else "")),
    "StepTimeRegression": lambda f: (f"step time rose {_g(f.evidence, 'relative_rise'):.0%} "
                                     f"({_g(f.evidence, 'step_time_ms_before'):.1f} → "
                                     f"{_g(f.evidence, 'step_time_ms_after'):.1f} ms) from step {f.onset_step}"),
    "CrossCabinetTraffic": lambda f: (f"{_g(f.evidence, 'share'):.0%} of the tokens dispatched to experts crossed "
                                      "cabinets (median over the steps)"),
    "HighCommunicationShare": lambda f: (f"communication took {_g(f.evidence, 'share'):.0%} of the step time from "
                                         f"step {f.onset_step}"),
    "SlowLink": lambda f: (f"link {f.entity} ran at {_g(f.evidence, 'bandwidth_gbps'):.1f} GB/s, "
                           f"{_g(f.evidence, 'ratio_to_average'):.0%} of the average"),
    "LowBandwidthUtilization": lambda f: (f"{f.entity} used {_g(f.evidence, 'utilisation'):.0%} of the "
                                          f"{_g(f.evidence, 'peak_gbps'):.0f} GB/s link peak"),
    "AllToAllImbalance": lambda f: (f"all-to-all bytes were {_g(f.evidence, 'size_imbalance'):.1f}× the mean on rank "
                                    f"{int(_g(f.evidence, 'heavy_rank'))} from step {f.onset_step}"),
    "DeadOutputUnits": lambda f: (f"the output layer {f.entity} had {_g(f.evidence, 'excess_zero_frac'):.0%} more "
                                  f"exact-zero gradient entries than the layer before it from step {f.onset_step}: "
                                  f"something between the logits and the loss cuts their gradient"),
    "SlowConvergence": lambda f: (f"the loss was still falling at the end: {_g(f.evidence, 'late_share'):.0%} of its "
                                  f"improvement came in the second half "
                                  f"({_g(f.evidence, 'loss_start'):.3g} → {_g(f.evidence, 'loss_end'):.3g})"),
    "ValidationAboveTraining": lambda f: (f"held-out accuracy stayed {_g(f.evidence, 'gap'):.0%} above training "
                                          f"accuracy from step {f.onset_step} "
                                          f"(t = {_g(f.evidence, 't_statistic'):.1f}):"
                                          f" the training labels or inputs are harder than the held-out ones"),
    "InputScaleAbnormal": lambda f: (f"the model's input had an RMS of {_g(f.evidence, 'input_rms'):.3g} (mean "
                                     f"{_g(f.evidence, 'input_mean'):.3g}, std {_g(f.evidence, 'input_std'):.3g})"
                                     + (f", features on scales {_g(f.evidence, 'feature_scale_ratio'):.0f}× apart"
                                        if "feature_scale_ratio" in f.evidence else "") + " instead of about 1"),
    "InputBatchOutlier": _batch_outlier,
    "ForwardSignalVanishing": lambda f: (f"at the first step the model's output was "
                                         f"{_g(f.evidence, 'end_to_end_gain'):.1e} of its input's scale "
                                         f"(output std {_g(f.evidence, 'output_std'):.1e})"),
    "InitWeightsTooLarge": lambda f: (f"at attach the weight layers' gain std(W)·sqrt(fan_in) was "
                                      f"{_g(f.evidence, 'init_gain_median'):.3g} (median; He's init gives 1.41)"
                                      if "init_gain_median" in f.evidence else
                                      f"at attach the normalisation layers' gain |gamma| was "
                                      f"{_g(f.evidence, 'init_norm_gain_median'):.3g} (median; frameworks start "
                                      f"it at 1)"),
    "StaleGradients": lambda f: (f"the gradients were not zeroed on {_g(f.evidence, 'stale_step_share'):.0%} of the "
                                 f"steps (the previous step's gradient was still in .grad at the next backward)"),
    "ParametersNotOptimized": lambda f: (f"{int(_g(f.evidence, 'layers_not_optimized'))} layer(s) (first {f.entity}) "
                                         f"received gradients but are in no optimizer and never changed"),
    "MostParametersFrozen": lambda f: (f"{int(_g(f.evidence, 'frozen_tensors'))} of "
                                       f"{int(_g(f.evidence, 'tensors_total'))} parameter tensors (first "
                                       f"{f.entity}) have requires_grad=False and never change (meant only "
                                       f"when probing or fine-tuning a part)"),
    "FrozenAtInitialisation": lambda f: (f"{int(_g(f.evidence, 'as_constructed'))} of the "
                                         f"{int(_g(f.evidence, 'judged'))} frozen tensors the probe could test "
                                         f"(first {f.entity}) still hold the values their constructors drew: "
                                         f"the frozen part was never trained"),
    "PredictionsNearConstant": lambda f: (f"from step {f.onset_step} the model's predictions explained "
                                          f"{_g(f.evidence, 'explained_share'):.0%} of the targets' variance "
                                          f"(output std {_g(f.evidence, 'output_std'):.2g}): it predicts about the "
                                          f"same for every input"),
    "OutputsNotLogits": lambda f: (f"the model's outputs were "
                                   f"{_OUTPUT_KIND.get(str(f.evidence.get('kind')), 'squashed')}"
                                   f" (range {_g(f.evidence, 'output_min'):.3g} to {_g(f.evidence, 'output_max'):.3g}),"
                                   f" not logits"),
    "SquashBeforeLogitLoss": lambda f: (f"the gradient at the model's output was exactly that of "
                                        f"{_LOSS_SEEN.get(str(f.evidence.get('loss_seen')), 'a loss on logits')}"
                                        f" on {_g(f.evidence, 'share'):.0%} of its elements (outputs "
                                        f"{f.evidence.get('outputs', 'unknown')})"),
    "RouterBiasedAtInit": lambda f: (f"at initialisation router {f.entity} preferred one expert by "
                                     f"{_g(f.evidence, 'spread_nats'):.1f} nats "
                                     f"({_g(f.evidence, 'preference_factor'):.0f}× the median expert's probability)"),
    "LowAcceleratorUtilization": lambda f: f"{f.entity} was {_g(f.evidence, 'util_pct'):.0f}% utilised",
    "MemoryPressure": lambda f: f"{f.entity} memory was {_g(f.evidence, 'used_fraction'):.0%} full",
    "ThermalThrottling": lambda f: f"{f.entity} was throttled from step {f.onset_step}",
    "PowerCapped": lambda f: f"{f.entity} ran at its power cap from step {f.onset_step}",
}


def phrase(f: Finding) -> str:
    """One clause describing a finding with its numbers."""
    fn = PHRASES.get(f.symptom)
    if fn is not None:
        try:
            return fn(f)
        except (ValueError, TypeError):
            pass
    return f"{f.symptom}{_where(f)} from step {f.onset_step} (severity {f.severity:.2f})"


def explanation(model: CausalModel, score: CauseScore, confidence: float,
                ev: Mapping[str, SymptomEvidence]) -> str:
    """The paragraph: cause, confidence, the chain's findings in onset order, and what argues against."""
    findings = [f for sym in score.explained for f in ev[sym].findings]  # chain order
    parts = [phrase(f) for f in findings]
    body = "; ".join(parts) if parts else "no finding is directly explained"
    label = model.label(score.cause)
    text = f"{label[:1].upper() + label[1:]} (confidence {confidence:.2f}): {body[0].upper() + body[1:]}."
    if score.timing_violations:
        text += (" Some of its effects began later than this cause explains well." if model.from_start and
                 score.cause in model.from_start else " Its effects began too early for an event during the run.")
    if score.precedence_violations:
        text += f" {score.precedence_violations} step(s) of the chain start before their antecedent."
    if score.missing:
        names = ", ".join(model.label(s) for s, _ in sorted(score.missing, key=lambda m: -m[1])[:3])
        text += f" Expected but not seen: {names}."
    return text
