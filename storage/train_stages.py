"""The stages that train a checkpoint on `train_rows` (tasks/train.py): the solver's `train`, and
a separate proposer's `train-proposer` (`[proposer] separate`). Each works in
`<round>/.<stage>-<fp12>/` while it trains; the audit, recovery, the settings and the progress
lines tell them from the other stages by these names. Imports nothing, so the config and the
CLI can read it at no cost."""

PROPOSER_TRAIN_STAGE = "train-proposer"
TRAIN_STAGES = ("train", PROPOSER_TRAIN_STAGE)
