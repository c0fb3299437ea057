"""CEL selectors (gangsched.api.cel) over devices as NVIDIA's DRA driver publishes them: what
matches, what is refused at compile time (by name), and runtime errors, which never match."""

from __future__ import annotations

import pytest

from gangsched.api.cel import compile_selector, parse_semver
from gangsched.core.resourceclaims import Device, DeviceId, Selector, Version

GI = 2**30
NV = "gpu.nvidia.com"

A100 = Device(
    DeviceId(NV, "node-a", "gpu-0"),
    "node-a",
    {
        f"{NV}/productName": "NVIDIA A100-SXM4-40GB",
        f"{NV}/architecture": "Ampere",
        f"{NV}/brand": "Nvidia",
        f"{NV}/driverVersion": Version("550.54.15"),
        f"{NV}/cudaComputeCapability": Version("8.0.0"),
        f"{NV}/index": 0,
        f"{NV}/uuid": "GPU-4b7f3a9c-0000-1111-2222-333344445555",
        "resource.kubernetes.io/pcieRoot": "pci0000:00",
    },
    {f"{NV}/memory": 40 * GI},
)


def selector(expression: str) -> Selector:
    s = compile_selector(expression)
    assert isinstance(s, Selector), s
    return s


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ('device.driver == "gpu.example.com"', False),
        ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")', True),
        ('device.attributes["gpu.nvidia.com"]["architecture"] == "Ampere"', True),
        ('device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA (A|H)100")', True),
        ('device.attributes["gpu.nvidia.com"].productName.contains("H100")', False),
        ('"productName" in device.attributes["gpu.nvidia.com"]', True),
        ('"mig" in device.attributes["gpu.nvidia.com"]', False),
        ('has(device.attributes["gpu.nvidia.com"].uuid)', True),
        ('device.attributes["gpu.nvidia.com"].index == 0', True),
        ('device.attributes["gpu.nvidia.com"].index > 0', False),
        ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', True),
        # a domain the device has nothing under is an empty map
        ('size(device.attributes["dra.example.com"]) == 0', True),
        ('!("x" in device.capacity["dra.example.com"])', True),
        # quantities
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))', False),
        ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("80Gi"))', True),
        ('device.capacity["gpu.nvidia.com"].memory == quantity("40960Mi")', True),
        ('quantity("1.5").isInteger()', False),
        ('quantity("2k").asInteger() == 2000', True),
        ('quantity("1").add(2).sub(quantity("500m")).compareTo(quantity("2.5")) == 0', True),
        ('quantity("-1m").sign() == -1', True),
        ('quantity("1Gi").asApproximateFloat() > 1e9', True),
        ('isQuantity("1Gi") && !isQuantity("1 Gi")', True),
        # versions
        (
            'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
            True,
        ),
        ('device.attributes["gpu.nvidia.com"].driverVersion.major() == 550', True),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.minor() == 0', True),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == semver("8.0.0")', True),
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
        ('semver("1.0.0-alpha").compareTo(semver("1.0.0-alpha.1")) == -1', True),
        ('semver("1.0.0-alpha.beta").isGreaterThan(semver("1.0.0-alpha.1"))', True),
        ('semver("1.0.0+build.1") == semver("1.0.0+build.2")', True),
        ('semver("v1.2", true).isLessThan(semver("1.10.0"))', True),
        ('isSemver("1.2.3") && !isSemver("1.2") && isSemver("1.2", true)', True),
        # macros and operators
        ('device.attributes["gpu.nvidia.com"].exists(k, k == "uuid")', True),
        ('device.attributes["gpu.nvidia.com"].all(k, k.size() > 2)', True),
        ("[1, 2, 3].filter(x, x > 1).size() == 2 && -1 < 0 && 7 % 2 == 1", True),
        ('device.attributes["gpu.nvidia.com"].index == 0 ? true : false', True),
    ],
)
def test_selectors(expression: str, expected: bool) -> None:
    assert selector(expression).matches(A100) is expected


@pytest.mark.parametrize(
    "expression",
    [
        # a missing attribute, a type mismatch, an invalid quantity or version, overflow
        'device.attributes["gpu.nvidia.com"].mig == false',
        'device.attributes["gpu.nvidia.com"].index == "0"',
        'device.attributes["gpu.nvidia.com"].index + "a" == "0a"',
        'quantity("bogus").sign() == 0',
        'semver("1.2").major() == 1',
        'semver("01.2.3").major() == 1',
        'device.capacity["gpu.nvidia.com"].memory >= 1',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(semver("1.0.0")) == 0',
        'quantity("1.5").asInteger() == 1',
        "9223372036854775807 + 1 > 0",
        "1 / 0 == 0",
        'device.driver.matches("[")',
        "undefined == 1",
        '"not a boolean"',
        '{"@quantity": "1/0"}.sign() == 0',
    ],
)
def test_runtime_errors_do_not_match(expression: str) -> None:
    assert selector(expression).matches(A100) is False


def test_an_error_absorbed_by_the_logic_still_matches() -> None:
    assert selector('quantity("bogus").sign() == 0 || true').matches(A100)
    assert not selector('false && quantity("bogus").sign() == 0').matches(A100)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('lowerAscii(device.driver) == "x"', "function lowerAscii is not supported"),
        ('device.driver.split(".").size() == 3', "function split is not supported"),
        ('timestamp("2025-01-01T00:00:00Z") == x && ip("::1")', "functions ip, timestamp are"),
        ("device.driver ==", "cannot parse the CEL expression: 1:17: Syntax error"),
        ("device.driver.(", "cannot parse the CEL expression"),
        ("", "the CEL expression is empty"),
        ("   ", "the CEL expression is empty"),
        ("true || " * 2000 + "true", "longer than 10240 characters"),
    ],
)
def test_refused_at_compile_time(expression: str, message: str) -> None:
    s = compile_selector(expression)
    assert isinstance(s, str)
    assert message in s


def test_compiled_once_per_text() -> None:
    assert compile_selector('device.driver == "a"') is compile_selector('device.driver == "a"')


def test_deep_nesting_does_not_crash() -> None:
    s = compile_selector("(" * 500 + "true" + ")" * 500)
    assert isinstance(s, str) or s.matches(A100) in (True, False)


def test_the_device_is_read_fresh_for_a_new_device() -> None:
    s = selector('device.attributes["gpu.nvidia.com"].index == 1')
    other = Device(DeviceId(NV, "node-a", "gpu-1"), "node-a", {f"{NV}/index": 1})
    assert not s.matches(A100)
    assert s.matches(other)


def test_huge_attribute_values_do_not_match_or_raise() -> None:
    big = Device(DeviceId(NV, "p", "d"), "n", {f"{NV}/index": 2**80}, {f"{NV}/memory": 10**40})
    assert not selector('device.attributes["gpu.nvidia.com"].index > 0').matches(big)
    assert selector(
        'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("1E"))'
    ).matches(big)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1.2.3", (1, 2, 3, ())),
        ("550.54.15", (550, 54, 15, ())),
        ("1.0.0-rc.1+build.5", (1, 0, 0, ("rc", 1))),
        ("1.2", None),
        ("v1.2.3", None),
        ("1.02.3", None),
        ("1.2.3-01", None),
        (f"{2**64}.0.0", None),
        ("1." * 300 + "0", None),
    ],
)
def test_parse_semver(text: str, parsed: object) -> None:
    assert parse_semver(text) == parsed
