"""The model and its inputs, shared by train and evaluate: video/image reading, sampling, messages, loading."""

import os as _os

# Without a CUDA device DeepSpeed (imported by transformers and Lightning) guesses the CPU accelerator and logs a
# warning in every process; say it explicitly instead. A machine with CUDA, or a user's own setting, is left alone.
_HAS_GPU = any(_os.path.exists(dev) for dev in ("/dev/nvidia0", "/dev/kfd"))  # NVIDIA, or AMD ROCm
if not _os.environ.get("DS_ACCELERATOR") and not _HAS_GPU and not _os.environ.get("CUDA_VISIBLE_DEVICES"):
    _os.environ["DS_ACCELERATOR"] = "cpu"
