#!/bin/bash
# Valid reference configuration (mixture of experts): the Mixtral 8x7B shape (arXiv 2401.04088) as in
# NVIDIA/Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh, on four nodes of eight GPUs.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768 \
    --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights \
    --disable-bias-linear --num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss \
    --moe-aux-loss-coeff 1e-2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \
    --expert-model-parallel-size 8 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \
    --micro-batch-size 1 --global-batch-size 256 --train-iters 5000 --lr 1.0e-4 --min-lr 1.0e-5 \
    --lr-warmup-iters 500 --bf16 --use-distributed-optimizer --mock-data
