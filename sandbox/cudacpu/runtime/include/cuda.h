// torchport CPU runner: stands in for <cuda.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
