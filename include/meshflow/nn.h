// The neural-network API: modules (nn/module.h), layers and losses
// (nn/layers.h, nn/conv_layers.h, nn/pointwise_layers.h,
// nn/resample_layers.h) and initialisers (nn/init.h).
#pragma once

#include "meshflow/nn/conv_layers.h"
#include "meshflow/nn/init.h"
#include "meshflow/nn/layers.h"
#include "meshflow/nn/module.h"
#include "meshflow/nn/pointwise_layers.h"
#include "meshflow/nn/rnn.h"
#include "meshflow/nn/transformer.h"
#include "meshflow/nn/resample_layers.h"
