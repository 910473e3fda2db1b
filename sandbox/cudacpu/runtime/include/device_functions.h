// torchport CPU runner: stands in for <device_functions.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
