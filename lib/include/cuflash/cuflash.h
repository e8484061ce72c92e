// Umbrella header for the GPU library.
#pragma once

#include "cuflash/attention.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "cuflash/types.h"
#include "cuflash/version.h"
