// Safetensors checkpoint I/O, torch-free (issue #13 point 3; docs/model.md
// "Checkpoints"): the one header to include.
//
//   dtype.h                  DType and its safetensors names
//   safetensors_header.h     the pure header parser (fuzzed: safetensors_fuzz)
//   safetensors_file.h       SafetensorsFile: one file, mmap'ed, TensorViews
//   safetensors_index.h      model.safetensors.index.json
//   safetensors_checkpoint.h SafetensorsCheckpoint: a HF model directory
//   safetensors_writer.h     WriteSafetensors, WriteSafetensorsCheckpoint
#pragma once

#include "workers/model/dtype.h"
#include "workers/model/safetensors_checkpoint.h"
#include "workers/model/safetensors_file.h"
#include "workers/model/safetensors_header.h"
#include "workers/model/safetensors_index.h"
#include "workers/model/safetensors_writer.h"
