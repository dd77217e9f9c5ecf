"""The per-kernel roofline: dtype peaks, the GEMM efficiency curve, memory-bound kernels, devices
described by a catalog ``type:``."""

from __future__ import annotations

from typing import Any

import pytest

from parplan.config.cluster import ClusterSpec, DeviceTemplate
from parplan.config.devices import DEVICE_TYPES, DTYPES, device_type
from parplan.config.model import TransformerGenerator
from parplan.errors import PlanError
from parplan.model.transformer import Op, block_ops, shape_of_generator
from parplan.plan.compute import (
    DEFAULT_MATMUL_MAX_EFFICIENCY,
    KERNEL_LAUNCH_S,
    MEMORY_EFFICIENCY,
    matmul_efficiency,
    op_seconds,
    ops_seconds,
)
from parplan.topology import build_network
from parplan.topology.network import DeviceInfo


def device(**template: Any) -> DeviceInfo:
    spec = ClusterSpec.model_validate(
        {"generator": {"kind": "switch", "hosts": 1, "device": template, "link": {"bandwidth": "1 GB/s"}}}
    )
    return build_network(spec).device("h0")


def test_catalog_fills_a_typed_device_and_the_file_overrides() -> None:
    h100 = device(type="H100-SXM")
    assert h100.peak_flop_per_s == 989.4e12
    assert h100.peak_for("bf16") == 989.4e12 and h100.peak_for("fp8") == 1978.9e12
    assert h100.memory_bytes == 80 * 2**30 and h100.memory_bandwidth_Bps == 3.35e12
    assert h100.arch == "hopper" and h100.sm_count == 132 and h100.device_type == "H100-SXM"
    assert h100.efficiency == 0.5  # the whole-model path's default is left alone
    mine = device(type="a100", memory="40 GiB", peak_flops_by_dtype={"bf16": "300 TFLOP/s"})
    assert mine.memory_bytes == 40 * 2**30
    assert mine.peak_for("bf16") == 300e12 and mine.peak_for("tf32") == 156e12
    assert mine.peak_for("fp8") is None
    with pytest.raises(ValueError, match="unknown device type 'X1'; known: V100"):
        DeviceTemplate.model_validate({"type": "X1"})
    with pytest.raises(ValueError, match="peak_flops"):
        DeviceTemplate.model_validate({"memory": "1 GiB"})


def test_catalog_is_complete_and_sane() -> None:
    for name in (
        "V100",
        "A100-40GB",
        "A100-80GB",
        "H100-SXM",
        "H100-PCIe",
        "H200",
        "B200",
        "MI300X",
        "L4",
        "T4",
    ):
        entry = DEVICE_TYPES[name]
        assert device_type(name.lower()) is entry
        peaks = entry.peak_flop_per_s_by_dtype
        assert set(peaks) <= set(DTYPES) and "fp32" in peaks
        # tensor peaks rise as precision falls
        ordered = [peaks[d] for d in DTYPES if d in peaks and d != "fp16"]
        assert ordered == sorted(ordered)
        assert 0.5 <= entry.matmul_max_efficiency <= 0.9


def test_an_untyped_device_keeps_its_single_peak_for_every_dtype() -> None:
    plain = device(peak_flops="100 TFLOP/s", memory="16 GiB", memory_bandwidth="1 TB/s")
    assert plain.peak_for("fp8") == plain.peak_for("fp32") == 100e12
    big = Op("g", "gemm", 2.0 * 16384**3, 0.0, (16384, 16384, 16384), 2.0, 2.0)
    t = op_seconds(plain, big, "bf16")
    assert t == pytest.approx(
        big.flops / (100e12 * matmul_efficiency(plain, 16384, 16384, 16384)) + KERNEL_LAUNCH_S
    )
    assert matmul_efficiency(plain, 16384, 16384, 16384) == pytest.approx(
        DEFAULT_MATMUL_MAX_EFFICIENCY, rel=1e-3
    )


def test_gemm_efficiency_rises_with_size_and_halves_at_half_at() -> None:
    d = device(type="H100-SXM")
    sizes = [64, 256, 1024, 4096, 16384]
    effs = [matmul_efficiency(replace_sm(d), s, s, s) for s in sizes]
    assert effs == sorted(effs) and effs[-1] < 0.75
    custom = device(type="H100-SXM", matmul_efficiency={"max": 0.6, "half_at": "1 GFLOP"})
    m = n = k = 500  # 2 x 500^3 = 0.25 GFLOP
    assert matmul_efficiency(replace_sm(custom), 1000, 1000, 500) == pytest.approx(0.3)
    assert matmul_efficiency(replace_sm(custom), m, n, k) == pytest.approx(0.6 * 0.25 / 1.25)


