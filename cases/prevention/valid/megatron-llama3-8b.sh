#!/bin/bash
# Valid reference configuration (dense, grouped-query attention, tensor and pipeline parallel): the Llama 3 8B
# shape (arXiv 2407.21783, table 3) on two nodes of eight GPUs.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 \
    --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights \
    --disable-bias-linear --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 5000 --lr 3.0e-4 --min-lr 3.0e-5 \
    --lr-warmup-iters 200 --bf16 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --mock-data
