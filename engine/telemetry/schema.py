"""The long-form telemetry schema (DESIGN §3) and the metric naming conventions every producer follows.

One row per (run, rank, step, dimension, metric, entity) with a float64 value. ``entity`` names
where: "" for the whole run/rank, a module path for a layer ("layers.3.mlp.fc1"), "expert:<i>"
or "<router path>/expert:<i>" for an expert, "link:<src>-<dst>" for a link, "device:<name>" for
a device, or a collective/operator name for communication metrics.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA = pa.schema([
    pa.field("run", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    pa.field("rank", pa.int32(), nullable=False),
    pa.field("step", pa.int64(), nullable=False),
    pa.field("dimension", pa.dictionary(pa.int8(), pa.string()), nullable=False),
    pa.field("metric", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    pa.field("entity", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    pa.field("value", pa.float64(), nullable=False),
])

COLUMNS = tuple(SCHEMA.names)

# Metric names per dimension. Producers may add metrics; these are the ones detectors read.
GRADIENT_METRICS = {
    "grad_norm": "L2 norm of the gradient (entity: layer path; '' = global norm)",
    "grad_absmax": "max |g|",
    "grad_zero_frac": "fraction of exactly-zero gradient elements",
    "grad_tiny_frac": "fraction of |g| < eps (eps from the knowledge base)",
    "grad_nan": "count of NaN gradient elements",
    "grad_inf": "count of Inf gradient elements",
    "weight_norm": "L2 norm of the parameters",
    "update_norm": "L2 norm of the parameter change made by the optimizer step",
    "update_ratio": "update_norm / weight_norm",
    "act_zero_frac": "fraction of zero activations (entity: activation module)",
    "act_sat_frac": "fraction of saturated activations (sigmoid/tanh near their bounds)",
    "act_slope": "mean derivative of a bounded activation at the inputs it received (sigmoid y(1-y), tanh 1-y^2)",
    "act_in_slope": "mean slope of the activation that made a weight layer's bounded input (from its moments)",
    "router_grad_norm": "L2 norm of the router (gate) weight gradient (entity: router module path)",
    # added by the importers (issue 3)
    "act_norm": "L2 norm of a module's activations (entity: '<module>.<input|output>'; msprobe actv)",
    "act_grad_norm": "L2 norm of the gradient w.r.t. a module's activations (msprobe actv_grad)",
    "act_nan": "count of NaN activation elements",
    "exp_avg_norm": "L2 norm of Adam's first moment of a parameter (msprobe exp_avg)",
    "exp_avg_sq_norm": "L2 norm of Adam's second moment of a parameter (msprobe exp_avg_sq)",
    # added by the live probe (issue 3); also 'grad_log2_hist:<bin>' (count per log2 magnitude bin,
    # labels as debugtune.native.HIST_LABELS) and '<series>_alarm_<kind>' (a live detector fired)
    "grad_norm_logged": "gradient norm as logged by the training script on steps the probe measured itself",
    # direct evidence of the live probe (issue 12; docs/probe.md)
    "init_weight_std": "std of a weight layer's weight at attach (entity: layer; step 0)",
    "init_gain": "std(W) * sqrt(fan_in) of a weight layer at attach (entity: layer; step 0)",
    "init_norm_gain": "median |weight| of a normalisation layer at attach, 1 by default (entity: layer; step 0)",
    "act_out_std": "std of a weight layer's output (entity: layer; detail steps)",
    "act_in_dead_frac": "fraction of a weight layer's input features zero for every sample (detail steps)",
    "act_in_sat_frac": "fraction of a bounded, non-ReLU weight-layer input near its bounds (detail steps)",
    "grad_cos_prev": "cosine of this recorded step's gradient with the previous one's (strided sample)",
    "grad_stale_frac": "fraction of gradient-receiving parameters not cleared since the previous optimizer step",
    "in_optimizer": "1 when every trainable parameter of the layer is in the attached optimizer, else 0 (step 0)",
}
CONVERGENCE_METRICS = {
    "loss": "training loss", "lr": "learning rate", "eval_loss": "validation loss",
    "accuracy": "training accuracy", "eval_accuracy": "validation accuracy",
    "expert_tokens": "tokens routed to an expert in the step (entity: '<router>/expert:<i>')",
    "dropped_tokens": "tokens dropped by capacity (entity: router path)",
    "aux_loss": "load-balancing auxiliary loss", "z_loss": "router z-loss",
    "loss_scale": "dynamic loss scale (fp16)",
    # added by the importers (issue 3)
    "epoch": "training epoch (fractional where the logger reports it so)",
    "skipped_iterations": "iterations skipped in the logging interval (Megatron: overflow / NaN)",
    "nan_iterations": "iterations with a NaN loss in the logging interval (Megatron)",
    "dropped_token_frac": "fraction of routed token slots dropped by capacity (entity: '' or router path)",
    # direct evidence of the live probe (issue 12; docs/probe.md)
    "input_mean": "mean of the model's floating-point input in the step",
    "input_std": "std of the model's floating-point input in the step",
    "input_absmax": "max |x| of the model's floating-point input in the step",
    "input_feature_scale_ratio": "max / median of the per-feature std of the model input (detail steps)",
    "input_token_distinct_frac": "distinct ids over ids in the model's integer input (token ids), the most "
                                 "frequent id (padding) left out",
    "output_std": "std of the model's output (detail steps)",
    "output_min": "smallest value of the model's output (detail steps)",
    "output_max": "largest value of the model's output (detail steps)",
    "output_zero_frac": "fraction of exact zeros in the model's output (detail steps)",
    "output_simplex_frac": "fraction of output rows that are probability vectors (detail steps)",
    "output_from_layer_frac": "share of forwards whose output is the last weight layer's own tensor (or a view "
                              "of it): real values no activation squashed (detail steps)",
    "output_loss_identity": "share of the output gradient's elements a loss hypothesis explains exactly "
                            "(entity: hypothesis; detail steps)",
    "output_label_kappa": "agreement beyond chance of the labels (read from the output gradient) with the "
                          "model's predictions (detail steps)",
    "output_label_error_rank": "mean rank, scaled to [0, 1], of the label among the non-predicted classes on "
                               "rows it contradicts (detail steps)",
    "output_label_error_rank_expected": "mean scaled rank a label drawn from the model's own probabilities over "
                                        "its non-predicted classes would have, on the same rows (detail steps)",
    "output_bound_push": "share of the output gradient's mass pushing outputs at a bound of their range (0, or "
                         "0 and 1) past it, under a loss on continuous targets (detail steps)",
    "output_gated_frac": "share of negative outputs with an exactly zero gradient less that of positive ones, "
                         "under a loss on continuous targets (detail steps)",
    "router_bias_spread": "max - median over experts of a watched router's bias (entity: router; step 0)",
    "router_weight_std": "std of a watched router's weight (entity: router; step 0)",
    "router_logit_spread": "max - median over experts of the token-mean router logits (entity: router; detail steps)",
}
COMMUNICATION_METRICS = {
    "step_time_ms": "wall time of the step on this rank",
    "compute_ms": "computation time in the step", "comm_ms": "communication time in the step",
    "comm_not_overlapped_ms": "communication not hidden behind computation",
    "free_ms": "idle time in the step", "bubble_ms": "pipeline bubble time",
    "collective_ms": "time of one collective kind in the step (entity: op name, e.g. allreduce)",
    "collective_bytes": "bytes moved by that collective kind in the step",
    "collective_wait_ms": "wait (synchronisation) time before collectives",
    "busbw_gbps": "bus bandwidth of a collective kind (nccl-tests definition)",
    "link_bw_gbps": "bandwidth of one link (entity: 'link:<src>-<dst>')",
    "link_bytes": "bytes over one link", "link_ms": "transfer time over one link",
    "alltoall_bytes": "MoE all-to-all bytes sent by the rank",
    "cross_cabinet_share": "share of the tokens dispatched to experts in the step whose expert sits in another "
                           "cabinet than the rank holding the token",
    # added by the importers (issue 3)
    "collective_count": "number of calls of one collective kind in the step (entity: op name)",
    "collective_transit_ms": "time actually spent transferring in that collective kind (Ascend Transit Time)",
    "algbw_gbps": "algorithm bandwidth of a collective kind: bytes / time (nccl-tests definition)",
    "transport_bytes": "bytes over one transport type in the step (entity: 'transport:<HCCS|RDMA|PCIE|SIO>')",
    "transport_bw_gbps": "bandwidth over one transport type: transit bytes / transit time",
    "preparing_ms": "time from the step start to the first device task (Ascend Preparing)",
    # added by the trace importers (issue 13): the device timeline of a step (HTA's definitions)
    "cpu_step_ms": "the step as the host saw it (the ProfilerStep annotation); step_time_ms is the device window",
    "comm_overlapped_ms": "communication running while computation runs (hidden behind it)",
    # added by the per-operation and worker-timeline importers (issue 33)
    "microbatch_count": "forward micro-batches the rank computed in the step (the m of the 1F1B bubble)",
}
HARDWARE_METRICS = {
    "util_pct": "accelerator utilisation (entity: 'device:<name>')",
    "mem_used_bytes": "device memory used", "mem_total_bytes": "device memory total",
    "power_w": "board power", "temp_c": "temperature", "clock_mhz": "core clock",
    "throttle": "1 when the device reports clock throttling",
    "cpu_util_pct": "host CPU utilisation", "host_mem_used_bytes": "host memory used",
    "rss_bytes": "resident memory of the training process",
    "dataloader_wait_ms": "time the step waited for its batch",
    # added by the importers (issue 3)
    "kernel_ms": "device kernel time in the step (entity: 'op:<operator type>'; '' = all non-communication kernels)",
    "kernel_count": "number of device kernels in the step (entity as kernel_ms)",
    "flop_count": "floating-point operations in the step from the CUPTI range profiler's SASS counters "
                  "(entity: fp64 / fp32 / fp16)",
    "cube_util_pct": "duration-weighted cube (matrix unit) utilisation of AI Core kernels (Ascend)",
    "module_mem_bytes": "device memory reserved by one software component (entity: 'device:<dev>/<component>')",
    "mem_util_pct": "memory-controller (bandwidth) utilisation of the device",
    "mem_used_pct": "device memory used, percent of total (npu-smi watch)",
    "sample_time_s": "seconds since the first sample, for time-sampled series whose step is the sample index",
    # added by the live probe's hardware sampler (issue 3)
    "host_mem_total_bytes": "host memory total",
    # power (issue 16): the sampler's NVML backend and nvidia-smi
    "power_limit_w": "enforced board power limit (entity: 'device:<name>')",
    "throttle_power": "1 when the device lowers its clock for power (SW power cap or HW power brake)",
    # added by the trace importers (issue 13): idle time of the device timeline and what the host did
    "memcpy_ms": "time only memory copies or sets run on the device in the step",
    "idle_host_wait_ms": "device idle before a kernel the host had not yet launched (HTA host_wait)",
    "idle_kernel_wait_ms": "device idle in gaps shorter than HTA's consecutive_kernel_delay (30 µs): launch overhead",
    "idle_other_ms": "the rest of the device idle time (e.g. waiting on an event of another stream)",
    "op_dur_median_us": "median duration of the step's computation kernels (CPU-only traces: top-level operators)",
    "launch_gap_median_us": "median interval between consecutive kernel launches of the step",
    "op_gap_median_us": "CPU-only traces: median gap between consecutive top-level operators of the training thread",
    "host_gap_ms": "CPU-only traces: time of the step the training thread spent outside any operator (Python)",
}

MOE_METRICS = frozenset({"router_grad_norm", "expert_tokens", "dropped_tokens", "aux_loss", "z_loss",
                         "dropped_token_frac", "router_bias_spread", "router_weight_std", "router_logit_spread",
                         "alltoall_bytes", "cross_cabinet_share"})
"""Metrics only a mixture of experts records: its routers' counts and gradients, its balancing terms, its
dispatch."""

METRICS = {"gradient": GRADIENT_METRICS, "convergence": CONVERGENCE_METRICS,
           "communication": COMMUNICATION_METRICS, "hardware": HARDWARE_METRICS}


def dimension_of(metric: str) -> str | None:
    """The dimension a known metric belongs to, or None."""
    for dim, names in METRICS.items():
        if metric in names:
            return dim
    return None
