// The data API: datasets (data/dataset.h, data/fashion_mnist.h,
// data/text.h), the DataLoader (data/dataloader.h) and IDX files
// (data/idx.h).
#pragma once

#include "meshflow/data/dataloader.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/fashion_mnist.h"
#include "meshflow/data/idx.h"
#include "meshflow/data/text.h"
