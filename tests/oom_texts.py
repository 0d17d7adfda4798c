"""Out-of-memory texts of the frameworks, recorded verbatim, for runtime/oom.py's tests (tests/unit/test_oom.py,
tests/unit/test_executor_oom.py). tests/unit/test_oom.py also captures TensorFlow's text live when TensorFlow is
installed; the records keep the tests meaningful where it is not (and name the executor's input exactly).
"""

#: TensorFlow 2.21.0 (CPU build, Linux x86_64, Python 3.11), the end of the stderr of
#: ``TF_ENABLE_ONEDNN_OPTS=0 python tfoom.py`` where tfoom.py is ``import tensorflow as tf`` then
#: ``x = tf.zeros([2**46], tf.float32)`` (256 TiB: no allocator can give it, so it raises at once). Recorded
#: verbatim from the allocator's warning on; the lines before it are TensorFlow's start-up logging.
TF_OOM_STDERR = """\
W0000 00:00:1796244103.431646   12400 cpu_allocator_impl.cc:82] Allocation of 281474976710656 exceeds 10% of free system memory.
W0000 00:00:1796244103.431781   12400 op_kernel.cc:1858] OP_REQUIRES failed at constant_op.cc:176 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[70368744177664] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu
W0000 00:00:1796244103.431804   12400 local_rendezvous.cc:412] Local rendezvous is aborting with status: RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[70368744177664] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu
Traceback (most recent call last):
  File "/tmp/tfoom.py", line 6, in <module>
    x = tf.zeros([2**46], tf.float32)
        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/tensorflow/python/util/traceback_utils.py", line 167, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "/work/main/.venv/lib/python3.11/site-packages/tensorflow/dtensor/python/api.py", line 64, in call_with_layout
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node __wrapped__Fill_device_/job:localhost/replica:0/task:0/device:CPU:0}} OOM when allocating tensor with shape[70368744177664] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu [Op:Fill] name: 
"""

#: TensorFlow on a GPU. Its BFC allocator is named ``GPU_<n>_bfc`` and the op's error is composed in
#: ``tensorflow/core/framework/op_kernel.cc`` (OpKernelContext::allocate_tensor: "OOM when allocating tensor with
#: shape" ... " by allocator " ...; the venv's ``libtensorflow_framework.so.2`` holds the string, ``strings`` shows it).
#: Two verbatim lines of users' GPU logs as published: the stream executor's failed device allocation (TF 2.5, a
#: Tesla T4; ``xla/stream_executor/cuda/cuda_driver.cc``, GpuDriver::DeviceAllocate, " bytes) from device: " in the
#: same .so; the error name and text come from the driver's cuGetErrorName/cuGetErrorString), then the exception.
TF_GPU_OOM_STDERR = """\
2021-07-14 08:08:53.663124: I tensorflow/stream_executor/cuda/cuda_driver.cc:775] failed to allocate 256.00M (268435456 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory
ResourceExhaustedError: OOM when allocating tensor with shape[11772117,100] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:RandomUniform]
"""

#: PyTorch 2.5 and later: the exception is ``torch.OutOfMemoryError`` and its message is built in
#: ``c10/cuda/CUDACachingAllocator.cpp`` (``TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried
#: to allocate ", format_size(alloc_size), ". GPU ", device, " has a total capacity of ", ...)``). The line as a
#: user's job printed it, verbatim from https://github.com/murong-xu/CADS/issues/4 .
TORCH_OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of "
    "31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in use. "
    "Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

#: PyTorch 2.1 to 2.4: the same allocator message, raised as ``torch.cuda.OutOfMemoryError``; verbatim from a
#: comment of 2024-03-13 on https://github.com/pytorch/pytorch/issues/16417 .
TORCH_CUDA_OOM_LINE = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. "
    "Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

#: PyTorch 1.x: a ``RuntimeError`` with the allocator's older message (the title of
#: https://github.com/pytorch/pytorch/issues/16417 , verbatim).
TORCH_1_OOM_LINE = (
    "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB "
    "already allocated; 9.28 GiB free; 4.68 MiB cached)"
)


