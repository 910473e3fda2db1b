// torchport CPU runner: stands in for <ATen/cuda/CUDAUtils.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
