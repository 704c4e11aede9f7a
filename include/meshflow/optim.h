// The optimization API: optimizers (optim/optimizer.h), their fused update
// ops (optim/update.h) and state dict values (optim/state.h).
#pragma once

#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/state.h"
#include "meshflow/optim/update.h"
