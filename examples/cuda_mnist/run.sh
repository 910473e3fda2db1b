#!/usr/bin/env bash
# Train the example on the first GPU of this machine.
set -euo pipefail
cd "$(dirname "$0")"
export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python train.py --device cuda --steps "${STEPS:-20}" "$@"