def replace_sm(d: DeviceInfo) -> DeviceInfo:
    from dataclasses import replace

    return replace(d, sm_count=None)


def test_wave_quantisation_penalises_a_partial_last_wave() -> None:
    d = device(type="H100-SXM")  # 132 SMs
    full = matmul_efficiency(d, 256 * 132, 128, 8192)  # exactly one wave of 256 x 128 tiles
    spill = matmul_efficiency(d, 256 * 133, 128, 8192)  # one tile into a second wave
    assert spill < full * 0.6


def test_memory_bound_kernels_go_at_the_memory_bandwidth() -> None:
    d = device(type="A100-80GB")
    norm = Op("norm", "norm", 5e6, 4e9, None, 1.0, 1.5)
    assert op_seconds(d, norm, "bf16") == pytest.approx(
        4e9 / (2.039e12 * MEMORY_EFFICIENCY) + KERNEL_LAUNCH_S
    )
    assert op_seconds(d, norm, "bf16", backward=True) == pytest.approx(
        1.5 * 4e9 / (2.039e12 * MEMORY_EFFICIENCY) + KERNEL_LAUNCH_S
    )
    assert op_seconds(d, Op("nothing", "elementwise", 0.0, 0.0), "bf16") == 0.0


def test_dtype_sets_the_peak_and_a_missing_one_is_an_error() -> None:
    d = device(type="H100-SXM")
    g = Op("g", "gemm", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.0, 2.0)
    bf16 = op_seconds(d, g, "bf16") - KERNEL_LAUNCH_S
    fp8 = op_seconds(d, g, "fp8") - KERNEL_LAUNCH_S
    assert bf16 == pytest.approx(2 * fp8, rel=1e-4)  # 989.4 vs 1978.9 on the sheet
    assert op_seconds(d, g, "bf16", backward=True) - 2 * KERNEL_LAUNCH_S == pytest.approx(2 * bf16)
    with pytest.raises(PlanError, match="no fp8 peak"):
        op_seconds(device(type="A100-80GB"), g, "fp8")


def test_speed_factor_scales_the_roofline() -> None:
    d = device(type="H100-SXM")
    slow = device(type="H100-SXM", speed_factor=0.5)
    g = Op("g", "gemm", 2.0 * 8192**3, 1e6, (8192, 8192, 8192), 2.0, 2.0)
    assert op_seconds(slow, g, "bf16") - KERNEL_LAUNCH_S == pytest.approx(
        2 * (op_seconds(d, g, "bf16") - KERNEL_LAUNCH_S)
    )


