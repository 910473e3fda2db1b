// torchport CPU runner: stands in for <vector_types.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
