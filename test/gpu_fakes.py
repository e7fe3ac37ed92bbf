"""Host stand-ins for the GPU encoders' device (shared by test_gpu_static.py and trt_bindings_cases.py)."""

from __future__ import annotations

import numpy as np


class FakeDeviceArray(np.ndarray):
    """A host array that calls itself a device array (`__cuda_array_interface__`), for the buffer logic."""

    @property
    def __cuda_array_interface__(self):
        ai = self.__array_interface__
        return {"shape": ai["shape"], "typestr": ai["typestr"], "data": ai["data"], "strides": None, "version": 3}


def address(a) -> int:
    return int(a.__array_interface__["data"][0])


class HostDevice:
    """CudaDevice's interface on host memory: what the GPU encoders call, recorded."""

    name, compute_capability, stream_handle = "Fake GPU", "9.0", 0xC0FFEE

    def __init__(self):
        self.calls = []

    def empty(self, shape, dtype):
        return np.zeros(shape, dtype).view(FakeDeviceArray)

    def pinned(self, shape, dtype):
        return np.zeros(shape, dtype)

    def upload(self, dst, host):
        self.calls.append("upload")
        np.copyto(dst, host, casting="same_kind")

    def copy(self, dst, src):
        self.calls.append("copy")
        dst[...] = src

    def download(self, src, host):
        self.calls.append("download")
        host[...] = src

    def synchronize(self):
        self.calls.append("sync")
