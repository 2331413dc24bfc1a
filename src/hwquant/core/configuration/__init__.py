"""What a user sets and how it is checked: QuantizationConfig and CoreConfig with their parts, the
error methods, the network editor's rules, the seed API's TPC overrides, FrameworkInfo, the value checks."""
