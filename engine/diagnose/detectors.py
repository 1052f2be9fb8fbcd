"""Every detector, registered in one table (the contract test in ``tests/test_detector_contract.py`` is
parametrised over it). Adding a detector: ``docs/diagnose.md`` → "Adding a detector".

A row names the symptom it judges (a ``dt:Symptom`` of the knowledge base), the metrics it requires (groups of
alternatives), the threshold keys it reads (a trailing ``*`` is a prefix), the function, the family's shared
precomputation, and the causes it must find wherever their fault manifested (its direct evidence).
"""

from __future__ import annotations

from debugtune.engine.diagnose import communication as comm
from debugtune.engine.diagnose import convergence as conv
from debugtune.engine.diagnose import experts as moe
from debugtune.engine.diagnose import gradient as grad
from debugtune.engine.diagnose import hardware as hw
from debugtune.engine.diagnose import labels, outputs, rankscans, reach, wiring
from debugtune.engine.diagnose import stragglers as strag
from debugtune.engine.diagnose import timeline as tl
from debugtune.engine.diagnose.registry import Detector

_MIN = ("diagnose.min_steps", "diagnose.min_samples")
_GP = ("gradient.persist_steps", "gradient.persist_frac", "gradient.judge_after_frac", *_MIN)
_CV = ("convergence.judge_after_frac", "convergence.window_frac", "convergence.warmup.start_frac",
       "convergence.lr_drop.*", "convergence.persist_steps", "convergence.objective.*", *_MIN)
_MOE = ("moe.persist_steps", "moe.window_steps", "moe.persist_frac", *_MIN)
_EV = ("diagnose.evidence.*",)
_COMM = ("communication.persist_steps", "communication.persist_frac", "diagnose.scan.*", *_MIN, *_EV)
_GRID = ("communication.grid.top_frac", "communication.stage.*", "communication.slow_rank.worker_share")
_HW = ("hardware.persist_steps", "hardware.persist_frac", *_MIN, *_EV)
_HWS = ("hardware.persist_samples", "hardware.persist_frac", "hardware.min_samples", *_EV)  # sampled counters
G, C, M, H = "gradient", "convergence", "communication", "hardware"
_GN = (("grad_norm",),)
_OUT, _LI = (("output_min",), ("output_max",)), "convergence.loss_identity.*"

