// torchport CPU runner: stands in for <cuda_runtime.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
