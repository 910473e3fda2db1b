// torchport CPU runner: stands in for <c10/cuda/CUDAGuard.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
