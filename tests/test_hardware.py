import pytest

from agent.errors import BadInput
from tools.hardware import NAMES, cpu_profile, get_hardware


def test_profiles_from_facts():
    m = get_hardware("mi355x")
    assert (m.vendor, m.hbm_gb, m.hbm_tb_s, m.gpus_per_node) == ("amd", 288, 8.0, 8)
    assert m.peak_tflops("fp4") == 10066 and m.is_rocm
    assert get_hardware("b200").tflops["fp8"] == 4500
    # no FP4 units on H200: FP4 weights run in FP8
    assert get_hardware("h200").peak_tflops("fp4") == 1979
    assert get_hardware("mi355x").usd_per_gpu_h < get_hardware("b300").usd_per_gpu_h


def test_cpu_is_probed():
    c = get_hardware("cpu")
    assert c.vendor == "cpu" and c.compute_units >= 1 and c.tflops["bf16"] > 0 and c.hbm_gb > 0


def test_the_cpu_profile_streams_at_the_bandwidth_the_probe_measured():
    # machines of one kind measured 8.3 and 10.4 GB/s; a 10 GB/s floor had made them look alike
    p = get_hardware("cpu")
    assert p.hbm_tb_s * 1e3 == pytest.approx(p.scaleup_gb_s)
    assert cpu_profile(2, 16.0, 2e11, 8.3e9).hbm_tb_s == pytest.approx(0.0083)  # the slower machine, as measured


def test_unknown_hardware():
    with pytest.raises(BadInput) as e:
        get_hardware("tpu9")
    assert "tpu9" in str(e.value) and all(n in str(e.value) for n in NAMES)
