// torchport CPU runner: stands in for <ATen/cuda/Exceptions.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
