#!/bin/sh
CUDA_VISIBLE_DEVICES=0 python train.py --steps 20
