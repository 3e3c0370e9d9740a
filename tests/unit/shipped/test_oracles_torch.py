"""The smoke oracles' torch path (src/pinmatrix/shipped/_oracles.py), which the smokes take on the GPU's own tensors,
on the CPU without torch: a stand-in ``torch`` (a numpy array subclass whose type lives in module ``torch``, with
the torch methods the oracles call: double, clone, long, sum(dim=), detach().cpu().tolist(), view(-1), and
torch.tensor/torch.stack with their dtype and device) must give exactly what the numpy path gives, keep the
tensors' device, and leave every input untouched. A numpy call left in the torch path (axis= for dim=, astype
for double) or a tensor made on the wrong device fails here."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest
from test_oracles import _nvfp4_case, bf16_gemm, nvfp4_operand, o, swizzle, to_bf16

DEVICE = "cuda:0"


class Tensor(np.ndarray):
    """What the oracles need of a torch.Tensor, and no numpy-only method: ``astype``, ``copy``, ``sum(axis=)`` and
    ``tolist`` without ``detach().cpu()`` raise, so the numpy path cannot be taken by mistake."""

    device: str = DEVICE
    detached: bool = False
    on_cpu: bool = False

    def __array_finalize__(self, obj: Any) -> None:
        self.device = getattr(obj, "device", DEVICE)
        self.detached = False
        self.on_cpu = False

    def _np(self) -> np.ndarray:
        return self.view(np.ndarray)

    def astype(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("astype on a torch tensor: the numpy path")

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("copy on a torch tensor: the numpy path")

    def tolist(self) -> Any:
        if not (self.detached and self.on_cpu):
            raise AssertionError("tolist without detach().cpu()")
        return self._np().tolist()

    def sum(self, *args: Any, dim: Any = None, **kwargs: Any) -> Any:
        if args or kwargs:
            raise AssertionError(f"sum{args or kwargs}: torch reduces over dim=")
        return _tensor(self._np().sum(axis=dim), self.device)

    def double(self) -> Any:
        return _tensor(self._np().astype(np.float64), self.device)

    def long(self) -> Any:
        return _tensor(self._np().astype(np.int64), self.device)

    def clone(self) -> Any:
        return _tensor(self._np().copy(), self.device)

    def detach(self) -> Any:
        out = _tensor(self._np(), self.device)
        out.detached = True
        return out

    def cpu(self) -> Any:
        out = _tensor(self._np(), "cpu")
        out.detached, out.on_cpu = self.detached, True
        return out

    def view(self, *shape: Any) -> Any:  # torch's view(-1); numpy's own view(type) still works
        if shape and all(isinstance(s, int) for s in shape):
            return self.reshape(*shape)
        return super().view(*shape)

    def reshape(self, *shape: Any, **kwargs: Any) -> Any:  # torch takes -1 for the one unknown size, nothing lower
        sizes = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        if any(isinstance(s, int) and s < -1 for s in sizes):
            raise RuntimeError(f"invalid shape dimension {min(sizes)}")
        return super().reshape(*shape, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, Tensor):
            key = key._np()
        return super().__getitem__(key)


Tensor.__module__ = "torch"  # what the oracles look at: the type's module


def _tensor(values: Any, device: str = DEVICE) -> Any:
    out = np.asarray(values).view(Tensor)
    out.device = device
    return out


def _fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    made: list[tuple[str, str]] = []

    def tensor(values: Any, *, dtype: str, device: str) -> Any:
        made.append((dtype, device))
        return _tensor(np.asarray(values, dtype=dtype), device)

    def stack(parts: Any, *, dim: int) -> Any:
        made.append(("stack", dim))
        return _tensor(np.stack([p._np() for p in parts], axis=dim), parts[0].device)

    torch.tensor, torch.stack, torch.made = tensor, stack, made  # type: ignore[attr-defined]
    torch.float64, torch.int64 = "float64", "int64"  # type: ignore[attr-defined]
    return torch


@pytest.fixture()
def torch(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    fake = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


def test_a_tensor_is_told_from_an_array_by_its_module() -> None:
    assert o._is_torch(_tensor([1.0])) and not o._is_torch(np.array([1.0]))
    assert not o._is_torch([1.0]) and not o._is_torch(1.0)
    assert o._is_torch(type("Parameter", (), {"__module__": "torch.nn.parameter"})())
    assert not o._is_torch(type("Box", (), {"__module__": "torchvision.ops"})())  # torchvision is not torch


def test_the_tile_check_on_tensors_is_the_tile_check_on_arrays(torch: types.ModuleType) -> None:
    rng = np.random.default_rng(5)
    a = to_bf16(rng.standard_normal((128, 256)).astype(np.float32))
    b = to_bf16(rng.standard_normal((256, 192)).astype(np.float32))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out = o.zero_row(bf16_gemm(a, b), 70)
    on_gpu = _tensor(out.astype(np.float32))
    ref_gpu = _tensor(ref.astype(np.float32))
    expected = o.check_tiles(out.astype(np.float32), ref.astype(np.float32), 0.01)
    got = o.check_tiles(on_gpu, ref_gpu, 0.01)
    assert got == expected and got.row_at == 70 and not got.ok
    batched = o.check_tiles(_tensor(np.stack([out, out])), _tensor(np.stack([ref, ref])), 0.01)
    assert batched.row_at == 70 and batched.worst_row == pytest.approx(1.0)
    assert o.max_abs_diff(_tensor(np.array([1.0, 5.0])), _tensor(np.array([1.5, 1.0]))) == 4.0
    assert o.max_abs_diff(_tensor(np.array(2.0)), _tensor(np.array(-1.0))) == 3.0  # a 0-d tensor
    assert o.count_outside(_tensor(np.array([1.0, 1.5, np.nan])), _tensor(np.array([1.0, 1.0, 1.0]))) == 2


def test_the_decoders_make_their_tables_on_the_inputs_device(torch: types.ModuleType) -> None:
    raw = np.array([[0x38, 0x7E], [0x01, 0xB8]], dtype=np.uint8)
    decoded = o.decode_e4m3(_tensor(raw))
    assert isinstance(decoded, Tensor) and decoded.device == DEVICE
    assert decoded._np().tolist() == [[1.0, 448.0], [2.0**-9, -1.0]]
    assert torch.made == [("float64", DEVICE)]
    packed = np.array([[0x21, 0x9F]], dtype=np.uint8)
    unpacked = o.unpack_e2m1(_tensor(packed))
    assert unpacked.device == DEVICE and unpacked._np().tolist() == [[0.5, 1.0, -6.0, -0.5]]
    assert ("stack", -1) in torch.made  # the nibbles stacked by torch, on the device
    flat = np.arange(256 * 8, dtype=np.int64)
    scales = o.unswizzle_scales(_tensor(flat), 256, 8)
    assert scales._np().tolist() == o.sf_offsets(256, 8)
    assert ("int64", DEVICE) in torch.made


def test_nvfp4_dequantisation_on_tensors_is_exact(torch: types.ModuleType) -> None:
    packed, sf, values = nvfp4_operand(128, 256)
    deq = o.dequantize_nvfp4(_tensor(packed), _tensor(sf), 4.0)
    assert deq.device == DEVICE and np.array_equal(deq._np(), values / 4.0)


def test_the_faults_on_tensors_copy_their_input(torch: types.ModuleType) -> None:
    a4, a_sf, m, k, _, _ = _nvfp4_case()
    sf = _tensor(a_sf)
    swapped, blocks = o.swap_block_scales(sf, 0, m, k // 16)
    expected, same_blocks = o.swap_block_scales(a_sf, 0, m, k // 16)
    assert blocks == same_blocks and np.array_equal(swapped._np(), expected) and np.array_equal(sf._np(), a_sf)
    assert isinstance(swapped, Tensor) and swapped.shape == a_sf.shape
    x = _tensor(np.ones((2, 64, 128)))
    for y in (o.zero_k_block(x, 1, 16), o.zero_tile(x, 0, 1), o.zero_row(x, 3)):
        assert isinstance(y, Tensor) and y._np().sum() < x._np().sum()
    assert x._np().min() == 1.0  # untouched
    assert o.copy(x) is not x and np.array_equal(o.copy(x)._np(), x._np())


def test_the_planted_probe_on_a_tensor_moves_the_last_element_of_a_copy(torch: types.ModuleType) -> None:
    ref = _tensor(np.full((2, 64), -1.0, dtype=np.float32))
    probe = o.planted_probe(ref)
    assert isinstance(probe, Tensor) and probe._np()[1, 63] == -1.0 + 1 + 4
    assert (ref._np() == -1.0).all() and o.count_outside(probe, ref) == 1


def test_equal_scales_on_a_tensor_are_refused(torch: types.ModuleType) -> None:
    sf = _tensor(swizzle(np.full((128, 8), 0x38, dtype=np.uint8)))
    with pytest.raises(ValueError, match="every block scale is 1.0"):
        o.swap_block_scales(sf, 0, 128, 8)
