// torchport CPU runner: stands in for <math_constants.h>, CUDA's single and double constants.
#pragma once
#include <cudacpu/runtime.h>
#define CUDART_INF_F (std::numeric_limits<float>::infinity())
#define CUDART_NAN_F (std::numeric_limits<float>::quiet_NaN())
#define CUDART_MIN_DENORM_F (std::numeric_limits<float>::denorm_min())
#define CUDART_MAX_NORMAL_F (std::numeric_limits<float>::max())
#define CUDART_NEG_ZERO_F (-0.0f)
#define CUDART_ZERO_F 0.0f
#define CUDART_ONE_F 1.0f
#define CUDART_PI_F 3.141592654f
#define CUDART_2_OVER_PI_F 0.636619772f
#define CUDART_SQRT_HALF_F 0.707106781f
#define CUDART_L2E_F 1.442695041f
#define CUDART_LN2_F 0.693147181f
#define CUDART_INF (std::numeric_limits<double>::infinity())
#define CUDART_NAN (std::numeric_limits<double>::quiet_NaN())
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_SQRT_2PI 2.5066282746310002e+0
#define CUDART_SQRT_HALF 7.0710678118654757e-1
#define CUDART_LN2 6.9314718055994529e-1