def test_a_gpt3_block_on_h100_is_gemm_bound_and_plausible() -> None:
    gen = TransformerGenerator.model_validate(
        {"kind": "transformer", "layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200}
    )
    shape = shape_of_generator(gen)
    ops = block_ops(shape, microbatch=1, tp=8, sp=True, cp=1, flash_attention=True)
    d = device(type="H100-SXM")
    forward = ops_seconds(d, ops, "bf16")
    backward = ops_seconds(d, ops, "bf16", backward=True)
    flops = sum(o.flops for o in ops)
    # a Megatron GPT-3 block (TP 8) reaches 50-75% of the bf16 peak in forward
    assert 0.5 < flops / forward / 989.4e12 < 0.75
    assert 1.8 < backward / forward < 2.5


def test_fused_attention_runs_below_a_gemm_of_its_shape() -> None:
    from parplan.plan.compute import ATTENTION_EFFICIENCY

    d = device(type="H100-SXM")
    gemm = Op("g", "gemm", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.0, 2.0)
    attn = Op("a", "attention", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.5, 2.0)
    ratio = (op_seconds(d, attn, "bf16") - KERNEL_LAUNCH_S) / (op_seconds(d, gemm, "bf16") - KERNEL_LAUNCH_S)
    assert ratio == pytest.approx(1 / ATTENTION_EFFICIENCY)


def test_flash2_attention_on_hopper_runs_at_its_measured_share_of_peak() -> None:
    from parplan.plan.compute import FLASH2_PEAK_SHARE

    attn = Op("a", "attention", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.5, 2.0, kernel="flash2")
    h100 = device(type="H100-SXM")
    seconds = op_seconds(h100, attn, "bf16") - KERNEL_LAUNCH_S
    assert seconds == pytest.approx(attn.flops / (989.4e12 * FLASH2_PEAK_SHARE["hopper"]))
    a100 = device(type="A100-80GB")  # no measured share for Ampere: the GEMM-relative default
    plain = Op("a", "attention", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.5, 2.0)
    assert op_seconds(a100, attn, "bf16") == op_seconds(a100, plain, "bf16")


def test_a_power_limit_slows_tensor_kernels_by_the_cube_root_and_leaves_memory_bound_ones() -> None:
    from parplan.plan.compute import tensor_clock_scale

    full = device(type="H100-SXM")
    capped = device(type="H100-SXM", power_limit_watts=500)
    assert full.tdp_watts == 700 and tensor_clock_scale(full) == 1.0
    assert tensor_clock_scale(capped) == pytest.approx((500 / 700) ** (1 / 3))
    gemm = Op("g", "gemm", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.0, 2.0)
    slow, fast = (op_seconds(d, gemm, "bf16") - KERNEL_LAUNCH_S for d in (capped, full))
    ratio = slow / fast
    assert ratio == pytest.approx((700 / 500) ** (1 / 3))
    copy = Op("c", "elementwise", 0.0, 1e9)
    assert op_seconds(capped, copy, "bf16") == op_seconds(full, copy, "bf16")
    assert tensor_clock_scale(device(type="H100-SXM", power_limit_watts=800)) == 1.0


def test_explicit_devices_take_a_type_and_the_schema_agrees() -> None:
    import jsonschema

    from parplan.config.schema import json_schema

    data = {
        "devices": [{"name": "g0", "type": "MI300X"}, {"name": "g1", "type": "L4", "memory": "20 GiB"}],
        "links": [{"a": "g0", "b": "g1", "bandwidth": "50 GB/s"}],
    }
    net = build_network(ClusterSpec.model_validate(data))
    assert net.device("g0").memory_bytes == 192 * 2**30 and net.device("g0").arch is None
    assert net.device("g1").memory_bytes == 20 * 2**30 and net.device("g1").peak_for("fp8") == 242e12
    validator = jsonschema.Draft202012Validator(json_schema("cluster"))
    assert list(validator.iter_errors(data)) == []
    assert list(validator.iter_errors({"devices": [{"name": "g0", "memory": "1 GiB"}]}))


def test_a_gemms_backward_is_its_two_gemms_each_at_its_own_shape() -> None:
    from parplan.plan.compute import backward_gemm_shapes

    d = device(type="A100-80GB")  # 108 SMs
    # forward [8192, 4096] x [4096, 1024]: 32 x 8 = 256 tiles; the weight gradient [4096, 8192] x
    # [8192, 1024] has 16 x 8 = 128 tiles: one full wave and a second of 20 tiles
    g = Op("k", "gemm", 2.0 * 8192 * 1024 * 4096, 0.0, (8192, 1024, 4096), 2.0, 2.0)
    dgrad, wgrad = backward_gemm_shapes((8192, 1024, 4096))
    assert dgrad == (8192, 4096, 1024) and wgrad == (4096, 1024, 8192)
    expected = sum(
        g.flops / (312e12 * matmul_efficiency(d, *mnk)) + KERNEL_LAUNCH_S for mnk in (dgrad, wgrad)
    )
    assert op_seconds(d, g, "bf16", backward=True) == pytest.approx(expected)
    assert matmul_efficiency(d, *wgrad) < matmul_efficiency(d, *dgrad) * 0.7  # 128 tiles in 2 waves


def test_fused_attentions_backward_runs_below_its_forward_rate() -> None:
    from parplan.plan.compute import ATTENTION_BACKWARD_RATE

    assert pytest.approx(63 / 73) == ATTENTION_BACKWARD_RATE  # FlashAttention-2 on A100, section 4.1
    for kernel, d in ((None, device(type="A100-80GB")), ("flash2", device(type="H100-SXM"))):
        attn = Op("a", "attention", 2.0 * 8192**3, 0.0, (8192, 8192, 8192), 2.5, 2.0, kernel=kernel)
        forward = op_seconds(d, attn, "bf16") - KERNEL_LAUNCH_S
        backward = op_seconds(d, attn, "bf16", backward=True) - KERNEL_LAUNCH_S
        assert backward == pytest.approx(2.5 * forward / ATTENTION_BACKWARD_RATE)
