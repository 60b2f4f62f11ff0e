"""The request and client examples of the seeds (``../shared/seeds/``), copied verbatim.

``EXAMPLES`` maps ``"<seed>.<n>"`` (the n-th fenced code block, counted from 0, of the seed file
whose name starts with ``<seed>``) to the block's text, character for character. ``NOT_RUN``
says, for every other block of the three API documents, why it is not sent to a server.
``test_seed_examples.py`` runs the examples; its first test checks, where the seeds are at hand,
that both tables still match them block for block.
"""

from __future__ import annotations

from pathlib import Path

# Where the project's checkout keeps them: shared/ beside the repository.
SEEDS_DIR = Path(__file__).resolve().parents[3] / "shared" / "seeds"
SEED_FILES = {
    "000": "000_f6c1a41d11c88f53.txt",  # architecture guide
    "001": "001_73f05d0daf31cd54.txt",  # the server's README
    "004": "004_5095f61bf16fde64.txt",  # API guide
}

NOT_RUN = {
    "000.2": "activates the authors' conda environment on their EC2 host",
    "000.3": "the seeds' Docker scripts (docker-build.sh, docker-run.sh); this project ships a "
    "Dockerfile and docker-compose.yml (README, 'Docker')",
    "000.6": "pytest commands for the seeds' own test tree (tests/integration/ …); this "
    "project's tests run with ./run.sh test",
    "000.7": "the seeds' deprecated old_tests/ scripts",
    "000.8": "a diagram",
    "000.14": "the seeds' file tree",
    "001.0": "pulls the authors' image from their private registry; its closing health check "
    "is 001.11, its expected answer is checked there",
    "001.1": "clones the authors' repository and installs its requirements file; here: "
    "./run.sh install",
    "001.4": "a diagram",
    "001.18": "a diagram",
    "001.19": "the seeds' file tree",
    "001.20": "pytest commands for the seeds' own test files",
    "004.2": "installs the client from the authors' checkout path; here: pip install ./client",
    "004.4": "a decision-tree diagram",
    "004.22": "Nsight Compute device metrics need ncu on a GPU host; their layout belongs to "
    "the device-metrics work (profiling/), not to this drop-in (docs/SEEDS_COMPAT.md)",
    "004.24": "error texts: the timeout text is checked by tests/e2e/test_rest_api.py; the "
    "IOContract text differs (docs/SEEDS_COMPAT.md)",
    "004.25": "installs the client from the authors' checkout path; here: pip install ./client",
}

