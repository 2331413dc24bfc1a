"""The model as the core sees it: the framework-free graph and its nodes, each node's quantization
configurations, and the contract a framework adapter fulfils."""
