"""A test EP that prefers NHWC: NumPy kernels in the internal NHWC domain for Conv, MaxPool and
GlobalAveragePool, plus default-domain Transpose and Relu so a small CNN stays on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ep_core.runtime.layout import NHWC_DOMAIN
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import FLOATS, KernelRegistry

NAME = "NhwcTestExecutionProvider"


def make_registry(with_conv: bool = True) -> KernelRegistry:
    reg = KernelRegistry(NAME)
    if with_conv:

        @reg.register("Conv", since=11, domain=NHWC_DOMAIN)
        def conv(node: Any, ctx: Any) -> Any:
            if any(s != 1 for s in node.attr("strides", [1, 1])) or node.attr("group", 1) != 1:
                raise ValueError("test NHWC Conv supports stride 1, group 1 only")
            t, left, b, r = node.attr("pads", [0, 0, 0, 0])

            def compute(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> tuple[np.ndarray]:
                xp = np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)))
                win = sliding_window_view(xp, w.shape[2:], axis=(1, 2))  # N,H,W,C,kh,kw
                y = np.einsum("nhwckl,mckl->nhwm", win, w).astype(x.dtype)
                return (y + bias if bias is not None else y,)

            return compute

    @reg.register("MaxPool", since=12, domain=NHWC_DOMAIN)
    def maxpool(node: Any, ctx: Any) -> Any:
        k = node.attr("kernel_shape")
        if node.attr("strides") != k or node.attr("pads", [0] * 4) != [0] * 4:
            raise ValueError("test NHWC MaxPool supports non-overlapping windows only")

        def compute(x: np.ndarray) -> tuple[np.ndarray]:
            n, h, w, c = x.shape
            v = x[:, : h // k[0] * k[0], : w // k[1] * k[1]].reshape(n, h // k[0], k[0], w // k[1], k[1], c)
            return (v.max(axis=(2, 4)),)

        return compute

    @reg.register("GlobalAveragePool", since=1, domain=NHWC_DOMAIN)
    def gap(node: Any, ctx: Any) -> Any:
        return lambda x: (x.mean(axis=(1, 2), keepdims=True),)

    @reg.register("Transpose", since=21, types={"T": FLOATS})
    def transpose(node: Any, ctx: Any) -> Any:
        perm = node.attr("perm")
        return lambda x: (np.ascontiguousarray(np.transpose(x, perm)),)

    @reg.register("Relu", since=14, types={"T": FLOATS})
    def relu(node: Any, ctx: Any) -> Any:
        return lambda x: (np.maximum(x, 0),)

    return reg


class NhwcEp(RegistryEp):
    def __init__(self, registry: KernelRegistry, convert_maxpool: bool) -> None:
        super().__init__(NAME, registry)
        self.convert_maxpool = convert_maxpool

    def ep_get_preferred_data_layout(self) -> str:
        return "NHWC"

    def ep_should_convert_data_layout_for_op(self, domain: str, op_type: str, target_layout: str) -> bool | None:
        if op_type == "MaxPool" and not self.convert_maxpool:
            return False
        return None


class NhwcFactory(HostEpFactory):
    ep_name = NAME
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, with_conv: bool = True, convert_maxpool: bool = True) -> None:
        self.registry = make_registry(with_conv)
        self.convert_maxpool = convert_maxpool

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> NhwcEp:
        return NhwcEp(self.registry, self.convert_maxpool)