def traceback_of(last_line: str, script: str = "train.py") -> str:
    """A Python traceback ending in ``last_line`` (the frames are made up; the last line is the recorded one)."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "{script}", line 12, in <module>\n'
        "    x = model(batch)\n"
        f"{last_line}\n"
    )


#: The frameworks' GPU out-of-memory failures, one line each as the user's stderr shows it: (line, where it is emitted).
#: Lines are verbatim from users' published logs; the emitting file is upstream's, or the installed package's where the
#: venv has it (TensorFlow 2.21: ``strings`` of ``site-packages/tensorflow/libtensorflow_framework.so.2``).
GPU_OOM_CORPUS = [
    (TORCH_OOM_LINE, "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (torch.OutOfMemoryError)"),
    (
        "RuntimeError: CUDA error: out of memory",
        "pytorch/pytorch c10/cuda/CUDAException.h (C10_CUDA_CHECK: 'CUDA error: ' + cudaGetErrorString)",
    ),
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "pytorch/pytorch aten/src/ATen/cuda/Exceptions.h (TORCH_CUDABLAS_CHECK), the cuBLAS handle's workspace",
    ),
    (
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "pytorch/pytorch aten/src/ATen/cuda/Exceptions.h (AT_CUDNN_CHECK: 'cuDNN error: ' + cudnnGetErrorString)",
    ),
    (
        "2018-02-07 22:06:11.442068: E tensorflow/stream_executor/cuda/cuda_driver.cc:936] failed to allocate 163.62M "
        "(171573248 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY",
        "tensorflow/tensorflow xla/stream_executor/cuda/cuda_driver.cc (GpuDriver::DeviceAllocate; in the venv's "
        "libtensorflow_framework.so.2)",
    ),
    (
        "2021-07-14 08:08:53.663124: I tensorflow/stream_executor/cuda/cuda_driver.cc:775] failed to allocate 256.00M "
        "(268435456 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        "tensorflow/tensorflow xla/stream_executor/cuda/cuda_status.cc (ToStatusSlow: CUDA_ERROR_OUT_OF_MEMORY is "
        "ResourceExhausted, 'detail: name: text')",
    ),
    (
        "E tensorflow/stream_executor/cuda/cuda_dnn.cc:348] could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
        "tensorflow/tensorflow xla/stream_executor/cuda/cuda_dnn.cc ('Could not create cudnn handle: ' and "
        "CUDNN_STATUS_ALLOC_FAILED, both in the venv's libtensorflow_framework.so.2)",
    ),
    (
        "ResourceExhaustedError: OOM when allocating tensor with shape[11772117,100] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:RandomUniform]",
        "tensorflow/tensorflow tensorflow/core/framework/op_kernel.cc (OpKernelContext::allocate_tensor)",
    ),
    (
        "NCCL WARN Cuda failure 'out of memory'",
        "NVIDIA/nccl src/include/checks.h (CUDACHECK: WARN(\"Cuda failure '%s'\", cudaGetErrorString(err)))",
    ),
    (
        "Cuda failure 'out of memory'",
        "NVIDIA/nccl src/include/checks.h, as the last line of torch's DistBackendError "
        "('ncclUnhandledCudaError: Call to CUDA function failed. Last error: ...')",
    ),
]

#: Failures of the host's memory: they keep their exit code (no more GPU memory would help).
HOST_OOM_CORPUS = [
    ("MemoryError", "CPython Objects/exceptions.c (PyErr_NoMemory)"),
    (
        "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 8.00 PiB for an array with shape "
        "(1099511627776, 1024) and data type float64",
        "numpy numpy/_core/_exceptions.py (_ArrayMemoryError), captured from the venv's numpy 2.4",
    ),
    ('Exception in thread "main" java.lang.OutOfMemoryError: Java heap space', "OpenJDK (the JVM's heap)"),
    (
        "Killed",
        "the shell's report of SIGKILL: the kernel's OOM killer (mm/oom_kill.c) leaves no text of its own "
        "in the process's stderr, only exit 137",
    ),
]
