#!/bin/bash
# Valid reference configuration (dense GPT): the GPT-3 126M shape of Brown et al. (arXiv 2005.14165, table 2.1)
# in the launch layout of NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh.
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NUM_NODES=1
MODEL_ARGS=(
    --num-layers 12 --hidden-size 768 --num-attention-heads 12
    --seq-length 2048 --max-position-embeddings 2048
)
TRAINING_ARGS=(
    --micro-batch-size 4 --global-batch-size 256 --train-iters 10000
    --lr 6.0e-4 --min-lr 6.0e-5 --lr-decay-style cosine --lr-warmup-iters 375
    --weight-decay 0.1 --clip-grad 1.0 --bf16 --use-distributed-optimizer
)
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \
    "${MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --mock-data
