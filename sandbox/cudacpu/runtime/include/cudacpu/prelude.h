// The first line of every translation unit the CPU runner compiles: torch's extension
// header, then the runtime. One header for all of them, so that a precompiled copy of it
// (sandbox/cudacpu/pch.py) saves each build the minute torch's headers take to parse.
#pragma once
#include <torch/extension.h>
#include <cudacpu/runtime.h>
