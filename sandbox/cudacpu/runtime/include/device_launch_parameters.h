// torchport CPU runner: stands in for <device_launch_parameters.h> (see cudacpu/runtime.h).
#pragma once
#include <cudacpu/runtime.h>
