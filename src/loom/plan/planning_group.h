// A process group that only knows its place: rank, members and sub-groups, no transport. The
// planner builds a real DeviceMesh over it for any world size in one process, so the
// strategies' own code (apply_tensor_parallel, apply_expert_parallel, apply_pipeline) splits a
// model built on the meta device exactly as it would on that rank of a real run: what a rank
// holds is then read off the split model, not recomputed by a second copy of their rules.
// Every communication call throws: the strategies communicate only when a step runs.
#pragma once

#include <memory>

#include "loom/dist/device_mesh.h"
#include "loom/dist/parallel_dims.h"

namespace loom::plan {

// The mesh rank `rank` of `dims` would build (no process is started, nothing is sent).
std::shared_ptr<dist::DeviceMesh> planning_mesh(const dist::ParallelDims& dims, int rank);

}  // namespace loom::plan
