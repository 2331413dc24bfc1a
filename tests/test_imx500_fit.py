"""Fitting a network into the IMX500's memory (exporter/imx500_fit.py): the converter's report, the budget
it leaves, and the head nodes kept at 16 bits, found in the captured graph at any scale."""
import json

import pytest
import torch
from torch import nn

from hwquant.exporter.imx500_fit import (CHIP_MEMORY_BYTES, ChipMemory, anchors_of, next_weights_budget, parse_size,
                                         pixel_coordinate_nodes, read_memory_report)
from hwquant.torch.capture.routes import capture

REPORT = {"Memory Report": {"Name": "model_imx", "Runtime Memory Physical Size": "4.48MB",
                            "Model Memory Physical Size": "2.49MB", "Reserved Memory": "1.00KB",
                            "Memory Usage": "6.97MB", "Total Memory Available On Chip": "8.00MB",
                            "Memory Utilization": "88%", "Fit In Chip": True}}


def test_sizes_as_the_converter_writes_them():
    assert parse_size("570.00KB") == 570 * 1024
    assert parse_size("8.00MB") == CHIP_MEMORY_BYTES
    assert parse_size("12B") == 12
    with pytest.raises(ValueError, match="not a size"):
        parse_size("4.48 megabytes")


def test_memory_report_read_from_the_converters_folder(tmp_path):
    assert read_memory_report(tmp_path) is None
    (tmp_path / "model_imx_MemoryReport.json").write_text(json.dumps(REPORT))
    memory = ChipMemory.from_report(read_memory_report(tmp_path))
    assert memory.fits and memory.available == CHIP_MEMORY_BYTES
    assert memory.model == round(2.49 * 2 ** 20) and memory.runtime == round(4.48 * 2 ** 20)


def test_next_budget_leaves_the_runtime_memory_and_a_margin():
    over = ChipMemory(model=6 * 2 ** 20, runtime=3 * 2 ** 20, total=9 * 2 ** 20, available=CHIP_MEMORY_BYTES, fits=False)
    # hwquant's figure for the same weights is 5 % below the converter's model size
    budget = next_weights_budget(over, weights_figure=over.model / 1.05)
    model_size = budget * 1.05
    assert model_size + over.runtime <= CHIP_MEMORY_BYTES * 0.98 + 1
    assert model_size + over.runtime >= CHIP_MEMORY_BYTES * 0.97
    full = ChipMemory(model=2 ** 20, runtime=9 * 2 ** 20, total=10 * 2 ** 20, available=CHIP_MEMORY_BYTES, fits=False)
    assert next_weights_budget(full, 2 ** 20) < 0  # the activations alone overflow: no budget helps


class TinyHead(nn.Module):
    """A YOLO-like head: box distances turned into corners around anchor points and scaled by the strides
    (constants whose last axis is the anchors), and class scores that are not coordinates."""

    def __init__(self, imgsz=(64, 96), strides=(8.0, 16.0)):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=8, padding=1)
        self.box = nn.Conv2d(8, 4, 1)
        self.cls = nn.Conv2d(8, 3, 1)
        n = anchors_of(imgsz, strides)
        self.register_buffer("anchors", torch.rand(1, 2, n) * 64)
        self.register_buffer("strides", torch.full((1, n), 8.0))
        self.first = int(imgsz[0] // 8 * imgsz[1] // 8)

    def forward(self, x):
        f = torch.relu(self.conv(x))
        box = self.box(f).flatten(2)
        box = torch.cat([box, box[:, :, : self.anchors.shape[-1] - box.shape[-1]]], 2)  # stand-in for the 2nd level
        lt, rb = box.chunk(2, 1)
        corners = torch.cat([self.anchors - lt, self.anchors + rb], 1) * self.strides
        scores = torch.sigmoid(self.cls(f).flatten(2))
        return corners.transpose(1, 2), scores


def test_pixel_coordinate_nodes_are_the_decoding_arithmetic():
    model = TinyHead().eval()
    graph = capture(model, [torch.rand(1, 3, 64, 96)])
    found = pixel_coordinate_nodes(graph, anchors_of((64, 96), (8.0, 16.0)))
    types = sorted(str(getattr(graph.node(n).type, "__name__", graph.node(n).type)) for n in found)
    assert types == ["add", "cat", "mul", "sub"]  # the corners, their concatenation, the scaling; not the scores
    assert anchors_of((640, 640), (8, 16, 32)) == 8400 and anchors_of((480, 640), (8, 16, 32)) == 6300
