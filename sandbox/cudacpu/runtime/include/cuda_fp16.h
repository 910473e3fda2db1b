// torchport CPU runner: stands in for <cuda_fp16.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
