"""Parts I and III: linear, ReLU, convolutional and tensor networks (linear_nets, relu_nets,
conv_nets, tensor_nets, tensor_directions), the paper's step bounds (step_bounds),
saddle-to-saddle dynamics (saddles, escape_dynamics)."""
