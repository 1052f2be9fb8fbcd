#!/bin/bash
# Valid reference configuration (fp16 with dynamic loss scaling): a GPT 1.3B shape (arXiv 2005.14165) on one
# node, as Megatron-LM's fp16 path runs it (loss scale found by the dynamic scaler).
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 \
    --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 64 \
    --train-iters 5000 --lr 2.0e-4 --min-lr 2.0e-5 --lr-warmup-iters 100 --fp16 --initial-loss-scale 65536 \
    --use-distributed-optimizer --mock-data
