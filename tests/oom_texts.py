"""Real failure texts of the frameworks and libraries, for runtime/oom.py's tests (tests/unit/test_oom.py,
tests/unit/test_executor_oom.py): the corpus (:data:`CORPUS`), each message with its source (a public issue that
shows it, or the upstream file that writes it) and the verdict runtime/oom.py must reach. tests/unit/test_oom.py also
captures TensorFlow's and numpy's texts live; the records keep the tests meaningful where they are not installed.

A case's text is what the executor reads: the tail of the container's stderr. The messages are verbatim; where a case
puts several together (a warning, then a crash), each line is real and the sequence is the one the case names.
"""

from __future__ import annotations

from typing import NamedTuple, Optional


def traceback_of(last_line: str, script: str = "train.py") -> str:
    """A Python traceback ending in ``last_line`` (the frames are made up; the last line is the recorded one)."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "{script}", line 12, in <module>\n'
        "    x = model(batch)\n"
        f"{last_line}\n"
    )


class Case(NamedTuple):
    """One corpus entry: the stderr tail, the verdict (``cap``, ``outside``, ``host``; None: not a memory failure,
    the exit code is kept), the source of its message(s), and what it shows."""

    text: str
    verdict: Optional[str]
    source: str
    shows: str


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
#: same .so; the error name and text come from the driver's cuGetErrorName/cuGetErrorString), then the exception (its
#: traceback's frames left out there: made up here).
TF_GPU_OOM_STDERR = (
    "2021-07-14 08:08:53.663124: I tensorflow/stream_executor/cuda/cuda_driver.cc:775] failed to allocate 256.00M "
    "(268435456 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
    + traceback_of(
        "ResourceExhaustedError: OOM when allocating tensor with shape[11772117,100] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:RandomUniform]"
    )
)

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


def tb(message: str) -> str:
    """``message`` as the last exception of a traceback (:func:`traceback_of`)."""
    return traceback_of(message)


#: TensorFlow's BFC allocator's warning when a caller that can do without (cuDNN's autotuner probing a workspace) does
#: not get its memory: not a failure. tensorflow/tensorflow issue 43546 (TF 2.2, bfc_allocator.cc:246).
TF_BFC_WARNING = (
    "2020-09-24 21:35:23.363348: W tensorflow/core/common_runtime/bfc_allocator.cc:246] Allocator (GPU_0_bfc) ran out "
    "of memory trying to allocate 1.02GiB with freed_by_count=0. The caller indicates that this is not a failure, but "
    "may mean that there could be performance gains if more memory were available."
)
#: TensorFlow's growth-mode allocator failing to grow its region, then retrying smaller: talmolab/sleap issue 2142.
TF_GROWTH_RETRY = (
    "2025-03-17 17:48:09.854267: I tensorflow/stream_executor/cuda/cuda_driver.cc:739] failed to allocate 2.12G "
    "(2282521344 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
)
#: an ordinary bug after those: numpy's ValueError of np.dot on misaligned shapes (numpy/_core/src/multiarray/common.c,
#: dot_alignment_error; captured from the venv's numpy 2.4: np.dot(np.ones((3, 4)), np.ones((5, 6))))
VALUE_ERROR = "ValueError: shapes (3,4) and (5,6) not aligned: 4 (dim 1) != 5 (dim 0)"
#: the user's code catching torch's OOM to halve its batch, as ``logging.exception`` prints it, then going on
CAUGHT_TORCH_OOM = "ERROR:root:batch 256 does not fit, halving it\n" + tb(TORCH_OOM_LINE)

CORPUS: list[Case] = [
    # ---- TensorFlow --------------------------------------------------------------------------------------------
    Case(
        TF_GPU_OOM_STDERR,
        "cap",
        "tensorflow/core/framework/op_kernel.cc (allocate_tensor's message); the lines as "
        "published with TF 2.5 on a Tesla T4",
        "the allocator's own failure on a GPU, after a retried growth line",
    ),
    Case(
        tb(
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\nOOM when "
            "allocating tensor with shape[16,64,64,64] and type float on /job:localhost/replica:0/task:0/device:GPU:0 "
            "by allocator GPU_0_bfc\n\t [[{{node model/d}}]]\nHint: If you want to see a list of allocated tensors "
            "when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info. This "
            "isn't available when running in Eager mode.\n [Op:__inference_train_function_5381]"
        ),
        "cap",
        "hotosm/fAIr issue 59 (TF 2.x graph execution)",
        "a multi-line exception: the OOM is on its third line",
    ),
    Case(
        tb(
            "ResourceExhaustedError: 2 root error(s) found.\n  (0) Resource exhausted: OOM when allocating tensor with "
            "shape[8,64,224,224] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
            "\t [[{{node block1_conv1/convolution}}]]"
        ),
        "cap",
        "udacity/aind2-cnn issue 15 (TF 1.x session)",
        "TF 1's root-error form",
    ),
    Case(
        tb(
            "ResourceExhaustedError: OOM when allocating tensor with shape[25088,4096] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
        ),
        "cap",
        "dBeker/Faster-RCNN-TensorFlow-Python3 issue 110",
        "the request is the tensor: 25088 x 4096 floats = 392 MiB",
    ),
    Case(
        "E tensorflow/core/common_runtime/bfc_allocator.cc:244] tried to allocate 0 bytes\n"
        "W tensorflow/core/common_runtime/allocator_retry.cc:32] Request to allocate 0 bytes\n"
        "F tensorflow/core/common_runtime/gpu/gpu_device.cc:103] EigenAllocator for GPU ran out of memory when "
        "allocating 0. See error logs for more detailed info.\nAborted (core dumped)\n",
        "cap",
        "CharlesShang/FastMaskRCNN issue 129 (its lines without the poster's timestamps, TensorFlow <= 1.2's own form)",
        "TensorFlow's FATAL line ends the process (SIGABRT): the runtime's fatal line decides",
    ),
    Case(
        "I1217 08:19:26.459563  6021 net.cpp:382] mobilenet0_conv9 -> mobilenet0_conv9\nF1217 08:19:28.327307  6021 "
        "cudnn_conv_layer.cpp:53] Check failed: status == CUDNN_STATUS_SUCCESS (4 vs. 0)  CUDNN_STATUS_INTERNAL_ERROR\n"
        "*** Check failure stack trace: ***\nAborted (core dumped)\n",
        None,
        "wzj5133329/retinaface_caffe issue 9 (glog's FATAL line)",
        "glog's fatal line, not memory",
    ),
    Case(
        TF_OOM_STDERR,
        "host",
        "recorded here: TensorFlow 2.21 on this CPU-only machine (above)",
        "TensorFlow's OOM on its CPU device: the host's memory",
    ),
    Case(
        TF_BFC_WARNING + "\n" + tb(VALUE_ERROR),
        None,
        "tensorflow/tensorflow issue 43546 (the warning); numpy's dot_alignment_error (the crash)",
        "a BFC warning earlier in the output does not make a later crash an OOM",
    ),
    Case(
        TF_GROWTH_RETRY + "\n" + TF_BFC_WARNING + "\n" + tb(VALUE_ERROR),
        None,
        "talmolab/sleap issue 2142 and tensorflow/tensorflow issue 43546",
        "growth-mode allocation failures TensorFlow retried, then a bug",
    ),
    Case(
        TF_OOM_STDERR.split("Traceback")[0] + tb(VALUE_ERROR),
        None,
        "recorded here (op_kernel's OP_REQUIRES warning of an OOM the user's code caught), then a bug",
        "an OOM logged by an op is not the fatal error",
    ),
    Case(
        tb(
            "tensorflow.python.framework.errors_impl.InternalError: CUDA runtime implicit initialization on GPU:0 "
            "failed. Status: out of memory"
        ),
        "outside",
        "junxnone/tio issue 189; MicrosoftDocs/ml-basics issue 12",
        "the CUDA context could not be created",
    ),
    Case(
        "2024-06-06 10:53:20.251154: E external/local_xla/xla/stream_executor/cuda/cuda_blas.cc:185] failed to "
        "create cublas handle: the resource allocation failed\n2024-06-06 10:53:20.251203: E external/local_xla/xla/"
        "stream_executor/cuda/cuda_blas.cc:188] Failure to initialize cublas may be due to OOM (cublas needs some "
        "free memory when you initialize it, and your deep-learning framework may have preallocated more than its "
        "fair share), or may be because this binary was not built with support for the GPU in your machine.\n"
        "2024-06-06 10:53:20.251227: W external/local_xla/xla/stream_executor/stream.cc:1020] attempting to perform "
        "BLAS operation using StreamExecutor without BLAS support\n"
        + tb(
            "tensorflow.python.framework.errors_impl.InternalError: Graph execution error:\n\nAttempting to "
            "perform BLAS operation using StreamExecutor without BLAS support\n\t [[{{node sequential/dense/MatMul}}]]"
            " [Op:__inference_train_function_853]"
        ),
        "outside",
        "clearml/clearml-fractional-gpu issue 4 (XLA's cuda_blas.cc and stream.cc lines; its exception is cut off "
        "there: here as tensorflow/core/kernels/matmul_op_impl.h raises it, the status rstudio/tensorflow issue 512 "
        "shows)",
        "the fatal error names a consequence; its cause is XLA's cuBLAS handle line above it",
    ),
    Case(
        "2025-01-14 01:27:34.080572: E tensorflow/compiler/xla/stream_executor/cuda/cuda_blas.cc:190] failed to "
        "create cublas handle: the library was not initialized\n2022-02-21 08:44:09.486805: W tensorflow/core/"
        "framework/op_kernel.cc:1745] OP_REQUIRES failed at matmul_op_impl.h:442 : INTERNAL: Attempting to perform "
        "BLAS operation using StreamExecutor without BLAS support\n"
        + tb(
            "tensorflow.python.framework.errors_impl."
            "InternalError: Attempting to perform BLAS operation using StreamExecutor without BLAS support [Op:MatMul]"
        ),
        None,
        "mikelkou/fava issue 23 (the cuBLAS line); rstudio/tensorflow issue 512 (the op's status)",
        "cuBLAS not initialised, not an allocation: the exit code stays",
    ),
    Case(
        "2020-08-31 10:01:02.123456: E tensorflow/stream_executor/cuda/cuda_dnn.cc:328] Could not create cudnn "
        "handle: CUDNN_STATUS_ALLOC_FAILED\n"
        + tb(
            "tensorflow.python.framework.errors_impl.UnknownError:  Failed to "
            "get convolution algorithm. This is probably because cuDNN failed to initialize, so try looking to see if a "
            "warning log message was printed above. [[node retinanet/conv1/Conv2D (defined at keras_retinanet/bin/"
            "train.py:551) ]] [Op:__inference_train_function_13978]"
        ),
        "outside",
        "fizyr/keras-retinanet issue 1452",
        "cuDNN's handle could not be allocated",
    ),
    Case(
        "2019-06-23 19:34:30.142558: E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn "
        "handle: CUDNN_STATUS_INTERNAL_ERROR\n"
        + tb(
            "tensorflow.python.framework.errors_impl.UnknownError: 2 root "
            "error(s) found.\n  (0) Unknown: Failed to get convolution algorithm. This is probably because cuDNN failed "
            "to initialize, so try looking to see if a warning log message was printed above."
        ),
        None,
        "tensorflow/models issue 7088",
        "cuDNN failed for a reason other than memory: the exit code stays",
    ),
    Case(
        "2019-02-16 17:30:37.200664: E tensorflow/stream_executor/cuda/cuda_blas.cc:464] failed to create cublas "
        "handle: CUBLAS_STATUS_NOT_INITIALIZED\n"
        + tb(
            "tensorflow.python.framework.errors_impl.InternalError: Blas "
            "GEMM launch failed : a.shape=(10, 1001), b.shape=(1001, 3), m=10, n=3, k=1001"
        ),
        None,
        "tensorflow/tensor2tensor issue 1456",
        "cuBLAS not initialised is not an allocation failure by its name",
    ),
    Case(
        tb(
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Received message larger than max "
            "(8066392 vs. 4194304)"
        ),
        None,
        "alibaba/graph-learn issue 36 (gRPC's message_size_filter.cc through TensorFlow's RPC layer)",
        "RESOURCE_EXHAUSTED of gRPC's message size is not memory",
    ),
    # ---- PyTorch -----------------------------------------------------------------------------------------------
    Case(
        tb(TORCH_OOM_LINE),
        "cap",
        "c10/cuda/CUDACachingAllocator.cpp; murong-xu/CADS issue 4 (torch 2.5)",
        "the caching allocator's OOM, with what it held and the request",
    ),
    Case(tb(TORCH_CUDA_OOM_LINE), "cap", "pytorch/pytorch issue 16417 (torch 2.1-2.4)", "the older class name"),
    Case(tb(TORCH_1_OOM_LINE), "cap", "pytorch/pytorch issue 16417's title (torch 1.x)", "a RuntimeError in torch 1"),
    Case(
        tb("RuntimeError: CUDA error: out of memory"),
        "outside",
        "c10/cuda/CUDAException.cpp "
        "(c10_cuda_check_implementation: 'CUDA error: ' + cudaGetErrorString); adityaarun1/Detectron.pytorch issue 11",
        "a CUDA call outside the caching allocator failed",
    ),
    Case(
        tb("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        "outside",
        "QwenLM/Qwen3 issue 873; aten/src/ATen/cuda/Exceptions.h (TORCH_CUDABLAS_CHECK)",
        "cuBLAS's handle",
    ),
    Case(
        tb("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        "outside",
        "pytorch/pytorch issue 20123; aten/src/ATen/cudnn/Exceptions.h (AT_CUDNN_CHECK)",
        "cuDNN's workspace",
    ),
    Case(
        tb("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
        "outside",
        "cuDNN 9's cudnn_graph.h (status 4004, 'Device memory allocation failed', since 9.0.0) through AT_CUDNN_CHECK",
        "cuDNN 9's sub-code of an internal error that is an allocation",
    ),
    Case(
        tb("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"),
        None,
        "pytorch/pytorch issue 16831",
        "cuDNN's internal error without the allocation sub-code: not decided as memory",
    ),
    Case(
        tb("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCTensorRandom.cu:25"),
        "outside",
        "rowanz/neural-motifs issue 58 (torch 0.4's THC: the random generator's states)",
        "a direct cudaMalloc of the old THC",
    ),
    Case(
        CAUGHT_TORCH_OOM + tb(VALUE_ERROR),
        None,
        "c10/cuda/CUDACachingAllocator.cpp (the OOM the user caught); numpy's dot_alignment_error (the crash)",
        "an OOM the user's code caught earlier is not the fatal error",
    ),
    Case(
        tb("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory."),
        None,
        "NVIDIA/nccl issue 1284 (after an NCCL timeout)",
        "a request beyond any GPU is a corrupt size, not a shortage",
    ),
    Case(
        tb(
            "RuntimeError: [enforce fail at alloc_cpu.cpp:73] . DefaultCPUAllocator: can't allocate memory: you tried "
            "to allocate 116813856768 bytes. Error code 12 (Cannot allocate memory)"
        ),
        "host",
        "JingyunLiang/VRT issue 49 (c10/core/impl/alloc_cpu.cpp)",
        "PyTorch's CPU allocator: the host's memory",
    ),
    Case(
        tb("RuntimeError: CUDA error: device-side assert triggered"),
        None,
        "c10/cuda/CUDAException.cpp (cudaErrorAssert's string)",
        "a CUDA error that is not memory",
    ),
    # ---- NCCL --------------------------------------------------------------------------------------------------
    Case(
        tb(
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\nncclUnhandledCudaError: "
            "Call to CUDA function failed.\nLast error:\nCuda failure 2 'out of memory'"
        )
        .replace("\n", "\n[rank7]: ")
        .replace("[rank7]: Traceback", "Traceback"),
        "outside",
        "NVIDIA/nccl issue 1410 (the exception's form, torchrun's [rank7] prefix); the last line as NCCL >= 2.19's "
        "CUCHECK writes it (src/include/cudawrap.h: WARN(\"Cuda failure %d '%s'\"), CUDA_ERROR_OUT_OF_MEMORY = 2)",
        "NCCL's cuMem path ran out",
    ),
    Case(
        tb(
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\nncclUnhandledCudaError: "
            "Call to CUDA function failed.\nLast error:\nCuda failure 1 'invalid argument'"
        ),
        None,
        "NVIDIA/nccl issue 1410",
        "NCCL's CUDA failure that is not memory",
    ),
    Case(
        "node:2134736:2285781 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
        "node:2134736:2285781 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"
        "node:2134736:2285781 [0] proxy.cc:1518 NCCL WARN [Proxy Service 93] Failed to execute operation Setup from "
        "rank 93, retcode 1\n"
        + tb(
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
            "c10d/ProcessGroupNCCL.cpp:1296, internal error - please report this issue to the NCCL developers, NCCL "
            "version 2.18.1"
        ),
        "outside",
        "NVIDIA/nccl issue 962",
        "NCCL's buffers: the cause is in its WARN lines",
    ),
    Case(
        "ins-7df6eojsifuykig9:3018451:3018451 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'\n"
        + tb("RuntimeError: NCCL Error 1: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
        "outside",
        "PKU-YuanGroup/Open-Sora-Plan issue 386",
        "the older NCCL error form, with its WARN line",
    ),
    Case(
        "terminate called after throwing an instance of 'std::runtime_error'\n  what():  NCCL error in: /opt/conda/"
        "conda-bld/pytorch_1614378063927/work/torch/lib/c10d/../c10d/NCCLUtils.hpp:155, unhandled cuda error, NCCL "
        "version 2.7.8\nncclUnhandledCudaError: Call to CUDA function failed.\n",
        None,
        "llSourcell/Object_Detection_demo_LIVE issue 9",
        "a C++ fatal error without a memory cause",
    ),
    Case(
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG 0 Rank 0] Process group watchdog thread terminated with exception: NCCL error: unhandled cuda "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA "
        "function failed.\nLast error:\nCuda failure 2 'out of memory'\nException raised from checkForNCCLErrorsInternal"
        " at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1723 (most recent call first):\n",
        "outside",
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog's message and its C++ stack line) with NCCL "
        "2.21's last error as its CUCHECK writes it (src/include/cudawrap.h)",
        "NCCL's OOM ending the process from torch's watchdog thread (SIGABRT)",
    ),
    # ---- JAX / XLA ---------------------------------------------------------------------------------------------
    Case(
        tb(
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
            "7406166528 bytes."
        ),
        "cap",
        "google-deepmind/alphafold issue 1023",
        "XLA's allocator",
    ),
    Case(
        tb(
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
            "4770354232 bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n             parameter "
            "allocation:  372.76MiB\n                 total allocation:   14.44GiB"
        ),
        "cap",
        "patrickbryant1/AFProfile issue 8",
        "with XLA's buffer-assignment report after it",
    ),
    Case(
        tb(
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 2.99GiB "
            "(3206250496B) on device ordinal 0"
        ),
        "cap",
        "ecmwf-lab/ai-models-graphcast issue 18",
        "XLA's BFC allocator's newer wording",
    ),
    Case(
        tb("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 20029400304 bytes."),
        "cap",
        "onpix/LLNeRF issue 9",
        "XLA's third wording",
    ),
    Case(
        "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:"
        "672] Execution of replica 0 failed: Resource exhausted: Out of memory while trying to allocate 5520758552 "
        "bytes.\n" + tb(VALUE_ERROR),
        None,
        "jax-ml/jax issue 788 (the E line), then a bug",
        "XLA's logged error is not the fatal one",
    ),
    # ---- the host, and not memory ------------------------------------------------------------------------------
    Case(tb("MemoryError"), "host", "CPython Objects/exceptions.c (PyErr_NoMemory)", "Python's own"),
    Case(
        tb(
            "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 8.00 PiB for an array with shape "
            "(1099511627776, 1024) and data type float64"
        ),
        "host",
        "numpy/_core/_exceptions.py, captured from the venv's numpy 2.4",
        "numpy's MemoryError subclass",
    ),
    Case(
        'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space\n',
        "host",
        "OpenJDK (the JVM's report of the exception that ended its main thread)",
        "a JVM's heap: the host's memory",
    ),
    Case(
        tb("Py4JJavaError: An error occurred while calling o448.fit.\n: java.lang.OutOfMemoryError: Java heap space"),
        "host",
        "googlecolab/colabtools issue 3050 (PySpark)",
        "a JVM's heap under Python: the host's memory",
    ),
    Case(
        tb("OutOfMemoryError: Java heap space"),
        "host",
        "intel/ipex-llm issue 7240's title (an unprefixed OutOfMemoryError)",
        "not torch's OutOfMemoryError",
    ),
    Case(
        "checking the layout of memory-mapped shards\nKilled\n",
        None,
        "the shell's report of SIGKILL (the kernel's "
        "OOM killer, mm/oom_kill.c, leaves no text in the process's stderr)",
        "no fatal error: the exit code stays",
    ),
    Case(tb(VALUE_ERROR), None, "numpy/_core/src/multiarray/common.c (dot_alignment_error)", "an ordinary crash"),
]