DETECTORS: tuple[Detector, ...] = (
    # -- gradient flow ---------------------------------------------------------------------------------
    Detector("gradient.nan_inf", "NaNOrInf", G, _GN, _GP, grad.nan_inf, grad.gradient_data),
    Detector("gradient.explosion", "GradientExplosion", G, _GN, (*_GP, "gradient.explosion.*",
                                                                 "gradient.update_ratio.high",
                                                                 "gradient.update_ratio.seed_*"),
             grad.explosion, grad.gradient_data),
    Detector("gradient.vanishing", "GradientVanishing", G, _GN,
             (*_GP, "gradient.vanishing.*"), grad.vanishing, grad.gradient_data),
    Detector("gradient.drift", "GradNormDrift", G, _GN, (*_GP, "gradient.drift.*"), grad.drift,
             grad.gradient_data),
    Detector("gradient.sawtooth", "GradNormSawtooth", G, _GN, (*_GP, "gradient.sawtooth.*"), grad.sawtooth,
             grad.gradient_data),
    Detector("gradient.dead_units", "DeadUnits", G, (("act_in_dead_frac", "act_zero_frac", "grad_zero_frac"),),
             (*_GP, "gradient.dead_units.*"), grad.dead_units, grad.gradient_data, signature_of=("DyingReLU",)),
    Detector("gradient.dead_at_init", "UnitsDeadAtInit", G, (("act_in_dead_frac",),),
             (*_GP, "gradient.dead_units.*", "gradient.dead_at_init.*"), grad.dead_at_init, grad.gradient_data),
    Detector("gradient.dead_outputs", "DeadOutputUnits", G, (("grad_norm",), ("grad_zero_frac",)),
             (*_GP, "gradient.dead_outputs.*", "gradient.zero_update.eps", "gradient.vanishing.loss_share"),
             grad.dead_outputs, grad.gradient_data),
    Detector("gradient.saturation", "ActivationSaturation", G, (("act_in_sat_frac", "act_sat_frac"),),
             (*_GP, "gradient.saturation.*"), grad.saturation, grad.gradient_data),
    Detector("gradient.activation_slope", "BoundedActivationsAttenuate", G,
             (("act_slope", "act_in_slope", "act_out_std"),),
             (*_GP, "gradient.activation_slope.*"), grad.activation_slope, grad.gradient_data,
             signature_of=("SaturatingActivations",)),
    Detector("gradient.noise", "GradientNoiseDominated", G, (("grad_cos_prev",),),
             (*_GP, "gradient.noise.*", "convergence.window_frac", "convergence.plateau.min_improvement"),
             grad.gradient_noise, grad.gradient_data),
    Detector("gradient.zero_update", "ZeroUpdate", G, (("grad_norm",), ("update_norm", "update_ratio")),
             (*_GP, "gradient.zero_update.*"), grad.zero_update, grad.gradient_data),
    Detector("gradient.update_ratio.high", "UpdateRatioTooHigh", G, (("update_ratio",),),
             (*_GP, "gradient.update_ratio.*", "gradient.zero_update.eps", "convergence.spike.early_steps",
              "convergence.spike.min_jump", "convergence.window_frac", "convergence.plateau.min_improvement",
              "convergence.objective.*"),
             grad.update_ratio_high,
             grad.gradient_data),
    Detector("gradient.update_ratio.low", "UpdateRatioTooLow", G, (("update_ratio",),),
             (*_GP, "gradient.update_ratio.*", "gradient.zero_update.eps", "convergence.warmup.start_frac",
              "convergence.lr_drop.*"), grad.update_ratio_low, grad.gradient_data),
    Detector("gradient.router", "RouterGradVanishing", G, (("router_grad_norm",),),
             (*_GP, "gradient.router.*"), grad.router, grad.gradient_data),
    Detector("gradient.forward_signal", "ForwardSignalVanishing", G, (("output_std",), ("input_std",)),
             ("gradient.forward_signal.*", "gradient.dead_units.act_in_dead_frac", "input.early_frac",
              "input.scale.rms_max"), wiring.forward_signal,
             signature_of=("BadWeightInit",)),
    Detector("gradient.init_scale", "InitWeightsTooLarge", G, (("init_gain", "init_norm_gain"),),
             ("gradient.init_scale.*",),
             wiring.init_scale, signature_of=("BadWeightInit",)),
    Detector("gradient.stale", "StaleGradients", G, (("grad_stale_frac",),), (*_MIN, "gradient.stale.*"),
             wiring.stale_gradients, signature_of=("MissingZeroGrad",)),
    Detector("gradient.not_optimized", "ParametersNotOptimized", G, (("in_optimizer",),),
             ("gradient.zero_update.eps",), wiring.not_optimized, signature_of=("FrozenParameters",)),
    Detector("gradient.frozen", "MostParametersFrozen", G, (("grad_norm",),), ("gradient.frozen.*",),
             wiring.frozen_by_flag),
    Detector("gradient.frozen_untrained", "FrozenAtInitialisation", G, (("grad_norm",),), ("gradient.frozen.*",),
             wiring.frozen_untrained),
    # -- convergence: the loss curve -------------------------------------------------------------------
    Detector("convergence.nonfinite_loss", "NaNOrInf", C, (("loss",),), _CV, conv.nonfinite_loss,
             conv.convergence_data),
    Detector("convergence.spike", "LossSpike", C, (("loss",),), (*_CV, "convergence.spike.*"), conv.spikes,
             conv.convergence_data),
    Detector("convergence.divergence", "LossDivergence", C, (("loss",),), (*_CV, "convergence.divergence.*"),
             conv.divergence, conv.convergence_data),
    Detector("convergence.early_blowup", "EarlyLossBlowup", C, (("loss",),),
             (*_CV, "convergence.early_blowup.*", "convergence.spike.early_steps"), conv.early_blowup,
             conv.convergence_data),
    Detector("convergence.plateau", "LossPlateau", C, (("loss",),),
             (*_CV, "convergence.plateau.*", "convergence.divergence.rise"), conv.plateau, conv.convergence_data),
    Detector("convergence.fits_closely", "LossFitsClosely", C, (("loss",),),
             (*_CV, "convergence.fits_closely.*"), conv.fits_closely, conv.convergence_data),
    Detector("convergence.lr_tiny", "LearningRateTiny", C, (("lr",),), ("convergence.lr.*", *_MIN), conv.lr_tiny,
             conv.convergence_data),
    Detector("convergence.underconfident", "UnderconfidentOutputs", C, (("loss",), ("accuracy", "eval_accuracy")),
             (*_CV, "convergence.underconfident.*"), conv.underconfident, conv.convergence_data),
    Detector("convergence.slow", "SlowConvergence", C, (("loss",),),
             (*_CV, "convergence.slow.*", "convergence.plateau.min_improvement"), conv.slow, conv.convergence_data),
    Detector("convergence.oscillation", "LossOscillation", C, (("loss",),), (*_CV, "convergence.oscillation.*"),
             conv.oscillation, conv.convergence_data),
    Detector("convergence.overfit", "Overfitting", C, (("loss",), ("eval_loss",)), (*_CV, "convergence.overfit.*"),
             conv.overfitting, conv.convergence_data),
    Detector("convergence.val_gap", "ValidationAboveTraining", C, (("loss",), ("accuracy",), ("eval_accuracy",)),
             (*_CV, "convergence.val_gap.*", "convergence.overfit.min_evals"), conv.validation_above_training,
             conv.convergence_data),
    Detector("convergence.val_loss_gap", "ValidationAboveTraining", C, (("loss",), ("eval_loss",)),
             (*_CV, "convergence.val_gap.*", "convergence.overfit.min_evals"), conv.validation_loss_below_training,
             conv.convergence_data),
    # -- convergence: the data and the outputs -------------------------------------------------------------
    Detector("input.scale", "InputScaleAbnormal", C, (("input_std",),), ("input.early_frac", "input.scale.*"),
             wiring.input_scale, signature_of=("UnnormalizedInputs",)),
    Detector("input.batch_outlier", "InputBatchOutlier", C, (("input_std",),),
             (*_MIN, "input.batch_outlier.*"), wiring.batch_outlier),
    Detector("input.token_outlier", "InputBatchOutlier", C, (("input_token_distinct_frac",),),
             (*_MIN, "input.batch_outlier.*"), wiring.token_outlier),
    Detector("convergence.outputs", "OutputsNotLogits", C, _OUT, ("convergence.outputs.*", _LI),
             outputs.output_range, outputs.output_data),
    Detector("convergence.loss_identity", "SquashBeforeLogitLoss", C, (*_OUT, ("output_loss_identity",)),
             ("convergence.outputs.*", _LI), outputs.loss_identity, outputs.output_data,
             signature_of=("LossActivationMismatch",)),
    Detector("convergence.explained", "PredictionsNearConstant", C, (*_OUT, ("output_std",), ("loss",),
                                                                     ("output_loss_identity",)),
             (*_MIN, "convergence.explained.*", "convergence.outputs.*", _LI, "convergence.objective.*"),
             outputs.explained_share, outputs.output_data),
    Detector("convergence.label_errors", "LabelErrorsAtRandom", C,
             (("output_label_kappa",), ("output_label_error_rank",)), (*_MIN, "convergence.label_errors.*"),
             labels.label_errors),
    Detector("convergence.output_reach", "OutputCannotReachTargets", C, (("output_bound_push",),),
             (*_MIN, "convergence.output_reach.*"), reach.output_reach, signature_of=("LossActivationMismatch",)),
    # -- convergence: experts --------------------------------------------------------------------------
    Detector("moe.imbalance", "ExpertImbalance", C, (("expert_tokens",),), (*_MOE, *_EV, "moe.imbalance.*"),
             moe.imbalance, moe.expert_data),
    Detector("moe.dead", "DeadExperts", C, (("expert_tokens",),), (*_MOE, "moe.dead.*"), moe.dead, moe.expert_data),
    Detector("moe.dropping", "TokenDropping", C, (("expert_tokens",), ("dropped_tokens", "dropped_token_frac")),
             (*_MOE, *_EV, "moe.dropping.*", "moe.imbalance.min_frac"), moe.dropping, moe.expert_data,
             signature_of=("CapacityFactorTooLow",)),
    Detector("moe.router_init", "RouterBiasedAtInit", C, (("router_bias_spread", "router_logit_spread"),),
             ("moe.router_init.*",), wiring.router_init, signature_of=("GateInitBias",)),
    Detector("moe.balance_loss", "BalanceLossNegligible", C, (("aux_loss",), ("loss",)),
             (*_MOE, "moe.balance_loss.*"), moe.balance_loss, signature_of=("AuxLossDisabled",)),
    Detector("moe.balance_config", "BalanceLossNegligible", C, (("expert_tokens", "loss"),), (*_MIN,),
             moe.balance_config),
    # -- communication -------------------------------------------------------------------------------
    Detector("communication.slow_rank", "SlowRank", M,
             (("collective_ms", "comm_ms", "compute_ms", "step_time_ms", "free_ms"),),
             (*_COMM, "communication.slow_rank.*", "communication.onset_z", "dixon995.*", *_GRID), strag.slow_rank,
             rankscans.rank_scans),
    Detector("communication.slow_compute", "SlowCompute", M, (("compute_ms",),),
             (*_COMM, "communication.slow_rank.compute_ratio", "communication.onset_z", *_GRID), strag.slow_compute,
             rankscans.rank_scans, signature_of=("StragglerRank",)),
    Detector("communication.slow_stage", "SlowPipelineStage", M, (("compute_ms",),),
             (*_COMM, *_GRID), strag.slow_stage, rankscans.rank_scans),
    Detector("communication.replica_variation", "ReplicaComputeVariation", M, (("compute_ms",),),
             (*_COMM, *_GRID, "communication.replica.*", "communication.compute_imbalance.*"),
             strag.replica_variation, rankscans.rank_scans),
    Detector("communication.compute_imbalance", "ComputeImbalance", M, (("compute_ms",),),
             (*_COMM, *_GRID, "communication.compute_imbalance.*"), strag.compute_imbalance, rankscans.rank_scans),
    Detector("communication.slow_link", "SlowLink", M, (("link_bw_gbps",),),
             (*_COMM, "communication.slow_link.*"), comm.slow_link),
    Detector("communication.bandwidth", "LowBandwidthUtilization", M, (("busbw_gbps", "collective_bytes"),),
             (*_COMM, "communication.bandwidth.*", "link_peak_gbps.*", "busbw.*"), comm.bandwidth),
    Detector("communication.comm_share", "HighCommunicationShare", M,
             (("comm_not_overlapped_ms", "comm_ms"), ("step_time_ms",)),
             (*_COMM, "communication.comm_share.*"), comm.comm_share),
    Detector("communication.cross_cabinet", "CrossCabinetTraffic", M, (("cross_cabinet_share",),),
             (*_COMM, "communication.cross_cabinet.*"), comm.cross_cabinet),
    Detector("communication.alltoall", "AllToAllImbalance", M, (("alltoall_bytes",),),
             (*_COMM, "communication.alltoall.*"), comm.alltoall),
    Detector("communication.step_time", "StepTimeRegression", M, (("step_time_ms",),),
             (*_COMM, "communication.step_time.*"), comm.step_time, rankscans.rank_scans),
    # -- hardware ------------------------------------------------------------------------------------
    Detector("hardware.util", "LowAcceleratorUtilization", H, (("util_pct",),), (*_HWS, "hardware.util.*"),
             hw.utilisation),
    Detector("hardware.memory", "MemoryPressure", H, (("mem_used_bytes", "mem_used_pct"),),
             (*_HWS, "hardware.memory.*"), hw.memory),
    Detector("hardware.throttle", "ThermalThrottling", H, (("throttle", "clock_mhz", "temp_c"),),
             (*_HWS, "hardware.throttle.*", "hardware.clock.*"), hw.throttling),
    Detector("hardware.power", "PowerCapped", H, (("throttle_power", "power_limit_w", "power_w"),),
             (*_HWS, "hardware.power.*", "hardware.throttle.frac"), hw.power),
    Detector("hardware.dataloader", "DataLoaderWait", H, (("dataloader_wait_ms",),),
             (*_HW, "hardware.dataloader.*"), hw.dataloader),
    Detector("hardware.device_idle", "DeviceIdle", H, (("free_ms",), ("step_time_ms",)),
             (*_HW, "hardware.idle.*"), tl.device_idle),
    Detector("hardware.host_bound", "HostBound", H,
             (("free_ms", "host_gap_ms"), ("step_time_ms",), ("idle_host_wait_ms", "op_dur_median_us")),
             (*_HW, "hardware.idle.*", "hardware.host_bound.*"), tl.host_bound),
)
