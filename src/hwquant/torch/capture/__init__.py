"""A PyTorch model into the framework-free core graph, by the first of three routes that works (routes.py):
torch.fx (fx_graph.py), torch.export (export_route.py), tracing on the real inputs (concrete_route.py); the
layers written as functions or as ONNX's chains of elementary operators folded back into layers; ONNX files
and TorchScript imported as modules."""
