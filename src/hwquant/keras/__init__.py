"""The Keras 3 adapter (any Keras backend: TensorFlow, PyTorch, JAX). Loads keras on first use:
`import hwquant` needs neither keras nor tensorflow."""
