"""Why gradient matching does not poison the retrained head: a pre-registered diagnosis.

Design (written and committed before any of its runs).

Question. On the MLP transfer victim at the chapter's eps (2 gray levels, 40 poisons, the
adversarial-class images nearest the target in feature space), gradient matching (gm.brew) flips
almost no target while the implicit attack (tv.implicit_attack, the head's lambda-regularized
optimum differentiated implicitly) flips several. Why?

Hypothesis (H). For a head trained to its optimum the first-order change of the target's
adversarial margin m = z_adv - max_{k != adv} z_k caused by the perturbations is the influence
(Koh & Liang 2017)

    dm_pred = -(1/N) grad_theta m^T H^{-1} dG,   dG = sum_p [grad l(x_p + delta_p) - grad l(x_p)],

(H the Hessian of the training objective, N the training set's size), whereas gradient matching
maximizes the Euclidean cosine between sum_p grad l(x_p + delta_p) and the target's adversarial
gradient at the surrogate, ignoring both H^{-1} and the sum's magnitude. H predicts that
gradient matching's poisons win on the cosine but lose on dm_pred, and that dm_pred orders the
arms as the victims' flips do.

Setting (the committed implicit task's, reused exactly): the control's split, MLP extractor (seed
EXTRACTOR_SEED), surrogate head (the book's AdamW head, seed SURROGATE_SEED), 32 targets
(TARGET_SEED), the nearest images as poisons (the same images for every arm), lambda by the
implicit task's rule (tv.norm_matched_lambda: the optimum as large as the surrogate head).
Arms (poisons of each arm on the same images):
  "matching": gm.brew with the control's attack (250 steps, best of 2 starts, ATTACK_SEED),
      the oracle task's "matching, nearest images" arm;
  "implicit": tv.implicit_attack, 100 steps, the implicit task's "implicit" arm;
  "random, size of matching", "random, size of implicit": gm.random_perturbations of each arm's
      l2 and l_inf size per poison (seed ATTACK_SEED + 1), as in those tasks.

Measurements, per target and arm:
  (1) the matching loss 1 - cos on the surrogate (gm.matching_loss, what brew minimizes), and the
      same cosine at the regularized optimum theta_0 (below), which separates "other parameters"
      from "H^{-1} and magnitude";
  (2) dm_pred at theta_0 = the lambda-optimum on the clean set with the poisons' unperturbed
      images appended (the victim's head when delta = 0), H its Hessian there (T.5), N = n + P,
      grad m = (e_adv - e_k) (phi(x_t), 1) with k the runner-up class at theta_0; and its factors
          dm_pred = kappa_t * size * align,
          size  = ||dG|| / (P * c),  c = the median over the clean set of ||grad l(x_n)|| at theta_0,
          align = cos(dG, -H^{-1} grad m)  (Euclidean cosine with the H^{-1}-weighted direction),
          kappa_t = P c ||H^{-1} grad m|| / N  (the same for every arm of a target);
  (3) the actual change of the margin at the regularized optimum, dm = m(theta*(delta)) - m(theta_0)
      (theta*(delta) by tv.optimal_head, every arm), and the committed AdamW victims' flips (the
      book's head, 40 epochs, seeds ORACLE_SEEDS: the oracle task's "matching, nearest images" and
      its random control, the implicit task's "adamw 40" for "implicit" and its random control).
  The random arms' poisons are the committed tasks' exactly (same code, seeds and inputs); the
  recomputed implicit poisons are checked against the committed optimum margins (max abs
  difference recorded).

Pre-registered criteria (medians over the 32 targets):
  (a) matching's median matching loss (surrogate) is below the implicit attack's;
  (b) matching's median dm_pred is below one third of the implicit attack's;
  (c) dm_pred orders the arms as the victims' flips do: for every two arms whose numbers of
      targets flipped (any of the 4 AdamW seeds, committed) differ, the arm with more flips has the
      larger median dm_pred;
  (d) dm_pred tracks dm: Spearman's rank correlation over all (target, arm) points >= 0.5.
Outcome: "supported" if (a)-(d) all hold; "refuted" if (a) fails, or matching's median dm_pred
is at least two thirds of the implicit attack's, or the correlation in (d) is below 0.2; "mixed"
otherwise. The factor (size or align) whose ratio of medians (matching / implicit) is the smaller
is reported as the larger part of the gap (descriptive, no threshold).
"""
