"""Part II's poisoning: Theorem 1 (theorem1) and its Appendix A (appendix_a), the Figure-2 / Table
dynamics (dynamics), greedy learning (greedy_learning), the authors' protocol and random streams
(authors_protocol, keras_streams), gradient matching on real data and its victims
(gradient_matching, mlp_victim, transfer_victim), and the evasion attack that measures how far an
ε reaches on those data (evasion)."""
