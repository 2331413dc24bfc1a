"""A quantized PyTorch model written for deployment and read back: ONNX (QDQ or MCTQ) and TorchScript
export, the forms the IMX500 converter accepts, Sony's edge-mdt-cl layers, the model's metadata, and
hwquant's own save / load format with what a saved model may name."""