EXAMPLES = {
    "000.0": r"""# Start unified server (FastAPI REST + MCP HTTP on single port)
python main.py --host 0.0.0.0 --port 8000

# With Docker
./docker-build.sh && ./docker-run.sh --gpu all
""",
    "000.1": r"""from mcp.client import Client
from mcp.client.transports import StreamableHttpTransport

transport = StreamableHttpTransport(url="http://localhost:8000/mcp")
client = Client(transport)

# Use MCP tools
result = await client.call_tool("evaluate_kernel", {
    "kernel_source": "...",
    "kernel_type": "torch"
})
""",
    "000.4": r"""python main.py --host 0.0.0.0 --port 8000 --log-level info
""",
    "000.5": r"""curl http://localhost:8000/health
""",
    "000.9": r"""{
  "kernel": {
    "source_code": "...",
    "kernel_type": "triton",
    "io": {
      "args": [
        {
          "name": "x",
          "type": "tensor",
          "tensor_spec": {
            "shape": [1024],
            "dtype": "float32",
            "init": {"kind": "randn", "seed": 42}
          },
          "role": "input"
        },
        {
          "name": "BLOCK_SIZE",
          "type": "int",
          "value": 256,
          "role": "input",
          "is_meta": true
        }
      ],
      "launch": {
        "grid": {"x": 4, "y": 1, "z": 1},
        "num_warps": 4
      }
    }
  }
}
""",
    "000.10": r"""from io_contract.spec_builders import (
    create_randn_spec,      # Random normal distribution
    create_uniform_spec,    # Uniform distribution
    create_zeros_spec,      # All zeros
    create_ones_spec,       # All ones
    create_full_spec,       # Fill with constant value
    create_arange_spec,     # Sequential values
    IOContractBuilder       # Fluent builder for full IOContracts
)

# Example: Create tensor spec with random normal initialization
tensor_spec = create_randn_spec(
    shape=[1024, 1024],
    dtype="float32",
    seed=42
)
""",
    "000.11": r"""from io_contract.spec_builders import IOContractBuilder

contract = (
    IOContractBuilder()
    .add_input_tensor("x", shape=[1024], dtype="float32", init_kind="randn")
    .add_output_tensor("y", shape=[1024], dtype="float32")
    .add_meta_param("BLOCK_SIZE", value=256)
    .set_launch_config(grid=(4, 1, 1), num_warps=4)
    .build()
)
""",
    "000.12": r"""ENABLE_DEVICE_METRICS=true python main.py
""",
    "000.13": r"""{
  "kernel": {
    "source_code": "import torch\nimport triton\n...\ndef run(x, y):\n    ...",
    "kernel_type": "multi_kernel",
    "metadata": {
      "entry_point": "run",
      "description": "Fused add + multiply using Triton and PyTorch"
    },
    "io": {
      "args": [
        {
          "name": "x",
          "type": "tensor",
          "tensor_spec": {
            "shape": [1024],
            "dtype": "float32",
            "init": {"kind": "randn", "seed": 42}
          },
          "role": "input"
        }
      ]
    }
  }
}
""",
    "000.15": r"""python main.py --host 0.0.0.0 --port 8000 --log-level DEBUG --mode both
""",
    "001.2": r"""curl -X POST http://localhost:8000/evaluate \
  -H "Content-Type: application/json" \
  -d '{
    "kernel": {
      "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)",
      "kernel_type": "torch"
    },
    "num_trials": 100
  }'
""",
    "001.3": r"""{
  "status": "success",
  "kernel_exec_result": {
    "compiled": true,
    "runtime": 0.123,
    "runtime_stats": {
      "mean": 0.123,
      "std": 0.005,
      "median": 0.122,
      "percentile_95": 0.130
    }
  }
}
""",
    "001.5": r"""import requests

response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
        "kernel_type": "torch"
    },
    "num_trials": 100,
    "timeout": 120
})

result = response.json()
print(f"Runtime: {result['kernel_exec_result']['runtime']}ms")
""",
    "001.6": r"""response = requests.post("http://localhost:8000/compare", json={
    "ref_kernel": {
        "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.matmul(x, x.T)",
        "kernel_type": "torch"
    },
    "custom_kernel": {
        "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return custom_matmul(x, x.T)",  # Your optimized version
        "kernel_type": "torch_cuda"
    },
    "num_trials": 200
})

result = response.json()
if result['kernel_exec_result']['correctness']:
    speedup = result['ref_runtime']['mean'] / result['kernel_exec_result']['runtime']
    print(f"Speedup: {speedup:.2f}x")
""",
    "001.7": r"""{
    "status": "success",              # Request status
    "kernel_exec_result": {
        "compiled": true,             # Did compilation succeed?
        "correctness": true,          # Does output match reference? (compare only)
        "runtime": 1.23,              # Mean runtime in milliseconds
        "runtime_stats": {            # Detailed statistics
            "mean": 1.23,
            "std": 0.05,
            "min": 1.18,
            "max": 1.35,
            "median": 1.22,
            "percentile_95": 1.30,
            "percentile_99": 1.33
        },
        "compilation_error": null,    # Error message if compilation failed
        "validation_error": null       # Error message if validation failed
    }
}
""",
    "001.8": r'''# Evaluate a transformer layer
response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(512, 8)
    
    def forward(self, x):
        return self.attention(x, x, x)[0]
""",
        "kernel_type": "torch"
    },
    "num_trials": 100
})
''',
    "001.9": r"""# Compare standard vs flash attention
response = requests.post("http://localhost:8000/compare", json={
    "ref_kernel": {
        "source_code": "# Standard attention implementation",
        "kernel_type": "torch"
    },
    "custom_kernel": {
        "source_code": "# Flash attention implementation",
        "kernel_type": "torch_cuda"
    },
    "num_trials": 200
})
""",
    "001.10": r'''# Triton kernel with explicit inputs
response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": """
import triton
import triton.language as tl

@triton.jit
def vector_add(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
""",
        "kernel_type": "triton",
        "io": {
            "args": [
                {"name": "x", "type": "tensor", "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 42}}, "role": "input"},
                {"name": "y", "type": "tensor", "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 43}}, "role": "input"},
                {"name": "output", "type": "tensor", "tensor_spec": {"shape": [1024], "dtype": "float32"}, "role": "output"},
                {"name": "n_elements", "type": "int", "value": 1024, "role": "input"},
                {"name": "BLOCK_SIZE", "type": "int", "value": 256, "role": "input", "is_meta": true}
            ],
            "launch": {"grid": {"x": 4}, "num_warps": 4}
        }
    },
    "num_trials": 100
})
''',
    "001.11": r"""curl http://localhost:8000/health
""",
    "001.12": r"""curl http://localhost:8000/job/{job_id}
""",
    "001.13": r"""curl http://localhost:8000/stats
""",
    "001.14": r"""curl -X POST http://localhost:8000/admin/cleanup-jobs
""",
    "001.15": r"""# Enable debug logging
LOG_LEVEL=DEBUG python main.py

# Enable device metrics (NCU profiling)
ENABLE_DEVICE_METRICS=true python main.py

# View detailed logs
tail -f logs/cuda_eval_server.log
""",
    "001.16": r"""ENABLE_DEVICE_METRICS=true python main.py
""",
    "001.17": r""""metadata": {
    "function_name": "optimized_softmax"  # Target specific function
}
""",
    "004.0": r"""curl -X POST http://localhost:8000/evaluate \
  -H "Content-Type: application/json" \
  -d '{
    "kernel": {
      "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
      "kernel_type": "torch",
      "io": {
        "args": [
            {
                "name": "x",
                "type": "tensor",
                "tensor_spec": {
                    "shape": [1024],
                    "dtype": "float32",
                    "init": {"kind": "randn", "seed": 42}
                },
                "role": "input"
            }
        ]
      }      
    },
    "num_trials": 100
  }'
""",
    "004.1": r"""curl -X POST http://localhost:8000/compare \
  -H "Content-Type: application/json" \
  -d '{
    "ref_kernel": {
      "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
      "kernel_type": "torch",
      "io": {
        "args": [
            {
                "name": "x",
                "type": "tensor",
                "tensor_spec": {
                    "shape": [1024],
                    "dtype": "float32",
                    "init": {"kind": "randn", "seed": 42}
                },
                "role": "input"
            }
        ]
      }
    },
    "custom_kernel": {
      "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x + x",
      "kernel_type": "torch",
      "io": {
        "args": [
            {
                "name": "x",
                "type": "tensor",
                "tensor_spec": {
                    "shape": [1024],
                    "dtype": "float32",
                    "init": {"kind": "randn", "seed": 42}
                },
                "role": "input"
            }
        ]
      }
    },
    "num_trials": 100
  }'
""",
    "004.3": r"""from kernel_eval_client import KernelEvalClient, KernelCode, KernelType, IOContractBuilder, create_randn_spec

client = KernelEvalClient("http://localhost:8000")

# Define input args for kernel
inputs = IOContractBuilder().add_input_tensor("x", create_randn_spec([1024, 512], seed=42)).build()

# Evaluate a single kernel
kernel = KernelCode(
    source_code="class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
    kernel_type=KernelType.TORCH,
    io=inputs
)
result = client.evaluate(kernel, num_trials=100)
print(f"Runtime: {result.kernel_exec_result.runtime}ms")
""",
    "004.5": r'''import requests

# Simple PyTorch model evaluation - server auto-generates inputs
response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": """
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(512, 256)
    
    def forward(self, x):
        return torch.relu(self.linear(x))
""",
        "kernel_type": "torch",
        "io": {
            "args": [
                {
                    "name": "x",
                    "type": "tensor",
                    "tensor_spec": {
                        "shape": [1024],
                        "dtype": "float32",
                        "init": {"kind": "randn", "seed": 42}
                    },
                    "role": "input"
                }
            ]
        }
    },
    "num_trials": 100
})

result = response.json()
print(f"Compiled: {result['kernel_exec_result']['compiled']}")
print(f"Runtime: {result['kernel_exec_result']['runtime']}ms")
''',
    "004.6": r'''# Compare reference PyTorch against optimized version
response = requests.post("http://localhost:8000/compare", json={
    "ref_kernel": {
        "source_code": """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    # randomly generate input tensors based on the model architecture
    a = torch.randn(1, 128).cuda()
    b = torch.randn(1, 128).cuda()
    return [a, b]


def get_init_inputs():
    # randomly generate tensors required for initialization based on the model architecture
    return []
""",
        "kernel_type": "torch"
    },
    "custom_kernel": {
        "source_code": """
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Define the custom CUDA kernel for element-wise addition
elementwise_add_source = \"\"\"
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
\"\"\"

elementwise_add_cpp_source = (
    "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"
)

# Compile the inline CUDA code for element-wise addition
elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
""",
        "kernel_type": "torch_cuda"
    },
    "num_trials": 200
})

result = response.json()
ref_time = result['ref_runtime']['mean']
custom_time = result['kernel_exec_result']['runtime']
print(f"Speedup: {ref_time / custom_time:.2f}x")
''',
    "004.7": r'''# Triton kernel requires IOContract for input specification
response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)
""",
        "kernel_type": "triton",
        "io": {
            "args": [
                {
                    "name": "x",
                    "type": "tensor",
                    "tensor_spec": {
                        "shape": [1024],
                        "dtype": "float32",
                        "init": {"kind": "randn", "seed": 42}
                    },
                    "role": "input"
                },
                {
                    "name": "y",
                    "type": "tensor",
                    "tensor_spec": {
                        "shape": [1024],
                        "dtype": "float32",
                        "init": {"kind": "ones"}
                    },
                    "role": "input"
                },
                {
                    "name": "output",
                    "type": "tensor",
                    "tensor_spec": {
                        "shape": [1024],
                        "dtype": "float32"
                    },
                    "role": "output"
                },
                {
                    "name": "n_elements",
                    "type": "int",
                    "value": 1024,
                    "role": "input"
                },
                {
                    "name": "BLOCK_SIZE",
                    "type": "int",
                    "value": 256,
                    "role": "input",
                    "is_meta": True  # Triton compile-time constant
                }
            ],
            "launch": {
                "grid": {"x": 4},  # 1024 / 256 = 4 blocks
                "num_warps": 4
            }
        }
    },
    "num_trials": 100
})
''',
    "004.8": r'''# Raw CUDA kernel with launch configuration
response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": """
__global__ void vector_add(float* a, float* b, float* c, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) {
        c[tid] = a[tid] + b[tid];
    }
}
""",
        "kernel_type": "cuda",
        "metadata": {
            "kernel_name": "vector_add",  # Required for CUDA
            "compiler_options": ["--use_fast_math"]
        },
        "io": {
            "args": [
                {"name": "a", "type": "tensor", "tensor_spec": {"shape": [4096], "dtype": "float32", "init": {"kind": "randn", "seed": 1}}, "role": "input"},
                {"name": "b", "type": "tensor", "tensor_spec": {"shape": [4096], "dtype": "float32", "init": {"kind": "randn", "seed": 2}}, "role": "input"},
                {"name": "c", "type": "tensor", "tensor_spec": {"shape": [4096], "dtype": "float32"}, "role": "output"},
                {"name": "n", "type": "int", "value": 4096, "role": "input"}
            ],
            "launch": {
                "grid": {"x": 16},
                "block": {"x": 256}
            }
        }
    },
    "num_trials": 100
})
''',
    "004.9": r'''# Target a specific function instead of Model.forward()
response = requests.post("http://localhost:8000/evaluate", json={
    "kernel": {
        "source_code": """
import torch

def optimized_softmax(x):
    return torch.softmax(x, dim=-1)

def another_function(x):
    return x * 2  # This won't be called

class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1  # This won't be called either
""",
        "kernel_type": "torch",
        "metadata": {
            "function_name": "optimized_softmax"  # Target specific function
        },
        "io": {
            "args": [
                {
                    "name": "x",
                    "type": "tensor",
                    "tensor_spec": {
                        "shape": [64, 128],
                        "dtype": "float32",
                        "init": {"kind": "randn", "seed": 42}
                    }
                }
            ]
        }
    },
    "num_trials": 100
})
''',
    "004.10": r"""{
    "job_id": "550e8400-e29b-41d4-a716-446655440000",
    "status": "success",
    "kernel_exec_result": {
        "compiled": true,           // Did compilation succeed?
        "correctness": true,        // Is output correct? (comparison only)
        "runtime": 1.23,            // Mean runtime in milliseconds
        "runtime_stats": {          // Detailed performance metrics
            "mean": 1.23,
            "std": 0.05,
            "min": 1.18,
            "max": 1.35,
            "median": 1.22,
            "percentile_95": 1.30,
            "percentile_99": 1.33
        },
        "metadata": {               // GPU and kernel information
            "gpu_id": 0,
            "gpu_type": "NVIDIA H100",
            "device_metrics": {
                // Kernel device metrics (/evaluate) | Reference kernel device metrics (/compare)
                "original_device_metrics": {
                    "speed_of_light": {
                        "compute_throughput_pct": 85.2,
                        "memory_throughput_pct": 92.1,
                        "compute_memory_throughput_pct": 88.5,
                        "sm_throughput_pct": 82.3,
                        "dram_throughput_pct": 91.8,
                        "gpu_dram_throughput_pct": 90.2
                    },
                    "detailed_metrics": {
                        "l1_hit_rate_pct": 89.2,
                        "l2_hit_rate_pct": 73.4,
                        "warp_occupancy_pct": 78.9,
                        "sm_active_cycles_pct": 92.1,
                        "instructions_per_cycle": 2.34,
                        "waves_per_sm": 3.2
                    },
                    "memory_metrics": {
                        "dram_avg_bandwidth_gb_s": 456.2,
                        "dram_total_bandwidth_gb_s": 512.8,
                        "dram_active_cycles_pct": 88.4,
                        "l1_writeback_active_pct": 45.2,
                        "l1_read_sectors_pct": 67.8,
                        "l2_throughput_pct": 82.3
                    },
                    "compute_metrics": {
                        "fma_pipe_utilization_pct": 75.2,
                        "fp64_pipe_utilization_pct": 12.3,
                        "alu_pipe_utilization_pct": 68.9,
                        "xu_pipe_utilization_pct": 34.5,
                        "tensor_pipe_utilization_pct": 0.0,
                        "instructions_per_cycle": 2.34,
                        "occupancy_limit_blocks": 16,
                        "occupancy_limit_registers": 65536,
                        "occupancy_limit_shared_mem": 49152,
                        "occupancy_limit_warps": 64,
                        "registers_per_thread": 32
                    },
                    "pipeline_metrics": {
                        "fma_pipe_active_pct": 72.3,
                        "alu_pipe_active_pct": 65.4,
                        "tensor_pipe_active_pct": 0.0,
                        "shared_pipe_active_pct": 45.6,
                        "fp64_pipe_active_pct": 10.2,
                        "sm_issue_active_pct": 88.9
                    },
                    "occupancy_metrics": {
                        "occupancy_limit_registers": 65536,
                        "occupancy_limit_shared_mem": 49152,
                        "occupancy_limit_warps": 64,
                        "occupancy_limit_blocks": 16,
                        "waves_per_sm": 3.2,
                        "block_size": 256,
                        "grid_size": 1024,
                        "shared_mem_per_block": 4096
                    },
                    "stall_metrics": {
                        "stall_long_scoreboard_pct": 28.4,
                        "stall_short_scoreboard_pct": 6.1,
                        "stall_barrier_pct": 2.7,
                        "stall_not_selected_pct": 14.9
                    },
                    "scheduler_metrics": {
                        "warps_eligible_per_cycle": 5.6,
                        "inst_issued_per_cycle": 2.9,
                        "issue_active_pct": 71.2
                    },
                    "access_pattern_metrics": {
                        "l1_load_sectors_per_req": 1.85,
                        "l1_store_sectors_per_req": 2.10,
                        "l2_theoretical_sectors_global": 1.23e8,
                        "l2_theoretical_sectors_global_ideal": 9.10e7,
                        "l2_theoretical_sectors_global_excessive": 3.20e7,
                        "l2_excess_frac": 0.26,
                        "shared_bank_conflicts_load_sum": 4096,
                        "shared_bank_conflicts_store_sum": 0
                    },
                    "roofline_metrics": {
                        "flop_count_total": 2.10e12,
                        "dram_bytes_sum": 5.80e11,
                        "arithmetic_intensity": 3.62,
                        "gflops": 14500.0
                    },
                    "timing_metrics": {
                        "gpu_time_duration_sum": 14.5,
                        "gpu_time_duration_unit": "ms",
                        "gpu_time_duration_seconds": 0.0145,
                        "gpc_cycles_elapsed_max": 3.1e8
                    }
                }
            }    
        }
    }
}
""",
    "004.11": r"""{
    "status": "success",
    "kernel_exec_result": {
        "compiled": true,
        "runtime": 1.23,
        "compilation_error": null
    }
}
""",
    "004.12": r"""{
    "status": "success",  // Note: Still returns success
    "kernel_exec_result": {
        "compiled": false,
        "runtime": 0,
        "compilation_error": "Syntax error at line 10: unexpected token"
    }
}
""",
    "004.13": r"""{
    "status": "success",
    "kernel_exec_result": {
        "compiled": true,
        "correctness": false,
        "runtime": 0,  // Profiling skipped
        "validation_error": "Maximum difference: 0.5 exceeds tolerance 1e-4"
    }
}
""",
    "004.14": r"""# Minimal IOContract for a vector addition kernel
"io": {
    "args": [
        {
            "name": "x",
            "type": "tensor",
            "tensor_spec": {
                "shape": [1024],
                "dtype": "float32",
                "init": {"kind": "randn", "seed": 42}
            },
            "role": "input"
        },
        {
            "name": "y",
            "type": "tensor",
            "tensor_spec": {
                "shape": [1024],
                "dtype": "float32",
                "init": {"kind": "randn", "seed": 43}
            },
            "role": "input"
        }
    ]
}
""",
    "004.15": r""""io": {
    "args": [
        # Tensor input
        {
            "name": "data",
            "type": "tensor",
            "tensor_spec": {
                "shape": [512, 768],
                "dtype": "float32",
                "init": {"kind": "randn", "seed": 42}
            },
            "role": "input"
        },
        # Scalar parameter
        {
            "name": "scale",
            "type": "float",
            "value": 2.0,
            "role": "input"
        },
        # Integer size
        {
            "name": "size",
            "type": "int",
            "value": 512,
            "role": "input"
        },
        # Output tensor (shape only, no init)
        {
            "name": "output",
            "type": "tensor",
            "tensor_spec": {
                "shape": [512, 768],
                "dtype": "float32"
            },
            "role": "output"
        }
    ]
}
""",
    "004.16": r""""tensor_spec": {
    "shape": [1024, 512],
    "dtype": "float32",
    "init": {
        "kind": "uniform",
        "low": -1.0,
        "high": 1.0,
        "seed": 42
    }
}
""",
    "004.17": r""""launch": {
    "grid": {"x": 32, "y": 1, "z": 1},   # Grid dimensions
    "block": {"x": 256, "y": 1, "z": 1}  # Block dimensions
}
""",
    "004.18": r""""launch": {
    "grid": {"x": 32},      # Grid size
    "num_warps": 4,         # Warps per block (default: 4)
    "num_stages": 3         # Pipeline stages (default: 3)
}
""",
    "004.19": r""""metadata": {
    "function_name": str,    # Target standalone function
    "class_name": str,       # Target class (default: "Model")
    "method_name": str       # Target method (default: "forward")
}
""",
    "004.20": r""""metadata": {
    "kernel_name": str,           # Entrypoint kernel name (required)
    "compiler_options": [str],    # NVRTC/NVCC flags
    "backend": str,              # "nvrtc" (default) or "nvcc"
    "jitify": bool               # Enable C++ features (default: false)
}
""",
    "004.21": r""""metadata": {
    "kernel_name": str,              # Entry point function (for multi-kernel files)
}
""",
    "004.23": r'''"kernel": {
    "source_code": """
__global__ void kernel1(...) { ... }
__global__ void kernel2(...) { ... }
__global__ void kernel3(...) { ... }
""",
    "kernel_type": "cuda",
    "metadata": {
        "kernel_name": "kernel2"  # Specify which kernel to run
    }
}
''',
    "004.26": r"""from kernel_eval_client import KernelEvalClient, KernelCode, KernelType

client = KernelEvalClient("http://localhost:8000")

# Single evaluation
result = client.evaluate(
    KernelCode(source_code="...", kernel_type=KernelType.TORCH),
    num_trials=100
)

# Comparison
result = client.compare(
    ref_kernel=KernelCode(...),
    custom_kernel=KernelCode(...),
    num_trials=100
)
""",
    "004.27": r"""from kernel_eval_client import IOContractBuilder, create_randn_spec

io = (
    IOContractBuilder()
    .add_input_tensor("x", create_randn_spec([1024, 512], seed=42))
    .add_output_tensor("y", [1024, 512], "float32")
    .add_scalar("alpha", "float", 2.0)
    .set_grid(32)
    .set_block(256)
    .build()
)
""",
    "004.28": r"""# Old format (still works but not recommended)
{
    "ref_code": "class Model...",
    "custom_code": "class Model...",
    "num_trials": 100
}

# Automatically converted to:
{
    "ref_kernel": {"source_code": "...", "kernel_type": "torch"},
    "custom_kernel": {"source_code": "...", "kernel_type": "torch_cuda"}
}
""",
    "004.29": r"""{
    "status": "healthy",
    "compilation_service": "ready",
    "profiling_service": "ready",
    "gpu_available": true,
    "gpu_count": 8
}
""",
    "004.30": r"""{
    "jobs_completed": 1234,
    "jobs_failed": 5,
    "avg_runtime_ms": 1500,
    "gpu_utilization_pct": 45.2,
    "uptime_seconds": 3600
}
""",
}
