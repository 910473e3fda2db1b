// torchport CPU runner: stands in for <c10/cuda/CUDAFunctions.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
