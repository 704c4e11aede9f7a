// The optimization API: optimizers (optim/optimizer.h), their fused update
// ops (optim/update.h), lr schedulers (optim/lr_scheduler.h), state dict
// values (optim/state.h) and gradient clipping (optim/clip_grad.h).
#pragma once

#include "meshflow/optim/clip_grad.h"
#include "meshflow/optim/lr_scheduler.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/state.h"
#include "meshflow/optim/update.h"
