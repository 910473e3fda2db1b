// torchport CPU runner: stands in for <ATen/cuda/Atomic.cuh> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
