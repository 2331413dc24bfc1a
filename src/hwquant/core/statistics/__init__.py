"""What is measured on the data and the quantization parameters chosen from it: streaming tensor
statistics, the threshold / range / lookup-table search, the error a tensor's readers see, writing the
parameters and biases into nodes."""
