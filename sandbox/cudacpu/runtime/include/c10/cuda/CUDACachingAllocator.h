// torchport CPU runner: stands in for <c10/cuda/CUDACachingAllocator.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
