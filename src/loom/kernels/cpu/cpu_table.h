// The CPU kernels as a KernelTable: what kernels::table() holds for DeviceType::cpu from the
// first lookup on (kernel_table.h).
#pragma once

#include "loom/kernels/kernel_table.h"

namespace loom::kernels::cpu {

// Every entry set (the table is complete; tests/kernels/test_kernel_table.cpp checks it).
KernelTable kernel_table();

}  // namespace loom::kernels::cpu
