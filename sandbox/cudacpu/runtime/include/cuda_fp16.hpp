// torchport CPU runner: stands in for <cuda_fp16.hpp> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
