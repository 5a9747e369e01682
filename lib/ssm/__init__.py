"""Part II's models: diagonal state space models (diagonal), the S4D network (s4d), extrapolation
with linear RNNs and GRUs (extrapolation, extrapolation_protocols, gru_students); the compiled
kernels beside the module each serves."""
