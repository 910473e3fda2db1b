// torchport CPU runner: stands in for <cuda_runtime_api.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
